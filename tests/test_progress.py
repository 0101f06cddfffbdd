"""Progress over a whole call (issue 43): each job's place in the call, the time the rest should
take after each job (from this call's jobs, on a fake clock here), Ray's jobs done as they come
in, and a tune's stages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import runner
from runner import orchestrate
from runner.cli import cli
from runner.orchestrate import Executor, Wings, new_call, run_loaded
from runner.run.job import RunOptions
from runner.run.loop import run_job


def _recipe(base_recipe: dict, name: str, delay: float, **over) -> dict:
    """A fake-engine recipe; its own `delay` makes its own engine (one job per recipe)."""
    engine = {"kind": "fake", "reply": "{{ answers[0] }}", "delay_s": delay}
    return {**base_recipe, "name": name, "model": {"id": "none"}, "engine": engine, **over}


@pytest.fixture
def clock(monkeypatch):
    """The orchestrator's clock, moved on by each job as `took` says (seconds by recipe)."""
    now, took = [1000.0], {}

    def job(j):
        now[0] += took[j.units[0].name]
        return run_job(j)

    monkeypatch.setattr(orchestrate, "monotonic", lambda: now[0])
    monkeypatch.setattr(orchestrate, "run_job", job)
    return took


def _run(write_recipe, base_recipe, out: Path, recipes: dict, ex=None, wings=None, **over):
    """Run recipes {name: delay} (their files in the order given); the lines said on stderr."""
    said: list[str] = []
    paths = [
        write_recipe(_recipe(base_recipe, n, d, **over), f"{n}.yaml") for n, d in recipes.items()
    ]
    loaded = [runner.load_recipe(p) for p in paths]
    opts = RunOptions(out=out, limit=2, progress=False, call=new_call())
    ex = ex or Executor(in_process=True)
    kw = {"wings": wings} if wings else {}
    run_loaded(loaded, opts, ex, say=lambda text, err: err and said.append(text), **kw)
    return said


def test_each_job_has_its_place_and_an_estimate_follows_every_job_but_the_last(
    write_recipe, base_recipe, tmp_path, clock
):
    clock.update(a=60, b=120, c=30)
    said = _run(write_recipe, base_recipe, tmp_path / "out", {"a": 0, "b": 1e-4, "c": 2e-4})
    assert said == [
        "[job 1 of 3] a (fake, none)",
        "  call: 1 of 3 jobs done in 60.0 s; about 120.0 s left (from the jobs so far)",
        "[job 2 of 3] b (fake, none)",
        "  call: 2 of 3 jobs done in 180.0 s; about 90.0 s left (from the jobs so far)",
        "[job 3 of 3] c (fake, none)",
    ]


def test_skipped_recipes_are_not_jobs_and_a_single_job_has_no_estimate(
    write_recipe, base_recipe, tmp_path, clock
):
    clock.update(a=5, b=7, c=9)
    out = tmp_path / "out"
    assert _run(write_recipe, base_recipe, out, {"a": 0}) == ["[job 1 of 1] a (fake, none)"]
    said = _run(write_recipe, base_recipe, out, {"a": 0, "b": 1e-4, "c": 2e-4})
    assert said == [
        "[job 1 of 2] b (fake, none)",
        "  call: 1 of 2 jobs done in 7.00 s; about 7.00 s left (from the jobs so far)",
        "[job 2 of 2] c (fake, none)",
    ]


def test_turns_count_as_jobs_and_later_turns_take_their_own_earlier_time(
    write_recipe, base_recipe, tmp_path, clock
):
    clock.update(a=10, b=30)
    over = {"repeat": 2, "interleave": "restarts"}
    said = _run(write_recipe, base_recipe, tmp_path / "out", {"a": 0, "b": 1e-4}, **over)
    assert said == [
        "repeats take turns across the 2 engines, each on a freshly started engine",
        "[job 1 of 4] a (fake, none; turn 1 of 2)",
        "  call: 1 of 4 jobs done in 10.0 s; about 30.0 s left (from the jobs so far)",
        "[job 2 of 4] b (fake, none; turn 1 of 2)",
        "  call: 2 of 4 jobs done in 40.0 s; about 40.0 s left (from their earlier turns)",
        "[job 3 of 4] b (fake, none; turn 2 of 2)",
        "  call: 3 of 4 jobs done in 70.0 s; about 10.0 s left (from their earlier turns)",
        "[job 4 of 4] a (fake, none; turn 2 of 2)",
    ]


def test_turns_an_earlier_call_measured_start_no_job(write_recipe, base_recipe, tmp_path, clock):
    """Two repeats stored, three asked: only turn 3 runs (one job per engine, not three); a run
    whose repeats are all stored but whose result was never written runs its last turn only."""
    clock.update(a=10, b=30)
    out, over = tmp_path / "out", {"repeat": 2, "interleave": "restarts"}
    _run(write_recipe, base_recipe, out, {"a": 0, "b": 1e-4}, **over)
    said = _run(write_recipe, base_recipe, out, {"a": 0, "b": 1e-4}, **{**over, "repeat": 3})
    assert [x for x in said if x.startswith("[job ")] == [
        "[job 1 of 2] a (fake, none; turn 3 of 3)",
        "[job 2 of 2] b (fake, none; turn 3 of 3)",
    ]
    got = {r.name: r for r in runner.read_results(out)}
    assert {n: [x.index for x in got[n].repeats] for n in "ab"} == {"a": [1, 2, 3], "b": [1, 2, 3]}
    for n in "ab":
        (out / n / "results.json").unlink()
    said = _run(write_recipe, base_recipe, out, {"a": 0, "b": 1e-4}, **{**over, "repeat": 3})
    assert [x for x in said if x.startswith("[job ")] == [
        "[job 1 of 2] a (fake, none; turn 3 of 3)",
        "[job 2 of 2] b (fake, none; turn 3 of 3)",
    ]
    assert sorted(len(r.repeats) for r in runner.read_results(out)) == [3, 3]


def test_go_echoes_the_places_of_turns_on_stderr(write_recipe, base_recipe, tmp_path):
    paths = [
        write_recipe(_recipe(base_recipe, n, d), f"{n}.yaml") for n, d in (("a", 0), ("b", 1e-4))
    ]
    args = ["go", *map(str, paths), "--out", str(tmp_path / "out"), "--no-progress", "--in-process"]
    r = CliRunner().invoke(
        cli, [*args, "--limit", "2", "--repeat", "2", "--interleave", "restarts"]
    )
    assert r.exit_code == 0, r.output
    heads = [x for x in r.stderr.splitlines() if x.startswith("[job ")]
    assert heads == [
        "[job 1 of 4] a (fake, none; turn 1 of 2)",
        "[job 2 of 4] b (fake, none; turn 1 of 2)",
        "[job 3 of 4] b (fake, none; turn 2 of 2)",
        "[job 4 of 4] a (fake, none; turn 2 of 2)",
    ]
    estimates = [x for x in r.stderr.splitlines() if x.startswith("  call: ")]
    assert len(estimates) == 3 and all(
        re.fullmatch(r"  call: \d of 4 jobs done in .+ s; about .+ s left \(from .+\)", x)
        for x in estimates
    )
    assert "call: " not in r.stdout


def test_on_ray_each_job_done_is_said_as_its_results_come_in(write_recipe, base_recipe, tmp_path):
    def on_ray(jobs, *, address, on_result):  # the jobs ending last first
        for job in reversed(jobs):
            for res in run_job(job):
                on_result(res)

    out = tmp_path / "out"
    said = _run(
        write_recipe,
        base_recipe,
        out,
        {"a": 0, "b": 1e-4},
        ex=Executor(kind="ray"),
        wings=Wings(run_on_ray=on_ray),
    )
    ray = "(from the Ray worker, when the job ends)"
    assert said == [
        "[job 1 of 2] a (fake, none)",
        f"  engine output: {out / 'a' / 'engine.log'} {ray}",
        "[job 2 of 2] b (fake, none)",
        f"  engine output: {out / 'b' / 'engine.log'} {ray}",
        "  call: 1 of 2 jobs done",
        "  call: 2 of 2 jobs done",
    ]


def test_a_tune_says_each_stage_before_it_runs(write_recipe, base_recipe, tmp_path):
    recipe = _recipe(base_recipe, "tu", 0.002, metrics=["exact_match"])
    recipe["tune"] = {
        "axes": {"engine.delay_s": [0.0, 0.001, 0.0015]},
        "screen": {"examples": 4, "chunk": 2, "keep": 0.25, "min_keep": 1},
        "confirm": {"repeat": 2},
    }
    path = write_recipe(recipe, "tu.yaml")
    args = ["tune", str(path), "--out", str(tmp_path / "out"), "--no-progress", "--in-process"]
    r = CliRunner().invoke(cli, [*args, "--set", "dataset.limit=4"])
    assert r.exit_code == 0, r.output
    stages = [x for x in r.stderr.splitlines() if x.startswith("tune tu: ")]
    time = r"; [\d.]+ s into the tune"
    assert [re.sub(time, "; T", x) for x in stages] == [
        "tune tu: screen of the recipe as written (the baseline)",
        "tune tu: screen 1 of 2 (cells 1-2 of 3); T",
        "tune tu: screen 2 of 2 (cell 3 of 3); T",
        "tune tu: confirmation (4 runs); T",
    ]
    # the jobs of each stage are its own call's
    assert r.stderr.count("[job 1 of 1] tu-screen (fake, none)") == 1
    assert "[job 1 of 2] tu-t1-screen (fake, none)" in r.stderr


def test_a_job_whose_recipes_failed_in_an_earlier_turn_leaves_the_count_and_the_estimate(
    write_recipe, base_recipe, tmp_path, clock, monkeypatch
):
    """a fails in its first turn: its second turn is no job, neither in '[job k of n]' nor in the
    time left (they counted it until its place came)."""
    from runner.run.isolate import failed_result

    clock.update(a=10, b=30)
    job = orchestrate.run_job

    def a_fails(j):  # on the fake clock
        if (got := job(j)) or j.units[0].name != "a":  # (a turn but the last: no result)
            return got
        res = failed_result(j.units[0], "boom", None, "")
        j.options.folder("a").write(res)
        return [res]

    monkeypatch.setattr(orchestrate, "run_job", a_fails)
    over = {"repeat": 2, "interleave": "restarts"}
    said = _run(write_recipe, base_recipe, tmp_path / "out", {"a": 0, "b": 1e-4}, **over)
    assert said == [
        "repeats take turns across the 2 engines, each on a freshly started engine",
        "[job 1 of 4] a (fake, none; turn 1 of 2)",
        "  call: 1 of 3 jobs done in 10.0 s; about 20.0 s left (from the jobs so far)",
        "[job 2 of 3] b (fake, none; turn 1 of 2)",
        "  call: 2 of 3 jobs done in 40.0 s; about 30.0 s left (from their earlier turns)",
        "[job 3 of 3] b (fake, none; turn 2 of 2)",
    ]


def test_a_group_without_turns_yet_is_estimated_per_recipe_from_the_jobs_so_far(
    write_recipe, base_recipe, tmp_path, clock
):
    """Found by a tester: a first job of three recipes on one engine (30 s) made the one-recipe job
    after it 'about 30 s'; per recipe it is 10 s."""
    clock.update(a=30, d=10)
    said = _run(write_recipe, base_recipe, tmp_path / "out", {"a": 0, "b": 0, "c": 0, "d": 1e-4})
    assert said[1] == "  call: 1 of 2 jobs done in 30.0 s; about 10.0 s left (from the jobs so far)"
