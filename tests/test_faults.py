"""Faults: failing recipes, interruption and resume, timeouts, atomic files."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from tests.cli_output import user_error

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "recipes" / "demo.yaml"


def _fake(tmp_path, name="demo", reply="{{ answers[0] }}", delay_s=0.0):
    """The demo recipe on the fake engine (no model: fast, deterministic)."""
    p = tmp_path / f"{name}.yaml"
    p.write_text(
        DEMO.read_text()
        .replace("name: demo", f"name: {name}")
        .replace("../runner/demo/demo-ja.json", str(ROOT / "runner/demo/demo-ja.json"))
        + "\n# fake engine for pipeline tests\n"
    )
    import yaml

    d = yaml.safe_load(p.read_text())
    d["engine"] = {"kind": "fake", "reply": reply, "delay_s": delay_s}
    d["model"] = {"id": "none"}  # no tokenizer: whitespace tokens, no model library imported
    p.write_text(yaml.safe_dump(d, allow_unicode=True))
    return p


def _worker_pid(log: Path) -> int:
    """The pid of the recipe's process, as its engine.log records it."""
    import re

    return int(re.findall(r"runner worker pid (\d+)", log.read_text())[-1])


def _gone(pgid: int, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_failing_recipe_does_not_lose_the_others(tmp_path):
    # 4 x 3 s: ended by its 5 s timeout while it generates
    bad = _fake(tmp_path, "bad", delay_s=3.0)
    bad.write_text(bad.read_text() + "timeout_s: 5\n")
    good = _fake(tmp_path, "good")
    out = tmp_path / "out"
    res = CliRunner().invoke(
        cli,
        ["go", str(bad), str(good), "--out", str(out), "--no-progress", "--set", "dataset.limit=4"],
    )
    assert res.exit_code == 1, res.output
    failed = json.loads((out / "bad" / "results.json").read_text())
    # the reason, kept
    assert failed["status"] == "failed" and "timed out after 5 s" in failed["error"]
    # its wall time: a tune's budget counts it (it counted 0 s)
    assert 5 <= failed["timings"]["total_s"] < 30
    ok = json.loads((out / "good" / "results.json").read_text())
    assert ok["status"] == "ok" and ok["n_samples"] == 4
    summary = (out / "summary.md").read_text()
    assert "## Failures" in summary and "bad" in summary and "| good" in summary
    assert "FAILED bad" in res.output and "Traceback" not in res.output
    # where each recipe's engine output goes is said before its engine starts
    log = f"  engine output: {out / 'bad' / 'engine.log'}\n"
    assert f"[job 1 of 2] bad (fake, none)\n{log}" in res.stderr
    assert f"  engine output: {out / 'good' / 'engine.log'}\n" in res.stderr


def test_missing_model_folder_is_bad_input_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        DEMO.read_text()
        .replace("id: builtin:demo", "id: ./no-such-model")
        .replace("../runner/demo/demo-ja.json", str(ROOT / "runner/demo/demo-ja.json"))
    )
    res = CliRunner().invoke(cli, ["go", str(bad), "--out", str(tmp_path / "out")])
    assert user_error(res) == (
        "Error: {tmp}/bad.yaml: model.id: model folder not found: {tmp}/no-such-model\n"
        "  hint: give a hub id (needs network) or an existing local folder; --model-path "
        "HUB_ID=PATH maps hub ids to folders\n"
    )
    # relative to the recipe
    assert f"model.id: model folder not found: {tmp_path / 'no-such-model'}" in res.output
    assert "--model-path" in res.output and not (tmp_path / "out" / "demo").exists()


@pytest.mark.slow
def test_killed_midway_then_resumed(tmp_path):
    out = tmp_path / "out"
    recipe = _fake(tmp_path, delay_s=0.08)
    cmd = [sys.executable, "-m", "runner", "go", str(recipe), "--out", str(out), "--no-progress"]
    parent = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = out / "demo" / "samples.partial.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if partial.exists() and len(partial.read_text().splitlines()) >= 6:
            break
        time.sleep(0.02)
    os.kill(parent.pid, signal.SIGKILL)  # the runner itself dies, no cleanup possible
    parent.wait()
    assert _gone(_worker_pid(out / "demo" / "engine.log"))  # the worker notices its parent is gone
    lines = partial.read_text().splitlines()
    assert 6 <= len(lines) < 37
    assert not (out / "demo" / "results.json").exists()  # never a half-written result
    with open(partial, "a") as f:
        f.write('{"id": "demo-00')  # a line cut by the kill: repaired, not glued onto
    res = CliRunner().invoke(cli, ["go", str(recipe), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    r = json.loads((out / "demo" / "results.json").read_text())
    assert r["n_samples"] == 36 and r["reused_samples"] >= len(lines) - 1
    rows = [json.loads(x) for x in (out / "demo" / "samples.jsonl").read_text().splitlines()]
    assert [x["id"] for x in rows] == [f"demo-{i:04d}" for i in range(1, 37)]  # every sample once
    assert [x["output"] for x in rows] == [x["answers"][0] for x in rows]
    assert not partial.exists()
    assert "reused from an earlier, interrupted run" in (out / "demo" / "report.md").read_text()
    # unchanged + complete -> skipped
    again = CliRunner().invoke(cli, ["go", str(recipe), "--out", str(out), "--no-progress"])
    assert again.exit_code == 0 and "skip demo: unchanged" in again.output


def test_a_partial_line_that_is_not_a_sample_says_what_to_do(tmp_path):
    from runner.run.resume import load_partial

    p = tmp_path / "samples.partial.jsonl"
    p.write_text(
        '{"_run_key": "k"}\n{"id": "a", "prompt": "p", "output": "o", "answers": [], '
        '"prompt_tokens": 1, "output_tokens": 1}\n[1, 2]\n'
    )
    from runner.base.errors import RunnerError

    with pytest.raises(RunnerError) as e:
        load_partial(p, "k", [])
    assert "line 3 is JSON but not a sample" in e.value.render() and "--force" in e.value.render()
    p.write_text(
        '{"_run_key": "k"}\n{"id": "a", "prompt": "p", "output": "o", "answers": [], '
        '"prompt_tokens": 1, "output_tokens": 1}\n{"id": "b", "pro'
    )
    assert list(load_partial(p, "k", [])) == ["a"] and p.read_text().endswith(
        '"output_tokens": 1}\n'
    )


@pytest.mark.slow
def test_timeout_ends_the_run_and_records_failure(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        cli,
        [
            "go",
            str(_fake(tmp_path, delay_s=0.5)),
            "--out",
            str(out),
            "--no-progress",
            "--timeout",
            "5",
        ],
    )
    assert res.exit_code == 1
    r = json.loads((out / "demo" / "results.json").read_text())
    assert r["status"] == "failed" and "timed out after 5 s" in r["error"]
    assert _gone(_worker_pid(out / "demo" / "engine.log"), 0.5)
    # the samples it finished are kept for the next run
    assert len((out / "demo" / "samples.partial.jsonl").read_text().splitlines()) >= 2


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    from runner.base import files

    p = tmp_path / "results.json"
    files.write_json_atomic(p, {"status": "ok"})

    def boom(*a, **kw):
        raise OSError("disk gone")

    monkeypatch.setattr(files.os, "fsync", boom)
    with pytest.raises(OSError):
        files.write_json_atomic(p, {"status": "half"})
    assert json.loads(p.read_text()) == {"status": "ok"}
    assert [x.name for x in tmp_path.iterdir()] == ["results.json"]  # no temp file left behind


@pytest.mark.parametrize(
    "error, needle",
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "gpu_memory_utilization",
        ),
        (
            "ValueError: Free memory on device (10.1/139.8 GiB) is less than desired GPU memory "
            "utilization",
            "cpu_offload_gb",
        ),
        (
            "OSError: foo is not a valid model identifier listed on "
            "'https://huggingface.co/models'",
            "--set model.id",
        ),
    ],
)
def test_failure_hints(error, needle):
    from runner.run.result import failure_hint

    assert needle in failure_hint(error)


# the lines vLLM 0.26 wrote to engine.log when its engine process died starting (an H100,
# 2026-12-05: FlashInfer's attention at 4,096 sequences a step, then with a 2 GiB workspace)
_DIED = (
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
)
_FLASHINFER = (
    "(EngineCore pid=3754) ERROR 12-05 21:44:02 [core.py:1330] Traceback (most recent call last):\n"
    "(EngineCore pid=3754) ERROR 12-05 21:44:02 [core.py:1330] RuntimeError: Error in function "
    "'aligned_alloc' at /tmp/vllm-site/flashinfer/data/include/flashinfer/allocator.h:49: Buffer "
    "overflow when allocating memory for batch_prefill_tmp_v with size 1350336512 and alignment "
    "16, but only 469762048 bytes available in AlignedAllocator. Increase the workspace buffer "
    "size.\n"
    "(EngineCore pid=3754) Traceback (most recent call last):\n"
    '(EngineCore pid=3754)   File "/tmp/vllm-site/flashinfer/decode.py", line 1237, in plan\n'
    "(EngineCore pid=3754) RuntimeError: Error in function 'aligned_alloc' at /tmp/vllm-site/"
    "flashinfer/data/include/flashinfer/allocator.h:49: Buffer overflow when allocating memory for "
    "batch_prefill_tmp_v with size 1350336512 and alignment 16, but only 469762048 bytes available "
    "in AlignedAllocator. Increase the workspace buffer size.\n"
    "    raise RuntimeError(\n"
)
_OOM = (
    "(EngineCore pid=972) Traceback (most recent call last):\n"
    "(EngineCore pid=972) ERROR 12-05 21:57:39 [core.py:1330]     logits = logits.clone()\n"
    "(EngineCore pid=972) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. "
    "GPU 0 has a total capacity of 79.18 GiB of which 714.19 MiB is free.\n"
)


def _log(tmp_path, *runs):
    """An engine.log of runs one after another, each opened by the runner's mark."""
    from runner.run.result import LOG_MARK

    log = tmp_path / "engine.log"
    log.write_text("".join(f"\n{LOG_MARK} x started =====\n{text}{_DIED}\n" for text in runs))
    return log


@pytest.mark.parametrize(
    "died, cause, needle",
    [
        (_FLASHINFER, "RuntimeError: Error in function 'aligned_alloc'", "VLLM_FLASHINFER_WORK"),
        (_OOM, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB", "gpu_mem"),
    ],
)
def test_an_engine_that_died_starting_is_reported_with_the_cause_its_log_shows(
    tmp_path, died, cause, needle
):
    from runner.run.result import engine_failure

    # the run before this one (above the mark) died of the other cause: not this run's
    earlier = _OOM if died is _FLASHINFER else _FLASHINFER
    error, hint = engine_failure(_DIED, _log(tmp_path, earlier, died))
    assert error.startswith(_DIED + " (the engine's log: " + cause)
    assert needle in hint
    assert (earlier.split("Error: ")[1][:40] in error) is False
    assert len(error) < len(_DIED) + 340  # the cause cut, not the whole line


def test_an_engine_error_that_names_no_cause_in_its_log_says_where_the_log_is(tmp_path):
    from runner.run.result import engine_failure

    # a line that looks like an exception but ends no traceback (a warning; then the engine process
    # was killed: no traceback of its own) is not taken for the cause
    log = _log(
        tmp_path, "(EngineCore pid=1) INFO loading\nModuleNotFoundError: No module named 'x'\n"
    )
    assert engine_failure(_DIED, log) == (_DIED, f"the engine's log says why: {log}")
    missing = tmp_path / "none.log"
    assert engine_failure(_DIED, missing) == (_DIED, f"the engine's log says why: {missing}")
    assert engine_failure(_DIED, None) == (_DIED, None)  # an engine without a log of its own
    # an error that says its own cause is kept as it is, with its hint
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    error, hint = engine_failure(oom, log)
    assert error == oom and hint.startswith("GPU memory ran out")


def test_the_cause_is_read_past_colour_codes_and_rank_prefixes_from_where_the_engine_began(
    tmp_path,
):
    from runner.run.result import engine_failure

    log = tmp_path / "engine.log"
    earlier = "Traceback (most recent call last):\nKeyError: 'an earlier recipe'\n"
    log.write_text(
        earlier + "\x1b[1;36m(EngineCore_DP0 pid=7)\x1b[0;0m Traceback (most recent call last):\n"
        "(EngineCore_DP0 pid=7) ValueError: the engine's\n"
        "[rank0]: Traceback (most recent call last):\n"
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: x\n"
    )
    error, _ = engine_failure(_DIED, log, start=len(earlier))
    assert error.endswith(
        "(the engine's log: torch.distributed.DistBackendError: NCCL error in: x)"
    )
    log.write_text(earlier + "(EngineCore pid=7) INFO the engine's start, no traceback\n")
    assert engine_failure(_DIED, log, start=len(earlier))[0] == _DIED  # not the earlier recipe's
    assert "an earlier recipe" in engine_failure(_DIED, log)[0]  # ... which is before `start`
    bare = tmp_path / "bare.log"
    bare.write_text(
        "\x1b[1;36m(EngineCore_DP0 pid=7)\x1b[0;0m Traceback (most recent call last):\n"
        "\x1b[1;36m(EngineCore_DP0 pid=7)\x1b[0;0m Exception: plain\n"
    )
    assert engine_failure(_DIED, bare)[0].endswith("(the engine's log: Exception: plain)")


def test_recipes_on_an_engine_that_died_starting_name_the_cause_from_its_log(tmp_path, monkeypatch):
    """Through the run loop, two recipes of one job on one engine whose start fails as vLLM's does
    (the cause in the log its processes write, the error pointing there): both failed results name
    the cause and its hint, though the second recipe's turn writes to a log of its own; the runner's
    own traceback, written to the log after, is not taken for the cause."""
    from runner import load_recipe
    from runner.run.job import Job, RunOptions, make_unit
    from runner.run.loop import SharedEngine, run_rounds
    from runner.run.result import LOG_MARK

    out = tmp_path / "out"
    opts = RunOptions(out=out, limit=2, progress=False)
    a, b = (make_unit(load_recipe(_fake(tmp_path, name)), opts) for name in ("a", "b"))
    for unit in (a, b):
        (out / unit.name).mkdir(parents=True)
        (out / unit.name / "engine.log").write_text(f"{LOG_MARK} {unit.name} started =====\n")

    def dies(spec, model, chat):
        with open(out / "a" / "engine.log", "a") as f:  # the engine's process, then its death
            f.write(_OOM)
        try:
            raise KeyError("a chained error the runner's traceback prints")
        except KeyError:
            raise RuntimeError(_DIED.split(": ", 1)[1])  # noqa: B904  (printed below the KeyError)

    monkeypatch.setattr(type(a.loaded.recipe.engine), "build", dies)

    logs = []

    def to_log(unit):  # as the isolated worker does before each recipe's turn
        log = out / unit.name / "engine.log"
        monkeypatch.setenv("RUNNER_ENGINE_LOG", str(log))
        logs.append(open(log, "a", buffering=1))  # noqa: SIM115
        monkeypatch.setattr(sys, "stderr", logs[-1])

    try:
        results = run_rounds(Job(units=(a, b), options=opts), SharedEngine(a), before=to_log)
    finally:
        for f in logs:
            f.close()
    assert [r.name for r in results] == ["a", "b"]
    for res in results:
        assert res.status == "failed"
        assert res.error.startswith(_DIED + " (the engine's log: torch.OutOfMemoryError: CUDA out")
        assert res.hint.startswith("GPU memory ran out")
        saved = json.loads((out / res.name / "results.json").read_text())
        assert saved["error"] == res.error and saved["hint"] == res.hint
    assert "Traceback" in (out / "a" / "engine.log").read_text()  # the runner's, after the cause


@pytest.mark.parametrize("emptied", [True, False])
def test_a_recipe_on_an_engine_whose_prefix_cache_could_not_be_emptied_fails_saying_so(
    tmp_path, monkeypatch, emptied
):
    """Three recipes of one job on one engine with a prefix cache: before the second and third, the
    engine's cache is emptied; where the engine could not empty it, that recipe fails naming the
    field and why (its cache hits would include the recipe before's prompts); the others keep
    their results, and the next recipe's emptying is tried again."""
    from runner import load_recipe
    from runner.engines.fake import FakeEngine
    from runner.run.job import Job, RunOptions, make_unit
    from runner.run.loop import SharedEngine, run_rounds

    opts = RunOptions(out=tmp_path / "out", limit=2, progress=False)
    a, b, c = (make_unit(load_recipe(_fake(tmp_path, name)), opts) for name in ("a", "b", "c"))
    monkeypatch.setattr(type(a.loaded.recipe.engine), "prefix_cache_field", "enable_prefix_caching")
    answers = iter([emptied, True])
    monkeypatch.setattr(FakeEngine, "reset_prefix_cache", lambda self: next(answers))
    results = run_rounds(Job(units=(a, b, c), options=opts), SharedEngine(a))
    assert [r.status for r in results] == ["ok", "ok" if emptied else "failed", "ok"]
    assert next(answers, "both used") == "both used"
    if not emptied:
        assert results[1].error == (
            "engine.enable_prefix_caching: the engine's prefix cache could not be emptied after "
            "the run before this one (the engine still held its blocks), so this run's cache hits "
            "would include that run's prompts"
        )
        assert results[1].hint == (
            "a run on this engine before it was cut short or failed: run b again (runner go with "
            "--only b) on a fresh engine"
        )


@pytest.mark.slow
def test_a_timeout_covers_all_the_repeats_taken_in_turns(tmp_path):
    """Found by a tester: with repeats taken in turns across engines each turn got the whole
    timeout, so a recipe ran ~3x its timeout_s and was ok (alone, the same recipe failed)."""
    import yaml

    quick, slow = _fake(tmp_path, "quick"), _fake(tmp_path, "slowish", delay_s=0.06)
    d = yaml.safe_load(slow.read_text())
    slow.write_text(yaml.safe_dump({**d, "timeout_s": 5}, allow_unicode=True))
    out = tmp_path / "out"
    args = ["go", str(quick), str(slow), "--out", str(out), "--no-progress", "--repeat", "3"]
    res = CliRunner().invoke(cli, args)
    assert "repeats take turns across the 2 engines" in res.output, res.output
    r = json.loads((out / "slowish" / "results.json").read_text())
    assert r["status"] == "failed", r
    assert "(timeout_s, less what its earlier turns took)" in r["error"], r["error"]
    assert json.loads((out / "quick" / "results.json").read_text())["status"] == "ok"
