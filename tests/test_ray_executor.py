"""The Ray executor (runner/cluster/ray.py): jobs and data-parallel replicas as Ray tasks
on a local Ray instance of 2 CPUs, compared with the local executor; a killed worker is retried."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from runner import load_recipe
from runner.cluster.ray import split
from runner.run.isolate import run_isolated
from runner.run.job import Job, RunOptions, Unit, group_by_engine, make_unit

ROOT = Path(__file__).resolve().parents[1]
DEMO_DATA = ROOT / "runner" / "demo" / "demo-ja.json"
FAKE = {"kind": "fake", "reply": "{{ answers[0] }}", "delay_s": 0.0}
COMPARED = (
    "id",
    "prompt",
    "output",
    "answers",
    "prompt_tokens",
    "output_tokens",
    "exact_match",
    "char_f1",
)


def _recipe(
    tmp_path: Path, name: str, engine: dict | None = None, model: str = "nobody/fake", **extra
) -> Path:
    """A recipe file on the demo data; the fake engine with a model id that needs no tokenizer by
    default."""
    d = {
        "name": name,
        "model": {"id": model},
        "engine": engine or FAKE,
        "dataset": {"format": "squad", "path": str(DEMO_DATA)},
        "prompt": {"template": "jsquad.j2", "system_template": "jsquad-system.j2"},
        "sampling": {"temperature": 0, "max_tokens": 16},
        "metrics": ["exact_match", "char_f1"],
        **extra,
    }
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return p


def _job(paths: list[Path], out: Path, limit: int | None = None, progress: bool = False) -> Job:
    opts = RunOptions(out=out, limit=limit, progress=progress)
    return Job(units=tuple(make_unit(load_recipe(p), opts) for p in paths), options=opts)


def _samples(out: Path, name: str) -> list[dict]:
    lines = (out / name / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    return [{k: d.get(k) for k in COMPARED} for d in map(json.loads, lines)]


def _stored(out: Path, name: str) -> dict:
    return json.loads((out / name / "results.json").read_text(encoding="utf-8"))


def _ray_facts(d: dict) -> tuple[str, list[dict]]:
    """(executor, replica rows) from results.json."""
    return d["executor"], d["replicas"]


def _run(jobs: list[Job], **kw):
    from runner.cluster.ray import run_jobs_on_ray

    return run_jobs_on_ray(jobs, **kw)


def test_split_keeps_dataset_order_in_contiguous_shards(tmp_path):
    job = _job(
        [
            _recipe(tmp_path, "big"),
            _recipe(
                tmp_path, "small", dataset={"format": "squad", "path": str(DEMO_DATA), "limit": 2}
            ),
        ],
        tmp_path / "out",
        limit=10,
    )
    reps = split(job, 3)
    assert [r.bounds for r in reps] == [
        {"big": (0, 4), "small": (0, 1)},
        {"big": (4, 7), "small": (1, 2)},
        {"big": (7, 10)},
    ]
    big = [
        ex.id for r in reps for u in r.job.units if u.name == "big" for ex in u.prepared.examples
    ]
    assert big == [ex.id for ex in job.units[0].prepared.examples]
    # never more replicas than examples
    assert len({r.tag for r in reps}) == 3 and len(split(job, 50)) == 10
    assert split(job, 1)[0].job is job


def test_samples_sent_by_the_tasks_go_to_the_driver_partial_file_each_once(tmp_path):
    from runner.cluster.ray import _Call
    from runner.run.resume import load_partial

    job = _job([_recipe(tmp_path, "p")], tmp_path / "out", limit=4)
    call, unit = _Call([job], 2, None, None, {}), job.units[0]

    def line(i: int) -> str:
        d = dict(id=unit.prepared.examples[i].id, output=f"o{i}", prompt="p", answers=["a"])
        return json.dumps({**d, "prompt_tokens": 1, "output_tokens": 1}) + "\n"

    call._keep("p", (line(0) + line(1)).encode())
    call._keep("p", (line(1) + line(2)).encode())  # a retried task sends its samples again
    path = tmp_path / "out" / "p" / "samples.partial.jsonl"
    head = json.dumps({"_run_key": unit.run_key}) + "\n"
    assert path.read_text() == head + line(0) + line(1) + line(2)
    kept = load_partial(path, unit.run_key, ["exact_match"])
    assert [s.output for s in kept.values()] == ["o0", "o1", "o2"]


def test_samples_a_task_sent_as_it_ended_leave_no_partial_file_beside_its_results(tmp_path):
    """A task's last samples event can reach the driver after its result was merged (the queue
    and the task's return race): its samples are the merged run's, so no partial file comes back
    beside complete results."""
    from dataclasses import replace

    from runner.cluster.ray import _Call, _shard
    from runner.run.loop import run_job

    out, task = tmp_path / "out", tmp_path / "task"
    job = _job([_recipe(tmp_path, "p")], out, limit=3)
    call = _Call([job], 1, lambda r: None, lambda e: None, {})
    there = replace(job.options, out=task)
    run_job(replace(job, options=there))
    lines = (task / "p" / "samples.jsonl").read_bytes()
    call._keep("p", lines.splitlines(keepends=True)[0])
    shard = _shard(job.units[0], there.folder("p"), task, out)
    call._received(0, split(job, 1)[0], {"p": shard})
    assert call.results[0][0].status == "ok" and not (out / "p" / "samples.partial.jsonl").exists()
    call._keep("p", lines)  # late
    assert not (out / "p" / "samples.partial.jsonl").exists()


@pytest.mark.slow
def test_job_on_ray_writes_what_the_local_executor_writes(tmp_path, ray_local):
    p = _recipe(tmp_path, "one", engine={**FAKE, "delay_s": 0.01})
    local = run_isolated(_job([p], tmp_path / "local"))[0]
    got = []
    res = _run([_job([p], tmp_path / "ray")], on_result=got.append)
    assert [r.name for r in got] == ["one"] and res[0].status == local.status == "ok"
    assert _samples(tmp_path / "ray", "one") == _samples(tmp_path / "local", "one")
    stored = _stored(tmp_path / "ray", "one")
    assert stored["n_samples"] == 36 and stored["scores"] == local.scores
    assert (
        stored["tokens"] == local.tokens.model_dump()
        and stored["prefix"] == local.prefix.model_dump()
    )
    executor, rows = _ray_facts(stored)
    assert (
        executor == "ray"
        and [r["examples"] for r in rows] == [[0, 36]]
        and rows[0]["attempts"] == 1
    )
    assert rows[0]["pid"] != os.getpid() and rows[0]["node_ip"]
    assert str(ray_local) not in json.dumps(stored)  # worker paths rewritten to the driver's --out
    assert "Ray replica 1 of 1" in (tmp_path / "ray" / "one" / "engine.log").read_text()
    assert not (tmp_path / "ray" / "one" / "samples.partial.jsonl").exists()
    assert not list((ray_local / "runner-ray").iterdir())  # the worker-side folder is cleaned up


@pytest.mark.slow
def test_study_of_several_jobs_runs_side_by_side(tmp_path, ray_local):
    from runner.inputs.prepare import prepare
    from runner.run.resume import run_key

    slow = {**FAKE, "delay_s": 0.05}
    paths = [
        _recipe(tmp_path, "a", engine=slow),
        _recipe(tmp_path, "a-short", engine=slow, sampling={"temperature": 0, "max_tokens": 2}),
        _recipe(tmp_path, "b", engine={**slow, "reply": "b"}),
        # ended by its timeout on the worker
        _recipe(tmp_path, "bad", engine={**FAKE, "delay_s": 2.0}, timeout_s=1),
    ]
    opts = RunOptions(out=tmp_path / "out", limit=12, progress=False)
    out = opts.out
    units = [make_unit(load_recipe(p), opts) for p in paths]
    gpu = load_recipe(_recipe(tmp_path, "tp2", engine={"kind": "vllm", "tensor_parallel_size": 2}))
    # not make_unit: vLLM need not be installed to see there is no room for it
    prep = prepare(gpu, 12)
    units.append(
        Unit(
            loaded=gpu,
            prepared=prep,
            run_key=run_key(gpu.recipe.canonical(), prep.inputs, 12, None),
        )
    )
    groups = group_by_engine(units)
    assert [[u.name for u in g] for g in groups] == [["a", "a-short"], ["b"], ["bad"], ["tp2"]]
    seen: list[tuple[str, str]] = []

    def on_event(e: dict) -> None:
        if e["event"] == "started":
            seen.append(("started", e["tag"]))

    res = _run(
        [Job(units=g, options=opts) for g in groups],
        on_event=on_event,
        on_result=lambda r: seen.append(("result", r.name)),
    )
    assert [(r.name, r.status) for r in res] == [
        ("a", "ok"),
        ("a-short", "ok"),
        ("b", "ok"),
        ("bad", "failed"),
        ("tp2", "failed"),
    ]
    assert "timed out after 1 s" in res[3].error and "needs 2 GPU(s)" in res[4].error
    assert seen[0] == ("result", "tp2")  # failed before anything ran
    assert [k for k, _ in seen[1:3]] == ["started", "started"]  # then two jobs at once on 2 CPUs
    assert res[1].timings.load_s == 0.0 and res[1].engine_of == "a"  # one engine, shared
    assert {d["output"] for d in _samples(out, "b")} == {"b"} and len(
        _samples(out, "a-short")
    ) == 12
    for name in ("a", "a-short", "b", "bad", "tp2"):
        assert _stored(out, name)["status"] == ("ok" if name in ("a", "a-short", "b") else "failed")


@pytest.mark.slow
def test_replicas_give_the_outputs_of_one_process(tmp_path, ray_local, capsys):
    paths = [
        _recipe(tmp_path, "m", engine={**FAKE, "delay_s": 0.05}),
        _recipe(
            tmp_path,
            "m-one",
            engine={**FAKE, "delay_s": 0.05},
            dataset={"format": "squad", "path": str(DEMO_DATA), "limit": 1},
        ),
    ]
    run_isolated(_job(paths, tmp_path / "local", limit=10))
    capsys.readouterr()
    res = _run([_job(paths, tmp_path / "ray", limit=10, progress=True)], replicas=3)
    bars = capsys.readouterr().err
    # one bar per recipe, over its replicas
    assert "m: 100%" in bars and "10/10" in bars and "1/1" in bars
    assert [(r.name, r.status, r.n_samples) for r in res] == [("m", "ok", 10), ("m-one", "ok", 1)]
    for name in ("m", "m-one"):
        assert _samples(tmp_path / "ray", name) == _samples(tmp_path / "local", name)
        ray_d, local_d = _stored(tmp_path / "ray", name), _stored(tmp_path / "local", name)
        for key in ("tokens", "scores", "prefix", "n_dataset"):
            assert ray_d[key] == local_d[key], key
    _, rows = _ray_facts(_stored(tmp_path / "ray", "m"))
    assert [r["examples"] for r in rows] == [[0, 4], [4, 7], [7, 10]]
    assert len({r["pid"] for r in rows}) >= 1 and all(r["status"] == "ok" for r in rows)
    assert [r["examples"] for r in _ray_facts(_stored(tmp_path / "ray", "m-one"))[1]] == [[0, 1]]
    assert any("3 data-parallel replicas" in n for n in res[0].notes)


@pytest.mark.slow
def test_replicas_of_the_builtin_transformers_model_match_one_process(tmp_path, ray_local):
    p = _recipe(
        tmp_path,
        "hf",
        engine={"kind": "transformers", "device": "cpu"},
        model="builtin:demo",
        sampling={"temperature": 0, "max_tokens": 8},
    )
    run_isolated(_job([p], tmp_path / "local", limit=5))
    res = _run([_job([p], tmp_path / "ray", limit=5)], replicas=2)
    assert res[0].status == "ok", res[0].error
    assert _samples(tmp_path / "ray", "hf") == _samples(tmp_path / "local", "hf")
    assert res[0].timings.load_s > 0 and res[0].timings.generate_s > 0


@pytest.mark.slow
def test_a_killed_worker_is_retried_with_nothing_lost_or_twice(tmp_path, ray_local):
    p = _recipe(tmp_path, "k", engine={**FAKE, "delay_s": 0.2})
    job = _job([p], tmp_path / "out", limit=20)
    first = split(job, 2)[0].tag
    killed: dict[str, int] = {}
    pids: dict[str, int] = {}

    def on_event(e: dict) -> None:
        if e["event"] == "started":
            pids.setdefault(e["tag"], e["pid"])
        # replica 1 has finished samples: kill its Ray worker
        elif e["tag"] == first and not killed:
            killed["pid"] = pids[first]
            os.kill(pids[first], signal.SIGKILL)

    res = _run([job], replicas=2, on_event=on_event)[0]
    assert killed and res.status == "ok", res.error
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)
    ids = [d["id"] for d in _samples(tmp_path / "out", "k")]
    assert ids == [ex.id for ex in job.units[0].prepared.examples]  # all, once, in order
    assert [d["output"] for d in _samples(tmp_path / "out", "k")] == [
        ex.answers[0] for ex in job.units[0].prepared.examples
    ]
    rows = _ray_facts(_stored(tmp_path / "out", "k"))[1]
    assert rows[0]["attempts"] == 2 and rows[0]["pid"] != killed["pid"] and rows[1]["attempts"] == 1
    assert 1 <= rows[0]["reused_samples"] < 10 and res.reused_samples == rows[0]["reused_samples"]
    assert not list((ray_local / "runner-ray").iterdir())


@pytest.mark.slow
def test_finished_samples_in_the_driver_folder_are_continued(tmp_path, ray_local):
    p = _recipe(tmp_path, "s")
    out = tmp_path / "out"
    job = _job([p], out, limit=8)
    unit = job.units[0]
    seeded = [unit.prepared.examples[i] for i in (0, 5, 7)]  # in both replicas' shares
    lines = [{"_run_key": unit.run_key}] + [
        {
            "id": ex.id,
            "prompt": "p",
            "output": "SEEDED",
            "answers": list(ex.answers),
            "prompt_tokens": 1,
            "output_tokens": 1,
            "exact_match": 0.0,
            "char_f1": 0.0,
            "seconds": 0.5,
        }
        for ex in seeded
    ]
    (out / "s").mkdir(parents=True)
    (out / "s" / "samples.partial.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = _run([job], replicas=2)[0]
    assert res.status == "ok" and res.reused_samples == 3 and res.n_samples == 8
    outputs = {d["id"]: d["output"] for d in _samples(out, "s")}
    assert [outputs[ex.id] for ex in seeded] == ["SEEDED"] * 3
    assert sum(o == "SEEDED" for o in outputs.values()) == 3
    assert not (out / "s" / "samples.partial.jsonl").exists()


DRIVER = """
import json, sys
from pathlib import Path
import ray
from runner.run.job import make_unit
from runner import load_recipe
from runner.run.job import Job, RunOptions
from runner.cluster.ray import run_jobs_on_ray
recipe, out, address = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
for where in ("local", "cluster"):
    opts = RunOptions(out=out / where, limit=6, progress=False)
    job = Job(units=(make_unit(load_recipe(recipe), opts),), options=opts)
    res = run_jobs_on_ray([job], address=address if where == "cluster" else None, replicas=2)[0]
    print(json.dumps([where, res.status, res.n_samples, ray.is_initialized()]), flush=True)
"""


@pytest.mark.slow
def test_a_local_instance_per_call_and_an_existing_cluster(tmp_path, ray_local):
    """Without an address a call starts and stops its own Ray; with one it joins that cluster (here
    the module's), shipping the runner package to its workers."""
    import subprocess
    import sys

    import ray

    address = ray.get_runtime_context().gcs_address
    # Ray 2.60 clusters: token auth
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")}
    p = _recipe(tmp_path, "x")
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, str(p), str(tmp_path / "out"), address],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert [json.loads(x) for x in run.stdout.splitlines()] == [
        ["local", "ok", 6, False],
        ["cluster", "ok", 6, False],
    ]
    assert _samples(tmp_path / "out" / "cluster", "x") == _samples(tmp_path / "out" / "local", "x")
    assert _stored(tmp_path / "out" / "cluster", "x")["environment"]["ray"]["address"] == address
