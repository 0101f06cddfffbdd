"""`runner go --executor ray` (runner/cli/go.py, the Executor): what it refuses before anything
runs, and runs of the fake engine on one local Ray instance of 2 CPUs shared by the module
(slow)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runner import load_recipe
from runner.base.errors import RunnerError
from runner.cli import cli
from runner.run.job import Job, RunOptions, engine_key, make_unit
from tests.cli_output import user_error

ROOT = Path(__file__).resolve().parents[1]
DEMO_DATA = ROOT / "runner" / "demo" / "demo-ja.json"
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


def _recipe(tmp_path: Path, name: str = "fk", engine: dict | None = None, **extra) -> Path:
    d = {
        "name": name,
        "model": {"id": "none"},
        "engine": engine or {"kind": "fake", "reply": "{{ answers[0] }}"},
        "dataset": {"format": "squad", "path": str(DEMO_DATA)},
        "prompt": {"template": "jsquad.j2", "system_template": "jsquad-system.j2"},
        **extra,
    }
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return p


def _go(recipe: Path, out: Path, *args: str):
    return CliRunner().invoke(
        cli,
        ["go", str(recipe), "--out", str(out), "--no-progress", "--set", "dataset.limit=6", *args],
    )


def _stored(out: Path, name: str = "fk") -> dict:
    return json.loads((out / name / "results.json").read_text(encoding="utf-8"))


def _samples(out: Path, name: str = "fk") -> list[dict]:
    lines = (out / name / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    return [{k: d.get(k) for k in COMPARED} for d in map(json.loads, lines)]


# ---------------------------------------------------------------- refused before anything runs (no
# Ray)


def _refused(r, out: Path, message: str) -> None:
    assert user_error(r) == message
    assert not out.exists()  # nothing written


def test_replicas_without_ray_is_bad_input(tmp_path):
    _refused(
        _go(_recipe(tmp_path), tmp_path / "out", "--replicas", "2"),
        tmp_path / "out",
        "Error: --replicas: only the Ray executor runs data-parallel replicas; add --executor "
        "ray\n",
    )


def test_address_without_ray_is_bad_input(tmp_path):
    _refused(
        _go(_recipe(tmp_path), tmp_path / "out", "--address", "x"),
        tmp_path / "out",
        "Error: --address: names a Ray cluster, which only the Ray executor uses; add --executor "
        "ray\n",
    )


def test_in_process_with_ray_is_bad_input(tmp_path):
    _refused(
        _go(_recipe(tmp_path), tmp_path / "out", "--executor", "ray", "--in-process"),
        tmp_path / "out",
        "Error: --in-process: runs the recipes in this process; the Ray executor runs them in Ray "
        "tasks\n",
    )


def test_a_recipe_with_replicas_on_the_local_executor_is_bad_input(tmp_path):
    p = _recipe(tmp_path, replicas=2)
    _refused(
        _go(p, tmp_path / "out"),
        tmp_path / "out",
        "Error: {tmp}/fk.yaml: replicas: 2 data-parallel replicas run only on Ray; the local "
        "executor runs one engine per recipe\n"
        "  hint: add --executor ray, or set replicas: 1\n",
    )


def test_ray_missing_is_bad_input(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    _refused(
        _go(_recipe(tmp_path), tmp_path / "out", "--executor", "ray"),
        tmp_path / "out",
        "Error: --executor: ray is not installed in this Python, so `--executor ray` cannot run "
        "here\n  hint: pip install -e '.[ray]'\n",
    )


def test_replicas_out_of_range_is_bad_input(tmp_path):
    r = _go(_recipe(tmp_path), tmp_path / "out", "--executor", "ray", "--replicas", "0")
    assert user_error(r) == (
        "Usage: cli go [OPTIONS] PATHS...\n"
        "Try 'cli go --help' for help.\n"
        "\n"
        "Error: Invalid value for '--replicas': 0 is not in the range 1<=x<=1024.\n"
    )


def test_replicas_one_keeps_recipe_hashes_and_run_keys(tmp_path):
    one, two = load_recipe(_recipe(tmp_path, "a")), load_recipe(_recipe(tmp_path, "a", replicas=2))
    assert "replicas" not in one.recipe.canonical() and two.recipe.canonical()["replicas"] == 2
    assert (
        one.recipe.digest()
        == one.recipe.model_copy(update={"replicas": 1}).digest()
        != two.recipe.digest()
    )
    opts = RunOptions(out=tmp_path / "out", limit=4)
    assert make_unit(one, opts).run_key != make_unit(two, opts).run_key
    assert engine_key(one) != engine_key(two)  # replicas is engine-side: not one job with the other


def test_gpus_needed_per_engine(tmp_path):
    def spec(engine: dict):
        return load_recipe(_recipe(tmp_path, "g", engine=engine)).recipe.engine

    assert spec({"kind": "vllm", "tensor_parallel_size": 4}).gpus_needed() == 4
    assert spec({"kind": "vllm"}).gpus_needed() == 1
    assert spec({"kind": "transformers", "device": "cuda"}).gpus_needed() == 1
    assert spec({"kind": "transformers", "device": "auto"}).gpus_needed() == 0
    assert spec({"kind": "transformers", "device": "cpu"}).gpus_needed() == 0
    assert spec({"kind": "fake"}).gpus_needed() == 0


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="needs a Python without vLLM"
)
def test_host_checks_are_left_to_the_worker(tmp_path):
    """The driver need not have the engine library (or a GPU for `device: cuda`); the worker says
    so."""
    from runner.cluster.ray import run_here as _run_here

    lr = load_recipe(_recipe(tmp_path, "v", engine={"kind": "vllm"}))
    opts = RunOptions(out=tmp_path / "out", limit=3)
    with pytest.raises(RunnerError, match="vllm is not installed in this Python"):
        make_unit(lr, opts)
    unit = make_unit(lr, opts, host=False)
    _run_here(Job(units=(unit,), options=opts), "10.1.2.3")
    stored = _stored(opts.out, "v")
    assert stored["status"] == "failed"
    assert stored["error"].startswith("Ray node 10.1.2.3 cannot run it: ")
    assert "vllm is not installed in this Python" in stored["error"]
    assert stored["hint"].startswith("run on a host with it installed")


# ---------------------------------------------------------------- runs on Ray


@pytest.mark.slow
def test_go_on_ray_writes_results_report_and_summary(tmp_path, ray_local):
    out = tmp_path / "out"
    r = _go(_recipe(tmp_path), out, "--executor", "ray")
    assert r.exit_code == 0, r.output
    assert (
        "ok fk: 6 examples" in r.output and "(from the Ray worker, when the job ends)" in r.output
    )
    stored = _stored(out)
    assert stored["executor"] == "ray" and stored["status"] == "ok" and stored["n_samples"] == 6
    assert [x["examples"] for x in stored["replicas"]] == [[0, 6]] and stored["replicas"][0][
        "attempts"
    ] == 1
    # replicas: 1 is left out: the local executor's run key
    assert "replicas" not in stored["recipe"]
    assert (out / "summary.md").is_file()
    report = (out / "fk" / "report.md").read_text(encoding="utf-8")
    assert "## Where it ran" in report and "| 1         | 1–6" in report


@pytest.mark.slow
def test_replicas_give_the_samples_of_the_local_executor(tmp_path, ray_local):
    p = _recipe(tmp_path)
    assert _go(p, tmp_path / "local").exit_code == 0
    r = _go(p, tmp_path / "ray", "--executor", "ray", "--replicas", "2")
    assert r.exit_code == 0, r.output
    stored = _stored(tmp_path / "ray")
    assert [x["examples"] for x in stored["replicas"]] == [[0, 3], [3, 6]]
    assert all(x["status"] == "ok" and x["pid"] for x in stored["replicas"])
    assert (
        stored["recipe"]["replicas"] == 2
        and stored["run_key"] != _stored(tmp_path / "local")["run_key"]
    )
    assert _samples(tmp_path / "ray") == _samples(tmp_path / "local")
    assert stored["scores"] == _stored(tmp_path / "local")["scores"]


@pytest.mark.slow
def test_a_rerun_on_ray_is_skipped_as_unchanged(tmp_path, ray_local):
    p, out = _recipe(tmp_path), tmp_path / "out"
    assert _go(p, out, "--executor", "ray", "--replicas", "2").exit_code == 0
    before = _stored(out)
    again = _go(p, out, "--executor", "ray", "--replicas", "2")
    assert again.exit_code == 0, again.output
    assert "skip fk: unchanged since" in again.output and "[job 1 of 1] fk" not in again.output
    assert _stored(out) == before
    changed = _go(p, out, "--executor", "ray", "--replicas", "3")  # replicas is in the run key
    assert changed.exit_code == 0 and "skip fk" not in changed.output
    assert len(_stored(out)["replicas"]) == 3


@pytest.mark.slow
def test_finished_samples_come_back_as_they_finish_and_a_sigterm_keeps_them(tmp_path, ray_local):
    """The driver's partial file gains each replica's finished samples during the run; a SIGTERM
    of the call leaves them there, and the next call (under another --out: another worker folder,
    as on another node) continues from them."""
    import os
    import shutil
    import signal
    import threading
    import time

    p = _recipe(tmp_path, engine={"kind": "fake", "reply": "{{ answers[0] }}", "delay_s": 0.5})
    twelve = ("--executor", "ray", "--replicas", "2", "--set", "dataset.limit=12")
    out, partial, seen = tmp_path / "out", tmp_path / "out" / "fk" / "samples.partial.jsonl", []

    def watch() -> None:  # the first sample line seen while the run goes on: SIGTERM the call
        end = time.monotonic() + 120
        while time.monotonic() < end and not seen:
            lines = partial.read_text().count("\n") if partial.is_file() else 0
            if lines > 1:
                seen.append((lines, (out / "fk" / "results.json").exists()))
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    r = _go(p, out, *twelve)
    assert seen and seen[0][1] is False, seen  # lines before the run ended
    assert r.exit_code == 130 and r.stderr.endswith(
        "interrupted: 0 of 1 recipes finished; finished samples of an interrupted recipe are kept; "
        "the same command without --force continues from them\n"
    )
    assert not (out / "fk" / "results.json").exists()
    head, *kept = map(json.loads, partial.read_text(encoding="utf-8").splitlines())
    assert list(head) == ["_run_key"] and 1 <= len(kept) < 12
    assert all(d["output"] == d["answers"][0] for d in kept)
    shutil.move(out, tmp_path / "moved")
    again = _go(p, tmp_path / "moved", *twelve)
    assert again.exit_code == 0, again.output
    stored = _stored(tmp_path / "moved")
    assert stored["run_key"] == head["_run_key"] and stored["status"] == "ok"
    assert (
        stored["reused_samples"]
        == len(kept)
        == sum(x["reused_samples"] for x in stored["replicas"])
    )
    local = _go(p, tmp_path / "local", "--set", "dataset.limit=12", "--set", "engine.delay_s=0")
    assert local.exit_code == 0 and _samples(tmp_path / "moved") == _samples(tmp_path / "local")
    assert not (tmp_path / "moved" / "fk" / "samples.partial.jsonl").exists()
