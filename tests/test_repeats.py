"""Repeats and how much a time moves: intervals that cover the truth at their stated rate, repeats
that take turns (on one engine, or with an engine restart each turn), resume per repeat, the noise
facts, and summaries that `runner report` writes the same as `runner go`."""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.base.noise import Probe, busy_reasons
from runner.base.stats import geomean_interval, ratio_interval
from runner.cli import cli
from runner.engines.fake import jitter_factor
from runner.folder import load_results
from runner.report.spread import paired, ratio_text, speedup
from tests.cli_output import user_error


def _fake(base_recipe, name, delay=0.0, jitter=0.0, **top):
    engine = {"kind": "fake", "reply": "{{ answers[0] }}", "delay_s": delay, "jitter": jitter}
    return {**base_recipe, "name": name, "model": {"id": "none"}, "engine": engine, **top}


def _go(*args: str):
    return CliRunner().invoke(cli, ["go", *map(str, args), "--no-progress", "--in-process"])


def _repeats(out: Path, name: str) -> list[dict]:
    return [json.loads(x) for x in (out / name / "repeats.jsonl").read_text().splitlines()[1:]]


# --- intervals: coverage at the stated rate, with the fake engine's own noise model ---


@pytest.mark.parametrize("paired_turns", [True, False])
def test_ratio_interval_covers_the_true_speed_up(paired_turns):
    """Two cells of 3 s and 1 s (true speed-up 3x). Taking turns, each turn's load hits both alike
    (one factor per turn): the paired interval uses that. Back to back, each sees its own load:
    Welch's t on the log times. Both cover 3 at about the stated 95%."""
    rng, hits, trials = random.Random(2), 0, 4000
    for _ in range(trials):
        load_a = [jitter_factor(0.4, rng) for _ in range(5)]
        load_b = load_a if paired_turns else [jitter_factor(0.4, rng) for _ in range(5)]
        a = [3.0 * f * jitter_factor(0.05, rng) for f in load_a]
        b = [1.0 * f * jitter_factor(0.05, rng) for f in load_b]
        _, lo, hi = ratio_interval(a, b, paired=paired_turns)
        hits += lo <= 3.0 <= hi
    assert 0.935 <= hits / trials <= 0.97, hits / trials


def test_taking_turns_narrows_the_interval_of_a_speed_up():
    """Same shared-load turns read both ways: pairing the turns cancels the load, Welch's cannot."""
    rng, narrower = random.Random(3), 0
    for _ in range(200):
        load = [jitter_factor(0.4, rng) for _ in range(5)]
        a = [3.0 * f * jitter_factor(0.05, rng) for f in load]
        b = [1.0 * f * jitter_factor(0.05, rng) for f in load]
        _, plo, phi = ratio_interval(a, b, paired=True)
        _, wlo, whi = ratio_interval(a, b, paired=False)
        narrower += phi / plo < whi / wlo
    assert narrower >= 190


def test_one_run_has_no_interval_and_a_ratio_holding_1_is_no_clear_difference():
    assert geomean_interval([2.0]) == (2.0, None, None)
    ratio, lo, hi = ratio_interval([1.0, 1.2, 0.9], [1.1, 0.95, 1.0], paired=True)
    assert lo < 1 < hi and ratio_text(ratio, lo, hi).startswith("no clear difference (")
    assert ratio_text(2.0, None, None) == "2.00× (1 run: no interval)"
    # found by a tester: identical cells read `1.00× slower`
    assert ratio_text(0.998, None, None) == "1.00× (1 run: no interval)"
    assert ratio_text(0.5, None, None) == "2.00× slower (1 run: no interval)"
    assert ratio_text(0.997, 0.995, 0.999) == "1.00× slower (1.00–1.01)"  # clear: said so


# --- the noise guard ---


def test_busy_reasons_name_load_cpu_pressure_and_other_gpu_processes():
    quiet = dict(load_avg=0.5, cpus=2, cpu_pressure=0.01, gpu_other_processes=[])
    assert busy_reasons(quiet) == []
    busy = dict(load_avg=5.2, cpus=2, cpu_pressure=0.35, gpu_other_processes=[4242])
    assert busy_reasons(busy) == [
        "load average 5.2 on 2 CPUs",
        "tasks waited for a CPU 35% of the time",
        "1 other process(es) used the GPU (pid 4242)",
    ]


def test_probe_reads_this_machine():
    p = Probe()
    p.start()
    sum(i * i for i in range(200_000))  # some CPU time
    p.stop()
    facts = p.facts
    assert facts["cpus"] >= 1 and facts["process_cpu_s"] >= 0
    assert facts["load_avg"] is None or facts["load_avg"] >= 0
    if Path("/proc/pressure/cpu").is_file():
        assert 0 <= facts["cpu_pressure"] <= 1


# --- repeats end to end, on the fake engine ---


def test_recipes_on_two_engines_take_turns_with_a_fresh_engine_each_turn(
    tmp_path, write_recipe, base_recipe
):
    a = write_recipe(_fake(base_recipe, "a", delay=0.002, baseline=True), "a.yaml")
    b = write_recipe(_fake(base_recipe, "b", delay=0.001), "b.yaml")
    out = tmp_path / "out"
    r = _go(a, b, "--out", out, "--repeat", "3", "--limit", "4")
    assert r.exit_code == 0, r.output
    ra, rb = _repeats(out, "a"), _repeats(out, "b")
    starts = sorted(
        [(x["started_at"], f"{n}{x['index']}") for n, reps in (("a", ra), ("b", rb)) for x in reps]
    )
    # A B, B A, A B: drift hits both alike
    assert [s for _, s in starts] == ["a1", "b1", "b2", "a2", "a3", "b3"]
    assert all(x["load_s"] is not None for x in ra + rb)  # a fresh engine every turn
    res = {x.name: x for x in load_results(out)}
    assert res["a"].repeat_order == res["b"].repeat_order == "interleaved with restarts"
    assert res["a"].timings.generate_s == pytest.approx(
        statistics.geometric_mean(x["generate_s"] for x in ra)
    )
    assert paired(res["a"], res["b"]) and [x["changed"] for x in rb] == [None, 0, 0]
    report = (out / "b" / "report.md").read_text()
    assert (
        "3 repeats, taking turns with the other recipes, each turn on a freshly started engine"
        in report
    )


def test_recipes_on_one_engine_take_turns_on_it(tmp_path, write_recipe, base_recipe):
    d = _fake(base_recipe, "s", delay=0.002)  # milliseconds apart: started_at orders them
    study = {
        "name": "st",
        **{k: v for k, v in d.items() if k != "name"},
        "repeat": 2,
        "warmup": 1,
        "matrix": {"sampling.max_tokens": {"m8": 8, "m16": 16}},
    }
    out = tmp_path / "out"
    r = _go(write_recipe(study, "st.yaml"), "--out", out, "--limit", "3")
    assert r.exit_code == 0, r.output
    (n1, n2) = sorted(p.name for p in out.iterdir() if (p / "results.json").is_file())
    r1, r2 = _repeats(out, n1), _repeats(out, n2)
    order = sorted(
        [(x["started_at"], n, x["index"]) for n, reps in ((n1, r1), (n2, r2)) for x in reps]
    )
    # A B, then B A: whichever went first in turn 1 goes last in turn 2
    got = [(n, i) for _, n, i in order]
    assert got in ([(n2, 1), (n1, 1), (n1, 2), (n2, 2)], [(n1, 1), (n2, 1), (n2, 2), (n1, 2)]), got
    res = {x.name: x for x in load_results(out)}
    first = next(x for x in res.values() if x.engine_of is None)
    other = next(x for x in res.values() if x.engine_of is not None)
    # one start, after the warm-up
    assert first.repeats[0].load_s is not None and first.repeats[1].load_s is None
    assert other.timings.load_s == 0 and all(x.load_s is None for x in other.repeats)
    assert first.repeat_order == other.repeat_order == "interleaved"


def test_more_repeats_later_run_only_the_missing_ones_and_complete_runs_are_skipped(
    tmp_path, write_recipe, base_recipe
):
    path = write_recipe(_fake(base_recipe, "r"), "r.yaml")
    out = tmp_path / "out"
    assert _go(path, "--out", out, "--repeat", "2", "--limit", "3").exit_code == 0
    before = _repeats(out, "r")
    r = _go(path, "--out", out, "--repeat", "4", "--limit", "3")
    assert r.exit_code == 0, r.output
    after = _repeats(out, "r")
    assert after[:2] == before and [x["index"] for x in after] == [1, 2, 3, 4]
    assert after[2]["call"] == after[3]["call"] != before[0]["call"]  # measured by the second call
    assert len(load_results(out)[0].repeats) == 4
    again = _go(path, "--out", out, "--repeat", "4", "--limit", "3")
    assert "skip r: unchanged since" in again.output and _repeats(out, "r") == after
    forced = _go(path, "--out", out, "--repeat", "2", "--limit", "3", "--force")
    assert forced.exit_code == 0 and [x["index"] for x in _repeats(out, "r")] == [1, 2]


def test_repeats_are_refused_on_ray_and_in_serving_runs(tmp_path, write_recipe, base_recipe):
    path = write_recipe(_fake(base_recipe, "r", repeat=3), "r.yaml")
    r = CliRunner().invoke(
        cli, ["go", str(path), "--out", str(tmp_path / "o"), "--executor", "ray"]
    )
    if "ray is not installed" not in r.output:
        assert user_error(r) == (
            "Error: {tmp}/r.yaml: repeat: 3 repeats are for offline runs on the local executor, "
            "not on Ray\n  hint: set repeat: 1 (--set repeat=1)\n"
        )
    served = _fake(base_recipe, "s", repeat=2)
    served["load"] = {"request_rate": [10], "num_requests": 4}
    r = CliRunner().invoke(
        cli, ["go", str(write_recipe(served, "s.yaml")), "--out", str(tmp_path / "o")]
    )
    assert user_error(r) == (
        "Error: {tmp}/s.yaml: repeat: 2 repeats are for offline runs on the local executor, not in "
        "a serving run (`load` measures each rate once)\n"
        "  hint: set repeat: 1 (--set repeat=1)\n"
    )


def test_speed_up_inside_the_noise_is_no_clear_difference(tmp_path, write_recipe, base_recipe):
    """Two recipes with the same delay and strong jitter: the summary calls it no clear difference,
    not a speed-up (the paired interval over 4 turns holds 1; with this jitter it does so in most
    runs, so the test asks only that whatever the figure, it is written as a ratio with an interval
    or as no clear difference)."""
    a = write_recipe(_fake(base_recipe, "a", delay=0.003, jitter=0.2, baseline=True), "a.yaml")
    b = write_recipe(_fake(base_recipe, "b", delay=0.003, jitter=0.2), "b.yaml")
    out = tmp_path / "out"
    assert _go(a, b, "--out", out, "--repeat", "4", "--limit", "4").exit_code == 0
    res = {x.name: x for x in load_results(out)}
    ratio, lo, hi = speedup(res["a"], res["b"])
    text = ratio_text(ratio, lo, hi)
    row = next(
        line for line in (out / "summary.md").read_text().splitlines() if line.startswith("| b ")
    )
    assert text in row
    assert text.startswith("no clear difference") == (lo <= 1 <= hi)


def test_report_writes_the_summaries_go_wrote_and_only_keeps_the_study(
    tmp_path, write_recipe, base_recipe
):
    d = _fake(base_recipe, "x")
    study = {**{k: v for k, v in d.items() if k != "name"}, "name": "st"}
    study["matrix"] = {"sampling.max_tokens": {"m4": 4, "m8": 8, "m16": 16}}
    study["baseline"] = "st-m16"
    path = write_recipe(study, "st.yaml")
    out = tmp_path / "out"
    assert _go(path, "--out", out, "--limit", "3", "--repeat", "2").exit_code == 0
    go_summary, go_study = (out / "summary.md").read_text(), (out / "st" / "summary.md").read_text()
    assert "[st/summary.md](st/summary.md)" in go_summary
    r = CliRunner().invoke(cli, ["report", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "summary.md").read_text() == go_summary and (
        out / "st" / "summary.md"
    ).read_text() == go_study
    # one cell again: the call's summary has that cell, the study's own still every cell
    assert (
        _go(
            path, "--out", out, "--limit", "3", "--repeat", "2", "--only", "st-m8", "--force"
        ).exit_code
        == 0
    )
    assert "| st-m4 " not in (out / "summary.md").read_text()
    own = (out / "st" / "summary.md").read_text()
    assert all(f"| st-{c} " in own for c in ("m4", "m8", "m16")) and own.startswith(
        "# Study st: every stored cell"
    )
    rows = [line.split("|")[1].strip() for line in own.splitlines() if line.startswith("| st-")]
    assert rows[:3] == ["st-m4", "st-m8", "st-m16"]  # the study's order, not the names'


def test_turns_pair_only_runs_that_took_turns(tmp_path, write_recipe, base_recipe):
    a = write_recipe(_fake(base_recipe, "a", delay=0.001, baseline=True), "a.yaml")
    b = write_recipe(_fake(base_recipe, "b", delay=0.002), "b.yaml")
    for mode, want in (("off", False), ("restarts", True)):
        out = tmp_path / mode
        assert (
            _go(a, b, "--out", out, "--repeat", "2", "--limit", "2", "--interleave", mode).exit_code
            == 0
        )
        res = {x.name: x for x in load_results(out)}
        assert paired(res["a"], res["b"]) is want, mode
        assert res["b"].repeat_order == (
            "back to back" if mode == "off" else "interleaved with restarts"
        )


def test_repeats_table_has_a_cell_per_column_and_an_estimate_projects_the_median(
    tmp_path, write_recipe, base_recipe
):
    out = tmp_path / "out"
    path = write_recipe(_fake(base_recipe, "e", delay=0.002, jitter=0.2), "e.yaml")
    assert _go(path, "--out", out, "--repeat", "3", "--estimate", "4").exit_code == 0
    [res] = load_results(out)
    # the median, scaled
    assert res.estimate.projected_s == pytest.approx(res.timings.generate_s * 36 / 4)
    md = (out / "e" / "report.md").read_text()
    # the time table marks the projection as such, and says what its total measured
    times = md.split("## Time and throughput", 1)[1].split("\n\n")[1].splitlines()
    assert [c.strip() for c in times[2].strip("|").split("|")][1].startswith("~")
    note = "`~`: the generation projected to all 36 examples; the total and the rates are of the"
    assert f"{note} 4 examples run." in md
    after = md.split("### Repeats", 1)[1].split("\n\n|", 1)[1]
    table = ("|" + after.split("\n\n", 1)[0]).splitlines()
    head = [c.strip() for c in table[0].strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert head[:5] == [
        "repeat",
        "generation",
        "engine start",
        "outputs changed",
        "prompt tokens from cache",
    ]
    assert len(rows) == 3 and all(len(r) == len(head) for r in rows)
    assert [r[head.index("call")] for r in rows] == [x.call for x in res.repeats]


def test_engine_start_counts_for_the_recipe_that_started_it(
    tmp_path, write_recipe, base_recipe, monkeypatch
):
    """The job's first recipe has all its repeats (only its results.json is missing); the second
    recipe's generation starts the engine, so the start is the second's and the first ran on the
    second's engine. The start is counted once in total_s (a repeat's wall time begins after it)."""
    from runner.engines import fake

    build = fake.FakeEngine.__init__
    monkeypatch.setattr(
        fake.FakeEngine, "__init__", lambda self, *a: (time.sleep(0.3), build(self, *a))[1]
    )
    d = _fake(base_recipe, "x")
    study = {**{k: v for k, v in d.items() if k != "name"}, "name": "st"}
    study["matrix"] = {"sampling.max_tokens": {"m4": 4, "m8": 8}}
    path, out = write_recipe(study, "st.yaml"), tmp_path / "out"
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    (out / "st-m4" / "results.json").unlink()
    for f in (out / "st-m8").iterdir():
        f.unlink()
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    res = {x.name: x for x in load_results(out)}
    m4, m8 = res["st-m4"], res["st-m8"]
    assert (
        m8.engine_of is None
        and m8.timings.load_s > 0
        and m4.engine_of == "st-m8"
        and m4.timings.load_s == 0
    )
    rep = m8.repeats[0]
    # the start once
    assert rep.wall_s < 0.3 and m8.timings.total_s == pytest.approx(rep.load_s + rep.wall_s)


def test_cells_taking_turns_on_one_engine_each_count_the_starts_they_made(
    tmp_path, write_recipe, base_recipe
):
    """Two engines, two cells on each, two turns: in turn 1 the first cell of an engine starts it,
    in turn 2 (the reverse order) the other; every cell started one, so none is said to have run
    on another's engine, and each cell's start is its own repeat's."""
    d = _fake(base_recipe, "x")
    study = {**{k: v for k, v in d.items() if k != "name"}, "name": "st", "repeat": 2}
    study["matrix"] = {
        "engine.delay_s": {"d1": 0.0, "d2": 1e-4},
        "sampling.max_tokens": {"t4": 4, "t8": 8},
    }
    path, out = write_recipe(study, "st.yaml"), tmp_path / "out"
    assert _go(path, "--out", out, "--limit", "2").exit_code == 0
    res = {x.name: x for x in load_results(out)}
    assert len(res) == 4
    for r in res.values():
        [started] = [x for x in r.repeats if x.load_s is not None]
        assert r.engine_of is None and r.timings.load_s == started.load_s
    md = (out / "st" / "summary.md").read_text()
    assert "engine starts" in md and "started for another cell" not in md


@pytest.mark.slow
def test_a_job_ended_while_one_recipe_runs_fails_that_recipe_only(
    tmp_path, write_recipe, base_recipe
):
    """Two recipes on one engine taking turns; the job is ended (timeout) during the slow one's
    first repeat. That one is recorded failed; the other, whose first repeat was done, runs its
    second in a fresh process and is ok."""
    d = _fake(base_recipe, "x", delay=0.25)
    study = {
        **{k: v for k, v in d.items() if k != "name"},
        "name": "st",
        "repeat": 2,
        "timeout_s": 4,
    }
    study["matrix"] = {"dataset.limit": {"quick": 1, "slow": 36}}
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli, ["go", str(write_recipe(study, "st.yaml")), "--out", str(out), "--no-progress"]
    )
    res = {x.name: x for x in load_results(out)}
    assert r.exit_code == 1, r.output
    assert res["st-quick"].status == "ok" and [x.index for x in res["st-quick"].repeats] == [1, 2]
    assert res["st-slow"].status == "failed" and "timed out" in res["st-slow"].error


def test_alternating_turns_cancel_a_drift_that_a_fixed_order_turns_into_a_difference():
    """Two identical recipes under a 1% slow-down per run, 10 paired turns: in a fixed order (A B, A
    B, ...) they were called clearly different in about half of 2,000 simulations; taking turns as
    `runner go` does (A B, B A, ...) at most at the stated 5%."""
    from runner.base.stats import ratio_interval

    def clear_share(alternate: bool) -> float:
        rng, hits = random.Random(3), 0
        for _ in range(2000):
            a, b, k = [], [], 0
            for turn in range(10):
                for who in "ab" if not alternate or turn % 2 == 0 else "ba":
                    (a if who == "a" else b).append(1.01**k * jitter_factor(0.01, rng))
                    k += 1
            _, lo, hi = ratio_interval(a, b, paired=True)
            hits += not lo <= 1 <= hi
        return hits / 2000

    assert clear_share(alternate=False) > 0.3
    assert clear_share(alternate=True) <= 0.05


def test_runs_measured_over_the_same_calls_not_in_turns_are_across_calls_not_back_to_back():
    from runner.report.spread import compared
    from runner.results import Repeat, RunResult, Timings
    from tests.wired import a_recipe

    def run(name, turns):
        reps = [
            Repeat(index=i + 1, generate_s=1.0 + i / 10, call=c, turns=t)
            for i, (c, t) in enumerate(turns)
        ]
        return RunResult(
            name=name, recipe=a_recipe(name), status="ok", repeats=reps, timings=Timings()
        )

    a = run("a", [("c1", "c1/turns"), ("c2", "c2/turns")])
    b = run("b", [("c1", None), ("c2", None)])  # the same two calls, not in turns with a
    assert compared(a, b) == "across calls"
    one = run("c", [("c1", None), ("c1", None)])
    assert compared(one, run("d", [("c1", None), ("c1", None)])) == "back to back"
