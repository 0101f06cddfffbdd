"""runner/orchestrate.py: one call's orchestration without click; its messages go to `say`, Ctrl-C
is `Interrupted`, and what the wings add comes in from the caller."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import runner
from runner.base.errors import RunnerError
from runner.orchestrate import NO_WINGS, Executor, Interrupted, Wings, new_call, run_loaded
from runner.run.job import RunOptions


def _fake(base_recipe: dict, name: str = "t") -> dict:
    return {
        **base_recipe,
        "name": name,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}"},
    }


def _opts(out: Path, limit: int | None = 3) -> RunOptions:
    return RunOptions(out=out, limit=limit, progress=False, call=new_call())


def test_the_orchestrator_imports_no_click_and_no_wing():
    tree = ast.parse(Path(runner.__file__).with_name("orchestrate.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    wings = (
        "runner.cli",
        "runner.plan",
        "runner.serve",
        "runner.cluster",
        "runner.study",
        "runner.tune",
    )
    assert "click" not in names and not [m for m in names if m.startswith(wings)]


def test_messages_go_to_say_as_text_and_stream(write_recipe, base_recipe, tmp_path):
    said: list[tuple[str, bool]] = []
    lr, out = runner.load_recipe(write_recipe(_fake(base_recipe))), tmp_path / "out"
    [res] = run_loaded(
        [lr], _opts(out), Executor(in_process=True), say=lambda text, err: said.append((text, err))
    )
    assert (
        res.status == "ok"
        and (out / "t" / "report.md").is_file()
        and (out / "summary.md").is_file()
    )
    assert said[0] == ("[job 1 of 1] t (fake, none)", True)
    assert said[1][0].startswith("ok t: 3 examples; generation ") and said[1][1] is False
    assert said[-1] == (f"summary: {out / 'summary.md'}", False)
    said.clear()
    [again] = run_loaded(
        [lr], _opts(out), Executor(in_process=True), say=lambda text, err: said.append((text, err))
    )
    assert again.finished_at == res.finished_at
    assert said[0] == (
        f"skip t: unchanged since {res.finished_at} (results complete; --force reruns)",
        False,
    )


def test_ctrl_c_writes_the_summary_of_what_finished_then_raises_interrupted(
    write_recipe, base_recipe, tmp_path, ctrl_c_in_the_second_generation
):
    path = write_recipe(
        {**_fake(base_recipe, "s"), "matrix": {"sampling.max_tokens": {"a": 16, "b": 8}}}
    )
    said: list[tuple[str, bool]] = []
    out = tmp_path / "out"
    with pytest.raises(Interrupted) as e:
        run_loaded(
            runner.load_recipes(path),
            _opts(out),
            Executor(in_process=True),
            say=lambda *m: said.append(m),
        )
    assert (e.value.finished, e.value.total) == (1, 2) and isinstance(e.value, KeyboardInterrupt)
    assert (f"summary: {out / 'summary.md'}", True) in said and (out / "summary.md").is_file()


def test_a_route_the_caller_left_out_is_refused_before_anything_runs(
    write_recipe, base_recipe, tmp_path
):
    d = {
        **_fake(base_recipe, "srv"),
        "load": {"request_rate": [2], "num_requests": 4, "warmup_requests": 0},
    }
    lr, out = runner.load_recipe(write_recipe(d)), tmp_path / "out"
    with pytest.raises(RunnerError) as e:
        run_loaded([lr], _opts(out, None), Executor(in_process=True), wings=NO_WINGS)
    assert e.value.field == "load" and "no serving route" in e.value.message and not out.exists()
    with pytest.raises(RunnerError, match="no Ray route"):
        run_loaded([], _opts(out), Executor(kind="ray"), wings=Wings())


def test_the_reports_imports_are_made_while_an_isolated_job_runs_and_never_beside_one_in_process(
    write_recipe, base_recipe, tmp_path, monkeypatch
):
    """The parent idles while a job runs in its own process: matplotlib's pyplot (the summary's
    charts, about a second on the H200) is imported then, in a thread of its own, once a call; a job
    run in this process gets no such thread beside its engine."""
    import threading

    import runner.orchestrate as orch
    import runner.report.plots as plots
    from runner.run.loop import run_job

    seen: list[str] = []
    started = threading.Event()
    real = plots.pyplot

    def pyplot():
        seen.append(threading.current_thread().name)
        started.set()
        return real()

    def isolated(job, warn, worker=None, ends=None):  # this process stands in for the job's
        assert started.wait(10), "pyplot was not imported while the job ran"
        if worker is not None:
            worker.close()
        return run_job(job)

    monkeypatch.setattr(plots, "pyplot", pyplot)
    monkeypatch.setattr(orch, "run_isolated", isolated)
    other = {**_fake(base_recipe, "b"), "engine": {"kind": "fake", "reply": "x"}}  # its own job
    a, b = (
        runner.load_recipe(write_recipe(r, f"{r['name']}.yaml"))
        for r in (_fake(base_recipe, "a"), other)
    )
    results = run_loaded([a, b], _opts(tmp_path / "iso"), Executor())
    assert [r.status for r in results] == ["ok", "ok"]
    assert seen[0] == "runner-warm-reports" and seen.count("runner-warm-reports") == 1

    seen.clear()
    run_loaded([a], _opts(tmp_path / "inproc"), Executor(in_process=True))
    assert "runner-warm-reports" not in seen


def test_a_calls_summary_says_when_other_stored_runs_are_not_in_it(
    write_recipe, base_recipe, tmp_path
):
    """Issue 42: every call rewrote summary.md with its own recipes only, without a word about the
    runs an earlier call left in the same --out."""
    out = tmp_path / "out"
    a, b = (runner.load_recipe(write_recipe(_fake(base_recipe, n), f"{n}.yaml")) for n in "ab")
    said: list[tuple[str, bool]] = []
    say = lambda text, err: said.append((text, err))
    run_loaded([a], _opts(out), Executor(in_process=True), say=say)
    assert said[-1] == (f"summary: {out / 'summary.md'}", False)
    said.clear()
    run_loaded([b], _opts(out), Executor(in_process=True), say=say)
    assert said[-2:] == [
        (f"summary: {out / 'summary.md'}", False),
        (
            f"  (this call's recipes only: 1 other run(s) stored in {out} are not in it; "
            f"`runner report {out}` summarizes every stored run)",
            False,
        ),
    ]


def test_the_next_jobs_process_starts_while_the_job_before_ends_and_none_outlives_the_call(
    write_recipe, base_recipe, tmp_path, monkeypatch
):
    """Issue 41: the first job's process is started before the job is ready (its plan), each next
    one as soon as the job before wrote its results (while that engine shuts down and the reports
    are written); the call returns only once every job's process group is gone."""
    import runner.orchestrate as orch
    from runner.base.procs import group_alive

    events, procs = [], []
    real = orch.Worker

    def worker(units, options):
        ended = procs and procs[-1].poll() is not None  # the process started before it
        events.append(f"process for {units[0].name}" + (" after the last ended" if ended else ""))
        procs.append((w := real(units, options)).proc)
        return w

    monkeypatch.setattr(orch, "Worker", worker)
    other = {**_fake(base_recipe, "b"), "engine": {"kind": "fake", "reply": "x"}}  # its own job
    a, b = (
        runner.load_recipe(write_recipe(r, f"{r['name']}.yaml"))
        for r in (_fake(base_recipe, "a"), other)
    )
    say = lambda text, err: events.append(text.split(":")[0])
    results = run_loaded([a, b], _opts(tmp_path / "out"), Executor(), say=say)
    assert [r.status for r in results] == ["ok", "ok"]
    assert [e for e in events if e.startswith(("process", "ok"))] == [
        "process for a",
        "process for b",  # while a runs (they share no recipe)
        "ok a",
        "ok b",
    ]
    assert all(p.poll() is not None and not group_alive(p.pid) for p in procs)
    assert all(r.stages is not None and r.stages.process_s >= 0 for r in results)

    # turns (A B, then B A): each turn's process is started ahead of it too
    events.clear()
    procs.clear()
    opts = _opts(tmp_path / "turns")
    turns = [
        lr.model_copy(
            update={"recipe": lr.recipe.model_copy(update={"repeat": 2, "interleave": "restarts"})}
        )
        for lr in (a, b)
    ]
    assert [r.status for r in run_loaded(turns, opts, Executor(), say=say)] == ["ok", "ok"]
    assert [e for e in events if e.startswith("process")] == [
        "process for a",
        "process for b",  # while a's first turn runs
        "process for b after the last ended",  # b's second turn: once its first is over
        "process for a",  # while b's second turn runs
    ]
    assert all(p.poll() is not None and not group_alive(p.pid) for p in procs)
