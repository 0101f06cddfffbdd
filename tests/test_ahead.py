"""Job processes started ahead of their jobs (issue 41) under failure, with real worker processes
and the fake engine: Ctrl-C at each point of a call, a crash, a timeout, a process that hangs before
it reads its job or cannot start, earlier results of a recipe not yet run, the GPU-memory warning
from the thread that ends a job's process group."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import runner
import runner.orchestrate as orch
from runner.base.procs import descendants, group_alive
from runner.orchestrate import Executor, Interrupted, NoPlans, Wings, new_call, run_loaded
from runner.run import isolate
from runner.run.job import RunOptions

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "runner" / "demo" / "demo-ja.json"


@pytest.fixture
def load(write_recipe, base_recipe):
    """load(name, delay, **fields): a fake-engine recipe; its own delay makes its own job."""

    def make(name: str, delay: float = 0.0, **fields):
        engine = {"kind": "fake", "reply": "{{ answers[0] }}", "delay_s": delay}
        d = {**base_recipe, "name": name, "model": {"id": "none"}, "engine": engine, **fields}
        return runner.load_recipe(write_recipe(d, f"{name}.yaml"))

    return make


@pytest.fixture
def workers(monkeypatch):
    """Each job process started (by the orchestrator): (its first recipe, its Popen)."""
    started, real = [], orch.Worker

    def worker(units, options):
        w = real(units, options)
        started.append((units[0].name, w.proc))
        return w

    monkeypatch.setattr(orch, "Worker", worker)
    return started


def _opts(out: Path, limit: int | None = 3) -> RunOptions:
    return RunOptions(out=out, limit=limit, progress=False, call=new_call())


def _none_left(started) -> bool:
    return all(p.poll() is not None and not group_alive(p.pid) for _, p in started)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _kill_when_running(log: Path) -> None:
    """SIGKILL the recipe's process once its engine.log names it (it runs the recipe)."""

    def kill() -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if found := re.findall(r"runner worker pid (\d+)", _text(log)):
                os.kill(int(found[-1]), signal.SIGKILL)
                return
            time.sleep(0.02)

    threading.Thread(target=kill, daemon=True).start()


@pytest.mark.parametrize("point", ["plan", "send", "run", "ends"])
def test_ctrl_c_at_each_point_of_a_call_leaves_no_process_and_the_summary_of_what_finished(
    point, load, workers, tmp_path, monkeypatch
):
    """Ctrl-C (SIGTERM arrives as one) while the first job's process waits for its plan, between
    taking the next job's process and handing it the job (its process was left running before),
    while a job runs with the next one's process started, and while a thread ends a job's process
    group (a slow engine shutdown): Interrupted, the summary of what finished, no process left."""
    calls: list[int] = []

    def ctrl_c(*a, **kw):
        raise KeyboardInterrupt

    class Plans(NoPlans):
        def attach(self, units):
            ctrl_c() if point == "plan" else None
            return tuple(units)

    if point == "send":  # the second job: its pre-started process taken, the job not yet sent
        warm = lambda self: (calls.append(1), len(calls) == 2 and ctrl_c())  # noqa: E731
        monkeypatch.setattr(orch._Call, "_warm_reports", warm)
    elif point == "run":
        wait = isolate._wait
        monkeypatch.setattr(isolate, "_wait", lambda proc, t, done, *src: wait(proc, t, ctrl_c))
    elif point == "ends":
        end = isolate._end
        monkeypatch.setattr(isolate, "_end", lambda *a: (time.sleep(1), end(*a)))
        monkeypatch.setattr(orch, "write_report", lambda res, *a: ctrl_c())
    out = tmp_path / "out"
    with pytest.raises(Interrupted) as e:
        run_loaded([load("a"), load("b", 1e-4)], _opts(out), Executor(), wings=Wings(plans=Plans))
    finished = {"plan": 0, "send": 1, "run": 0, "ends": 1}[point]
    assert (e.value.finished, e.value.total) == (finished, 2)
    assert (out / "summary.md").is_file() == bool(finished)
    names = [n for n, _ in workers]
    assert names == (["a"] if point == "plan" else ["a", "b"])  # b's started while a ran
    assert _none_left(workers)
    assert not [t for t in threading.enumerate() if t.name == "runner-job-end"]


def test_sigterm_of_go_while_a_job_runs_with_the_next_ones_process_started(load, tmp_path):
    """`runner go` SIGTERM'd while its first job runs and the second's process waits for its job:
    exit 130, both process groups gone."""
    load("a", 0.5)
    load("b", 1e-4)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "runner", "go", "a.yaml", "b.yaml", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    go = subprocess.Popen(
        [*cmd, "--no-progress", "--limit", "20"], cwd=tmp_path, env=env, stderr=subprocess.PIPE
    )
    end, log = time.monotonic() + 60, out / "a" / "engine.log"
    # a runs; b's process is started (its start line is written just before)
    while not ("runner worker pid" in _text(log) and len(pids := descendants(go.pid)) == 2):
        assert time.monotonic() < end and go.poll() is None
        time.sleep(0.05)
    go.send_signal(signal.SIGTERM)
    _, err = go.communicate(timeout=60)
    assert go.returncode == 130 and err.decode().endswith(
        "interrupted: 0 of 2 recipes finished; finished samples of an interrupted recipe are "
        "kept; the same command without --force continues from them\n"
    )
    assert not [p for p in pids if group_alive(p)]


def test_an_interrupted_call_keeps_the_results_of_a_recipe_whose_process_was_started_ahead(
    load, workers, tmp_path, monkeypatch
):
    """b's stored results (one repeat: this call adds a second) stay while a's job runs with b's
    process started ahead; an interruption then reports them as they were."""
    out = tmp_path / "out"
    a, b = load("a"), load("b", 1e-4)
    run_loaded([a, b], _opts(out), Executor(in_process=True))
    twice = [
        x.model_copy(update={"recipe": x.recipe.model_copy(update={"repeat": 2})}) for x in (a, b)
    ]
    wait = isolate._wait

    def ctrl_c():
        raise KeyboardInterrupt

    monkeypatch.setattr(isolate, "_wait", lambda proc, t, done, *src: wait(proc, t, ctrl_c))
    monkeypatch.setattr(orch, "takes_turns", lambda groups: False)  # one job a recipe
    with pytest.raises(Interrupted) as e:
        run_loaded(twice, _opts(out), Executor())
    assert [n for n, _ in workers] == ["a", "b"] and e.value.finished == 1
    assert [r.name for r in runner.read_results(out)] == ["b"] and _none_left(workers)


def test_a_crash_and_a_timeout_beside_the_next_jobs_process(load, workers, tmp_path):
    """a's process dies (SIGKILL) while b's waits; b times out while c's waits: each next job runs
    on the process started for it, and a's log holds nothing of b's process."""
    out = tmp_path / "out"
    _kill_when_running(out / "a" / "engine.log")
    recipes = [load("a", 0.5), load("b", 0.5, timeout_s=1), load("c", 1e-4)]
    results = run_loaded(recipes, _opts(out), Executor())
    assert [(r.name, r.status) for r in results] == [("a", "failed"), ("b", "failed"), ("c", "ok")]
    assert (
        "was killed by SIGKILL (out of memory, or killed from outside) before writing results"
        in results[0].error
    )
    assert results[0].started_at and results[1].started_at  # (report.md's "started" was empty)
    assert results[1].error == "timed out after 1 s (timeout_s); the run was ended"
    assert results[1].hint == (
        f"if it needs longer, raise the recipe's timeout_s; what it wrote: {out}/b/engine.log"
    )
    assert [n for n, _ in workers] == ["a", "b", "c"] and _none_left(workers)
    log = (out / "a" / "engine.log").read_text()
    assert "===== runner: a started" in log and "runner: b" not in log and "(process group" in log


def test_a_process_that_hangs_before_reading_its_job_is_ended_by_the_timeout(
    load, workers, tmp_path, monkeypatch
):
    """The job (more than a pipe holds: long contexts) is written in the background: a process
    stuck before it reads it (its Python start, the engine library's import) is ended by the
    job's timeout; the call went on waiting for the write before."""
    data = json.loads(DEMO.read_text(encoding="utf-8"))
    for p in (p for d in data["data"] for p in d["paragraphs"]):
        p["context"] *= 20
    (big := tmp_path / "big.json").write_text(json.dumps(data), encoding="utf-8")
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec sleep 60\n")
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    dataset = {"format": "squad", "path": str(big)}
    t0, a = time.monotonic(), load("a", timeout_s=2, dataset=dataset)
    [res] = run_loaded([a], _opts(tmp_path / "out", None), Executor())
    assert time.monotonic() - t0 < 30 and [n for n, _ in workers] == ["a"] and _none_left(workers)
    assert res.error == "timed out after 2 s (timeout_s); the run was ended"


def test_a_process_ended_while_its_library_loads_names_its_gone_group_in_the_log(
    load, workers, tmp_path, monkeypatch
):
    """A job that times out while its process still imports the engine's library (vLLM takes 23 s
    to import on the H100): the recipe's engine.log names the process and its group (printed
    before the import; it was printed only once the job was taken, so the GPU test of a timeout
    found no group), and that group is gone."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "slow_library.py").write_text("import time\ntime.sleep(60)\n")
    (site / "sitecustomize.py").write_text(
        "import runner.engines.fake as fake\nfake.FakeSpec.library = 'slow_library'\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    [res] = run_loaded([load("a", timeout_s=2)], _opts(tmp_path / "out"), Executor())
    assert res.error == "timed out after 2 s (timeout_s); the run was ended"
    log = (tmp_path / "out" / "a" / "engine.log").read_text()
    [(pid, group)] = re.findall(r"runner worker pid (\d+) \(process group (\d+)\)", log)
    assert int(pid) == workers[0][1].pid == int(group)
    assert "===== runner: a started" in log and _none_left(workers)


def test_a_process_that_cannot_start_fails_its_recipes_not_the_call(load, tmp_path, monkeypatch):
    def popen(*a, **kw):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(isolate.subprocess, "Popen", popen)
    results = run_loaded([load("a"), load("b", 1e-4)], _opts(tmp_path / "out"), Executor())
    why = (
        "could not start the recipe's process: BlockingIOError: [Errno 11] Resource temporarily "
        "unavailable"
    )
    assert [(r.status, r.error) for r in results] == [("failed", why)] * 2


def test_the_gpu_memory_warning_of_a_job_ended_in_the_background_reaches_say(
    load, workers, tmp_path, monkeypatch
):
    monkeypatch.setattr(isolate, "used_gib", lambda: 1.0)
    monkeypatch.setattr(isolate, "wait_for_release", lambda baseline: 3.5)
    said: list[str] = []
    out = tmp_path / "out"
    run_loaded(
        [load("a"), load("b", 1e-4)], _opts(out), Executor(), say=lambda t, e: said.append(t)
    )
    line = "GPU memory not fully released after the run: 3.5 GiB used vs 1.0 GiB before"
    assert [x for x in said if x.startswith("WARNING")] == [f"WARNING: {n}: {line}" for n in "ab"]
    assert f"===== runner: {line}" in (out / "b" / "engine.log").read_text()
    assert _none_left(workers)


def test_a_recipe_whose_process_died_in_its_first_turn_has_no_later_turn_nor_process(
    load, workers, tmp_path
):
    """Turns A B, B A: a's process dies in its first turn; b's first turn runs on the process
    started for it meanwhile, b's second on one started once its first was over, and a's second
    turn is no job (nor a process) and leaves the count at once."""
    out, said = tmp_path / "out", []
    _kill_when_running(out / "a" / "engine.log")
    turns = dict(repeat=2, interleave="restarts")
    recipes = [load("a", 0.5, **turns), load("b", 1e-4, **turns)]
    results = run_loaded(recipes, _opts(out), Executor(), say=lambda t, e: said.append(t))
    assert [(r.name, r.status) for r in results] == [("a", "failed"), ("b", "ok")]
    assert [n for n, _ in workers] == ["a", "b", "b"] and _none_left(workers)
    assert [x for x in said if x.startswith("[job")] == [
        "[job 1 of 4] a (fake, none; turn 1 of 2)",
        "[job 2 of 3] b (fake, none; turn 1 of 2)",
        "[job 3 of 3] b (fake, none; turn 2 of 2)",
    ]


_TRANSFORMERS_BUILD = """
import json, sys
from runner.engines.transformers import TransformersSpec
lazy = "transformers.models.auto.modeling_auto" not in sys.modules
TransformersSpec(kind="transformers").preload()
before = set(sys.modules)
# what the transformers engine's build takes from it
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from transformers import GenerationConfig
print(json.dumps({"lazy": lazy, "new": sorted(set(sys.modules) - before)}))
"""


def test_a_process_started_ahead_imports_what_the_transformers_engine_builds_with():
    """transformers loads its classes on first use: `preload` imports them, so none of the engine's
    start is an import (a fresh interpreter, for a clean `sys.modules`)."""
    pytest.importorskip("transformers")
    out = subprocess.run(
        [sys.executable, "-c", _TRANSFORMERS_BUILD], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"lazy": True, "new": []}
