"""What a job's process started ahead writes before its job (the engine library's import): held
apart, in the first recipe's engine.log once the job comes (after its start line), also when the
process died first; a process closed before its job leaves no trace. The last job's warnings come
before the summary's line."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import runner
from runner.base.types import ModelSpec
from runner.cli import cli
from runner.orchestrate import new_call
from runner.run import isolate
from runner.run.job import Job, RunOptions, make_unit


class Loud:
    """An engine spec whose preload writes to stdout and stderr, then touches `done` (and exits 3
    with `crash`)."""

    def __init__(self, done: Path, crash: bool = False, hang: bool = False):
        self.done, self.crash, self.hang = str(done), crash, hang

    def preload(self, model=None) -> None:
        print("preload to stdout", flush=True)
        print("preload to stderr", file=sys.stderr, flush=True)
        # whole when it appears (`_preloaded` waits for it to exist)
        Path(self.done + ".part").write_text(model.model_dump_json() if model is not None else "")
        os.replace(self.done + ".part", self.done)
        if self.crash:
            os._exit(3)
        if self.hang:  # an import that never returns
            time.sleep(120)


@pytest.fixture
def recipe(write_recipe, base_recipe):
    def make(name: str):
        engine = {"kind": "fake", "reply": "{{ answers[0] }}"}
        d = {**base_recipe, "name": name, "model": {"id": "none"}, "engine": engine}
        return write_recipe(d, f"{name}.yaml")

    return make


def _loud(names: str, done: Path, crash: bool = False, hang: bool = False, model=None) -> tuple:
    """Units as the worker sees them (names, the first one's engine spec and model)."""
    recipe = SimpleNamespace(engine=Loud(done, crash, hang), model=model)
    return tuple(SimpleNamespace(name=n, loaded=SimpleNamespace(recipe=recipe)) for n in names)


def _preloaded(done: Path) -> None:
    end = time.monotonic() + 60
    while not done.exists():
        assert time.monotonic() < end
        time.sleep(0.05)


def test_a_worker_preloads_for_its_first_recipes_model(tmp_path):
    """The process started ahead gets the first recipe's model with its engine spec (vLLM loads its
    tokenizer there, outside the engine's start)."""
    opts = RunOptions(out=tmp_path / "out", progress=False, call=new_call())
    model = ModelSpec(id="builtin:demo", revision="r1")
    w = isolate.Worker(_loud("ab", done := tmp_path / "done", model=model), opts)
    try:
        _preloaded(done)
        assert done.read_text() == model.model_dump_json()
    finally:
        w.close()


def test_a_worker_closed_before_its_job_leaves_no_trace(tmp_path):
    opts = RunOptions(out=tmp_path / "out", progress=False, call=new_call())
    log = opts.folder("a").engine_log
    log.parent.mkdir(parents=True)
    log.write_text("an earlier run\n")
    w = isolate.Worker(_loud("ab", done := tmp_path / "done"), opts)
    _preloaded(done)
    w.close()
    assert log.read_text() == "an earlier run\n" and os.listdir(log.parent) == ["engine.log"]
    assert not opts.folder("b").root.exists()


@pytest.mark.parametrize("crash", [False, True])
def test_the_preloads_output_follows_the_start_line_once_the_job_comes(recipe, tmp_path, crash):
    """Also from a process that died before it took its job: its recipe failed with that output."""
    opts = RunOptions(out=tmp_path / "out", progress=False, limit=2, call=new_call())
    job = Job((make_unit(runner.load_recipe(recipe("a")), opts),), opts)
    worker = isolate.Worker(_loud("a", done := tmp_path / "done", crash), opts)
    _preloaded(done)
    [res] = isolate.run_isolated(job, worker=worker)
    log = opts.folder("a").engine_log.read_text()
    held = "preload to stdout\npreload to stderr\n"
    assert log.startswith("\n===== runner: a started ") and log.index(held) > 0
    if crash:
        assert res.status == "failed" and "ended with exit code 3 before writing" in res.error
        assert res.error.endswith(" | preload to stdout | preload to stderr")
    else:
        # the process names itself first (before its library's import), once
        assert res.status == "ok" and log.index("runner worker pid") < log.index(held)
        assert log.count("runner worker pid") == 1


def test_each_recipe_on_a_shared_engine_names_the_process_in_its_log_once(recipe, tmp_path):
    """Two recipes of one job (one engine): each engine.log names the job's process and its group
    once, the first's from before the library's import, the second's when its turn came."""
    opts = RunOptions(out=tmp_path / "out", progress=False, limit=2, call=new_call())
    units = tuple(make_unit(runner.load_recipe(recipe(n)), opts) for n in "ab")
    [a, b] = isolate.run_isolated(Job(units, opts))
    assert a.status == b.status == "ok"
    for name in "ab":
        log = opts.folder(name).engine_log.read_text()
        assert log.count("runner worker pid") == 1 and "(process group " in log


def test_ctrl_c_while_the_engine_library_loads_leaves_its_output_in_the_engine_log(
    recipe, tmp_path, monkeypatch
):
    """Interrupted before its process took the job (a hung import): what it wrote is where a user
    looks after Ctrl-C, and its process group is gone."""
    opts = RunOptions(out=tmp_path / "out", progress=False, limit=2, call=new_call())
    job = Job((make_unit(runner.load_recipe(recipe("a")), opts),), opts)
    worker = isolate.Worker(_loud("a", done := tmp_path / "done", hang=True), opts)
    _preloaded(done)

    def interrupted(proc, timeout_s, done, *source):
        isolate.kill_group(proc.pid, grace_s=1, proc=proc)
        raise KeyboardInterrupt

    monkeypatch.setattr(isolate, "_wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        isolate.run_isolated(job, worker=worker)
    log = opts.folder("a").engine_log.read_text()
    assert "preload to stdout\npreload to stderr\n" in log and worker.proc.poll() is not None


def test_the_last_jobs_gpu_memory_warning_comes_before_the_summary_line(
    recipe, tmp_path, monkeypatch
):
    """The last job's process ends in the background (a second after its results: an engine's slow
    shutdown) while the summary is written; its warning is said first."""
    monkeypatch.setattr(isolate, "used_gib", lambda: 1.0)
    monkeypatch.setattr(isolate, "wait_for_release", lambda baseline: 3.5)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n"{sys.executable}" "$@"\nsleep 1\n')
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    args = ["go", str(recipe("a")), "--out", str(tmp_path / "out"), "--no-progress"]
    r = CliRunner().invoke(cli, [*args, "--limit", "2"])
    assert r.exit_code == 0, r.output
    warning = "WARNING: a: GPU memory not fully released after the run: 3.5 GiB used vs 1.0 GiB "
    lines = [x for x in r.output.splitlines() if x.startswith(("WARNING", "summary:"))]
    assert lines == [warning + "before", f"summary: {tmp_path / 'out' / 'summary.md'}"]
