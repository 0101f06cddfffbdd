"""`runner tune` (issue 30): the search on the fake engine, whose time is a known function of its
settings (delay_s per request, with log-normal jitter)."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from click.testing import CliRunner

from runner.cli import cli
from runner.results import Repeat, RunResult, Timings
from runner.tune.report import hand_words
from runner.tune.search import Cell, decide
from runner.tune.spec import TuneSpec
from tests.cli_output import user_error
from tests.wired import a_recipe

RIGHT, WRONG = "{{ answers[0] }}", "wrong"


def _tune_file(write_recipe, base_recipe, axes, delay=0.004, **tune):
    recipe = {
        **base_recipe,
        "name": "tu",
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": RIGHT, "delay_s": delay, "jitter": 0.05},
        "metrics": ["exact_match"],
        "tune": {
            "axes": axes,
            "gate": {"metric": "exact_match", "max_drop": 0.05},
            "screen": {"examples": 30, "keep": 0.5},
            "confirm": {"repeat": 3},
            **tune,
        },
    }
    return write_recipe(recipe, "tu.yaml")


def _tune(*args):
    return CliRunner().invoke(cli, ["tune", *map(str, args), "--no-progress", "--in-process"])


def _engine(delay, reply=RIGHT):
    return {"kind": "fake", "reply": reply, "delay_s": delay, "jitter": 0.05}


def test_tune_finds_the_fastest_and_never_crowns_a_faster_one_that_fails_the_gate(
    tmp_path, write_recipe, base_recipe
):
    """The fastest candidate answers wrong: dropped; the fastest right one wins, with its interval
    against the recipe as written, and its recipe is written out as YAML."""
    # far apart: a loaded
    axes = {"engine": [_engine(0.02), _engine(0.01), _engine(0.005), _engine(0.0025, WRONG)]}
    # machine keeps the order
    # 5 repeats: one slow repeat of 3 (a loaded machine) left the interval holding 1 once
    confirm = {"repeat": 5}
    path = _tune_file(write_recipe, base_recipe, axes, delay=0.02, confirm=confirm)
    r, out = _tune(path, "--out", tmp_path / "out"), tmp_path / "out"
    assert r.exit_code == 0, r.output
    assert (
        "tune tu: tu-t3 is the fastest that passed, clearly faster than the recipe as written "
        "(97.5% interval: Bonferroni over the 2 confirmed candidates)." in r.output
    )
    report = (out / "tu-tune.md").read_text()
    assert "Against the recipe as written (tu): " in report and "×" in report
    rows = {
        line.split("|")[2].strip(): line for line in report.splitlines() if line.startswith("| ")
    }
    assert (
        "dropped at the screen: clearly below the gate" in rows["tu-t4"]
        and "winner" in rows["tu-t3"]
    )
    # t1's engine is the recipe's
    assert "the recipe as written (not run: it is the baseline)" in rows["tu-t1"]
    assert not (out / "tu-t1-screen").exists() and "1 the recipe as written" in report
    assert (
        "delay_s: 0.005" in report.split("## The winner's recipe")[1] and "name: tu-tuned" in report
    )
    # confirmed on every example
    assert json.loads((out / "tu-t3" / "results.json").read_text())["n_samples"] == 36
    assert json.loads((out / "tu-t3-screen" / "results.json").read_text())["n_samples"] == 30
    # the fake engine's scores mean nothing: time alone
    front = report.split("## The front")[1].split("## ")[0]
    assert [
        line.split("|")[1].strip() for line in front.splitlines() if line.startswith("| tu")
    ] == ["tu-t3"]
    assert "| winner" in front


def test_an_interrupted_or_repeated_tune_reuses_every_finished_run(
    tmp_path, write_recipe, base_recipe
):
    axes = {"engine.delay_s": [0.002, 0.001]}
    path, out = _tune_file(write_recipe, base_recipe, axes), tmp_path / "out"
    assert _tune(path, "--out", out).exit_code == 0
    first = (out / "tu-tune.md").read_text()
    r = _tune(path, "--out", out)
    # nothing ran again: every cell skipped as unchanged
    assert r.exit_code == 0 and "[1]" not in r.output
    assert r.output.count("skip ") == 6 and (out / "tu-tune.md").read_text() == first
    (out / "tu-tune.md").unlink()
    r = _tune(path, "--out", out, "--report-only")
    assert (
        r.exit_code == 0 and "skip " not in r.output and (out / "tu-tune.md").read_text() == first
    )


def test_the_budget_cuts_the_screen_and_dry_run_lists_it(tmp_path, write_recipe, base_recipe):
    axes = {"engine.delay_s": [0.0035, 0.003, 0.002, 0.001]}
    path = _tune_file(write_recipe, base_recipe, axes, budget={"cells": 9}, confirm={"repeat": 2})
    r = _tune(path, "--out", tmp_path / "out", "--dry-run")
    assert r.exit_code == 0 and not (tmp_path / "out").exists()
    assert (
        "4 candidates (the budget of 9 runs leaves 2): " in r.output
        and "at most 9 measured runs" in r.output
    )
    stages = [
        line.split("|")[3].strip() for line in r.output.splitlines() if line.startswith("| tu-")
    ]
    assert stages == ["screen", "screen", "not screened (budget)", "not screened (budget)"]
    assert _tune(path, "--out", tmp_path / "out").exit_code == 0
    runs = [p.name for p in (tmp_path / "out").iterdir() if (p / "results.json").is_file()]
    # 3 screens, 3 confirmations of 2 repeats: 9 measured
    assert len(runs) == 6 and "tu-t3-screen" not in runs
    assert "Spent: 9 measured runs" in (tmp_path / "out" / "tu-tune.md").read_text()
    assert "Estimated time: not known yet (no finished screen of the recipe as written" in r.output
    again = _tune(path, "--out", tmp_path / "out", "--dry-run").output  # now from the stored screen
    assert re.search(
        r"Estimated time: about \S+ s \(2 screens of ~\S+ s each, as the stored screen of the "
        r"recipe as written took, then a confirmation of ~\S+ s on 36 examples\)\.",
        again,
    ), again


def test_the_dry_runs_estimate_confirms_on_the_recipes_own_limit(
    tmp_path, write_recipe, base_recipe
):
    """Found by a tester: with `dataset.limit: 40` the dry run projected the confirmation on the
    whole dataset (1,190 examples: 15x the time the tune took)."""
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.003, 0.002]})
    data = yaml.safe_load(path.read_text())
    data["dataset"]["limit"] = 32
    path.write_text(yaml.safe_dump(data))
    assert _tune(path, "--out", tmp_path / "out").exit_code == 0
    again = _tune(path, "--out", tmp_path / "out", "--dry-run").output
    assert "then a confirmation of ~" in again and " on 32 examples)." in again
    data["estimate"] = 4  # a confirmation runs that sample of them (the rest projected)
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "est"
    assert _tune(path, "--out", out).exit_code == 0
    again = _tune(path, "--out", out, "--dry-run").output
    assert " on 4 examples)." in again, again
    confirmed = json.loads((out / "tu" / "results.json").read_text())  # the recipe as written
    assert confirmed["n_samples"] == 4 and confirmed["estimate"]["n_total"] == 32


def test_the_minutes_budget_covers_the_confirmation(tmp_path, write_recipe, base_recipe):
    """A budget the confirmation alone would pass: screening stops before the first candidate,
    saying what was spent and what the confirmation is projected to take (the minutes covered the
    screen only: a user's 8-minute budget took 13)."""
    axes = {"engine.delay_s": [0.003, 0.002]}
    path = _tune_file(write_recipe, base_recipe, axes, budget={"minutes": 0.001})
    r = _tune(path, "--out", tmp_path / "out")
    assert re.search(
        r"the minutes budget is reached \(\S+ s spent \+ \S+ s projected for the confirmation\); "
        r"screening stops at 0 of 2",
        r.output,
    ), r.output
    assert not (tmp_path / "out" / "tu-t1-screen").exists()


def test_a_file_without_a_tune_block_or_with_a_bad_one_is_refused(write_recipe, base_recipe):
    path = write_recipe(base_recipe)
    assert user_error(_tune(path)).startswith(
        "Error: {tmp}/recipe.yaml: tune: has no `tune:` block\n"
    )
    path = write_recipe({**base_recipe, "tune": {"axes": {}}})
    assert "tune.axes: Value error, name at least one axis" in user_error(_tune(path))


def _timed(name, times, turns="t"):
    reps = [Repeat(index=i + 1, generate_s=t, turns=turns) for i, t in enumerate(times)]
    return RunResult(
        name=name,
        recipe=a_recipe(name),
        status="ok",
        repeats=reps,
        timings=Timings(generate_s=times[0]),
    )


def test_no_winner_is_crowned_inside_the_noise_of_the_runner_up():
    spec = TuneSpec(axes={"engine.delay_s": [1, 2]})
    base = Cell(0, "b", {}, full=_timed("b", [2.0, 2.1, 1.9]))
    a, b = (
        Cell(1, "a", {}, full=_timed("a", [1.0, 1.1, 0.95])),
        Cell(2, "c", {}, full=_timed("c", [1.02, 0.98, 1.08])),
    )
    d = decide([a, b], base, spec, lambda r: {})
    assert [c.name for c in d.winners] == ["a", "c"] and d.words.startswith(
        "No single winner: **a** and **c**"
    )
    # the level the winners were found clearly faster at, as a single winner's words say it
    level = " (97.5% interval: Bonferroni over the 2 confirmed candidates)"
    assert f"the recipe as written{level}; more repeats" in d.words and d.level == level
    # against a faster hand-written cell, the pick is the fastest of the tied, not "the winner"
    words = hand_words(a, base, b, (0.8, 0.7, 0.9), tied=True)
    assert "the fastest of the tied winners, **a**, is 1.25× slower" in words
    clear_win = Cell(3, "e", {}, full=_timed("e", [0.50, 0.51, 0.49]))
    d = decide([a, clear_win], base, spec, lambda r: {})
    assert (
        [c.name for c in d.winners] == ["e"]
        and clear_win.verdict == "winner"
        and a.verdict == "passed"
    )
    # found by a tester: a runner-up inside the winner's noise but not itself clearly faster than
    # the recipe as written (two wild repeats) was not named; the winner stands, the tie is said
    wild = Cell(4, "w", {}, full=_timed("w", [0.45, 1.9]))
    d = decide([clear_win, wild], base, spec, lambda r: {})
    assert [c.name for c in d.winners] == ["e"] and wild.verdict == "passed"
    assert d.words.endswith(
        " **e** is not clearly faster than **w** (the 95% interval of their time ratio holds 1), "
        "which is not itself clearly faster than the recipe as written."
    )
    # on review: with tied winners too, it was dropped
    wild = Cell(5, "w", {}, full=_timed("w", [0.9, 1.9]))
    d = decide([a, b, wild], base, spec, lambda r: {})
    assert [c.name for c in d.winners] == ["a", "c"] and d.words.startswith("No single winner")
    assert d.words.endswith(
        "**a** is not clearly faster than **w** (the 95% interval of their time ratio "
        "holds 1), which is not itself clearly faster than the recipe as written."
    )


def test_no_clear_winner_says_how_many_repeats_would_tell():
    """Two repeats each, both candidate repeats faster than both baseline ones, and still no clear
    difference (a user's tune ended "(0.04-157x)"): the verdict says how many repeats would resolve
    it."""
    spec = TuneSpec(axes={"x": [1]}, confirm={"repeat": 2})
    base = Cell(0, "b", {}, full=_timed("b", [2.0, 2.6], turns=None))
    fast = Cell(1, "a", {}, full=_timed("a", [1.5, 1.9], turns=None))
    d = decide([fast], base, spec, lambda r: {})
    assert d.winners == [] and "no clear difference" in d.words
    n = int(
        re.search(r"About (\d+) repeats each would tell a difference this size", d.words).group(1)
    )
    assert 3 <= n <= 20, d.words


def test_axes_as_ranges_and_the_budget_plan():
    spec = TuneSpec.model_validate(
        {
            "axes": {
                "engine.engine_args.max_num_seqs": {"low": 256, "high": 2048},
                "engine.enforce_eager": [True, False],
            }
        }
    )
    assert spec.axes["engine.engine_args.max_num_seqs"].values() == [256, 512, 1024, 2048]
    assert len(spec.candidates()) == 8 and spec.candidates()[1][0] == {
        "engine.engine_args.max_num_seqs": 256,
        "engine.enforce_eager": False,
    }
    # 8 screens + 2 confirmed (25%, at least 2) + the baseline's 2 runs = 12 <= 40
    assert spec.plan(8) == (8, 2)
    linear = TuneSpec.model_validate(
        {"axes": {"x": {"low": 1, "high": 2, "scale": "linear", "step": 0.5}}}
    )
    assert linear.axes["x"].values() == [1, 1.5, 2]


def test_check_says_a_tune_block_is_for_runner_tune(write_recipe, base_recipe):
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.001]})
    r = CliRunner().invoke(cli, ["check", str(path), "--no-tokens"])
    assert r.exit_code == 0
    assert (
        "  note: this file has a `tune:` block: runner go runs the recipe as written, runner tune "
        "searches it\n" in r.output
    )


def test_a_candidate_inside_the_noise_of_the_recipe_as_written_is_not_crowned():
    """As on the H200: the fastest candidate's interval against the recipe as written holds 1: it
    stays."""
    spec = TuneSpec(axes={"engine.delay_s": [1, 2]})
    base = Cell(0, "b", {}, full=_timed("b", [5.94, 5.5, 6.4]))
    a = Cell(1, "a", {}, full=_timed("a", [5.85, 5.3, 6.5]))
    d = decide([a], base, spec, lambda r: {})
    assert d.winners == [] and a.verdict == "passed; not clearly faster than the recipe as written"
    assert d.words.startswith(
        "No candidate is clearly faster than the recipe as written; the fastest that passed, "
    )
    assert "no clear difference (" in d.words and d.words.endswith("The recipe as written stays.")


def test_a_vllm_step_smaller_than_its_sequences_is_refused_before_it_starts(
    write_recipe, base_recipe
):
    """Seen on the H200: a tune candidate with 2,048 tokens and 4,096 sequences per step failed at
    engine start."""
    engine = {"kind": "vllm", "engine_args": {"max_num_seqs": 4096, "max_num_batched_tokens": 2048}}
    err = user_error(
        CliRunner().invoke(cli, ["check", str(write_recipe({**base_recipe, "engine": engine}))])
    )
    assert (
        "max_num_batched_tokens (2048) is below max_num_seqs (4096); vLLM refuses to start" in err
    )


def test_combinations_the_recipe_refuses_are_listed_and_left_out(
    tmp_path, write_recipe, base_recipe
):
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.001, -1.0]})
    r = _tune(path, "--dry-run")
    assert "2 candidates, 1 of them refused by the recipe's checks: " in r.output
    assert (
        "| tu-t2  | engine.delay_s=-1.0  | invalid: invalid recipe " in r.output
        and "greater than or equal to 0" in r.output
    )
    r = _tune(path, "--out", tmp_path / "out")
    assert r.exit_code == 0 and not (tmp_path / "out" / "tu-t2-screen").exists()
    assert "| 2    | tu-t2  | engine.delay_s=-1.0" in (tmp_path / "out" / "tu-tune.md").read_text()


def test_a_candidate_setting_below_a_plain_value_is_refused(write_recipe, base_recipe):
    r = _tune(_tune_file(write_recipe, base_recipe, {"engine.reply.x": [1]}), "--dry-run")
    assert r.exit_code == 2
    assert (
        "all 1 candidates are refused by the recipe's checks; the first: cannot set "
        "engine.reply.x: 'reply' is not a mapping" in r.output
    )


def test_the_confirmation_takes_turns_as_confirm_interleave_says(
    tmp_path, write_recipe, base_recipe
):
    for mode, order in (("auto", "interleaved with restarts"), ("off", "back to back")):
        path = _tune_file(
            write_recipe,
            base_recipe,
            {"engine.delay_s": [0.001]},
            confirm={"repeat": 2, "interleave": mode},
        )
        out = tmp_path / mode
        assert _tune(path, "--out", out).exit_code == 0
        assert json.loads((out / "tu-t1" / "results.json").read_text())["repeat_order"] == order


# --------------------------------------------------------------------------- found in review


def test_gate_problems_are_never_a_pass(write_recipe, base_recipe):
    path = _tune_file(
        write_recipe,
        base_recipe,
        {"engine.delay_s": [0.001]},
        gate={"metric": "char_f1", "max_drop": 0},
    )
    assert (
        "tune.gate.metric: 'char_f1' is not among the recipe's metrics (exact_match)"
        in user_error(_tune(path))
    )
    spec = TuneSpec(axes={"x": [1]}, gate={"metric": "exact_match", "max_drop": 0.01})
    base = Cell(0, "b", {}, full=_timed("b", [2.0, 2.1, 1.9]))
    fast = Cell(1, "a", {}, full=_timed("a", [0.5, 0.51, 0.49]))
    d = decide([fast], base, spec, lambda r: {})  # no samples to pair: the gate cannot be checked
    assert (
        d.winners == []
        and fast.verdict
        == "gate not checked (no paired scores, or too few examples to tell): not a candidate"
    )


def test_a_tie_counts_only_when_it_also_beats_the_recipe_as_written():
    spec = TuneSpec(axes={"x": [1]})
    base = Cell(0, "b", {}, full=_timed("b", [2.0, 2.1, 1.9]))
    a = Cell(1, "a", {}, full=_timed("a", [1.0, 1.02, 0.98]))
    # within a's noise, and within the baseline's
    c = Cell(2, "c", {}, full=_timed("c", [0.9, 2.6, 1.2]))
    d = decide([a, c], base, spec, lambda r: {})
    assert [x.name for x in d.winners] == ["a"] and a.verdict == "winner"


def test_throughput_is_judged_as_throughput():
    from runner.results import Tokens
    from runner.tune.search import gain

    spec = TuneSpec(axes={"x": [1]}, objective="throughput")
    slow_but_wordy = _timed("w", [1.0, 1.01, 0.99]).model_copy(
        update={"tokens": Tokens(output=300)}
    )
    base = _timed("b", [1.0, 1.01, 0.99]).model_copy(update={"tokens": Tokens(output=100)})
    ratio, lo, hi = gain(base, slow_but_wordy, spec)
    assert 2.9 < ratio < 3.1 and lo > 2.5  # the same time, three times the tokens per second


def test_report_only_never_pins_a_stored_run_of_other_settings_on_a_candidate(
    tmp_path, write_recipe, base_recipe
):
    path, out = (
        _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.002, 0.001]}),
        tmp_path / "out",
    )
    assert _tune(path, "--out", out).exit_code == 0
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.002, 0.01]})  # t02 changed
    assert _tune(path, "--out", out, "--report-only").exit_code == 0
    t02 = next(
        line for line in (out / "tu-tune.md").read_text().splitlines() if "| tu-t2  |" in line
    )
    assert "engine.delay_s=0.01" in t02 and "winner" not in t02 and "passed" not in t02


def test_degenerate_tunes_are_refused_with_the_reason(tmp_path, write_recipe, base_recipe):
    path = _tune_file(write_recipe, base_recipe, {"engine.dealy_s": [0.001]})
    assert (
        "tune.axes: all 1 candidates are refused by the recipe's checks; the first: "
        in user_error(_tune(path))
    )
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.001]}, budget={"cells": 3})
    assert (
        "tune.budget.cells: budget.cells 3 leaves no room for a candidate (one needs 8 measured "
        "runs" in user_error(_tune(path))
    )
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.001]})
    assert "--report-only: no stored run of this tune in " in user_error(
        _tune(path, "--out", tmp_path, "--report-only")
    )
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.001]}, confirm={"repeat": 1})
    assert "tune.confirm.repeat: Input should be greater than or equal to 2" in user_error(
        _tune(path)
    )


def test_range_edges():
    import pytest
    from pydantic import ValidationError

    from runner.tune.spec import Range

    assert Range(low=0.1, high=0.3, scale="linear", step=0.1).values() == [0.1, 0.2, 0.3]
    assert Range(low=-3, high=-1, scale="linear", step=1).values() == [-3, -2, -1]
    with pytest.raises(ValidationError, match="a linear range needs a step"):
        Range(low=1, high=2, scale="linear")


def test_the_winners_recipe_carries_the_calls_set_overrides(tmp_path, write_recipe, base_recipe):
    path, out = (
        _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.0005]}),
        tmp_path / "out",
    )
    assert _tune(path, "--out", out, "--set", "sampling.max_tokens=4").exit_code == 0
    recipe = (out / "tu-tune.md").read_text().split("## The winner's recipe")[1]
    assert "max_tokens: 4" in recipe and "delay_s: 0.0005" in recipe


def test_a_failed_run_costs_its_wall_time():
    from runner.tune.report import _run_s

    r = RunResult(
        name="f", recipe=a_recipe("f"), status="failed", started_at="2026-12-04T10:00:00+00:00"
    )
    assert _run_s(r.model_copy(update={"finished_at": "2026-12-04T10:00:08+00:00"})) == 8.0


def _study(write_recipe, base_recipe, **tune):
    """A study of fake-engine cells: `st-slow` (the baseline), `st-hand` (a hand-written fast cell),
    `st-wrong`."""
    study = {
        **base_recipe,
        "name": "st",
        "model": {"id": "none"},
        "engine": _engine(0.02),  # far apart, as above: a loaded machine keeps the order
        "metrics": ["exact_match"],
        "variants": {
            "slow": {"baseline": True},
            "hand": {"engine.delay_s": 0.0075},
            "wrong": {"engine.reply": WRONG},
        },
        "baseline": "st-slow",
        "tune": {
            "axes": {"engine.delay_s": {"fast": 0.005, "mid": 0.01}},
            "gate": {"metric": "exact_match", "max_drop": 0.05},
            "screen": {"examples": 12, "keep": 1.0},
            "confirm": {"repeat": 3},
            **tune,
        },
    }
    return write_recipe(study, "st.yaml")


def test_a_study_tunes_from_its_baseline_cell_and_sets_the_winner_against_its_hand_written_cell(
    tmp_path, write_recipe, base_recipe
):
    """The candidates change the study's baseline cell (st-slow), labelled values are shown by
    label, and the hand-written cell named in `compare` is confirmed with the same repeats and set
    against the winner."""
    path, out = _study(write_recipe, base_recipe, compare=["st-hand"]), tmp_path / "out"
    r = _tune(path, "--out", out, "--dry-run")
    assert r.exit_code == 0, r.output
    assert (
        "with the recipe as written (st-slow, the baseline)" in r.output
        and "hand-written st-hand" in r.output
    )
    assert (
        "engine.delay_s=fast" in r.output
        and "| st-hand    | hand-written cell of the study | confirm |" in r.output
    )
    r = _tune(path, "--out", out)
    assert r.exit_code == 0, r.output
    assert (
        "tune st-slow: st-slow-t1 is the fastest that passed, clearly faster than the recipe as "
        "written" in r.output
    )
    assert (
        "Against the fastest hand-written cell, st-hand (" in r.output
        and "the winner st-slow-t1 is " in r.output
    )
    hand = json.loads((out / "st-hand" / "results.json").read_text())
    # every example, the confirmation's repeats
    assert hand["n_samples"] == 36 and len(hand["repeats"]) == 3
    report = (out / "st-slow-tune.md").read_text()
    rows = {
        line.split("|")[2].strip(): line for line in report.splitlines() if line.startswith("| ")
    }
    assert "hand-written cell" in rows["st-hand"] and "exact_match +0.000" in rows["st-hand"]
    assert (
        "name: st-slow-tuned" in report and "delay_s: 0.005" in report and "variants" not in report
    )


def test_a_study_tunes_start_and_hand_written_cells_are_the_studys_own_runs(
    tmp_path, write_recipe, base_recipe
):
    """The confirmation runs the start cell as the study's cell (not a copy outside it): the study's
    summary counts it as its baseline, and a later `runner go` of the study finds both cells done
    instead of running them again."""
    path, out = _study(write_recipe, base_recipe, compare=["st-hand"]), tmp_path / "out"
    assert _tune(path, "--out", out).exit_code == 0
    base = json.loads((out / "st-slow" / "results.json").read_text())
    assert base["cell"]["study"] == "st" and base["cell"]["settings"] == {"variant": "slow"}
    assert len(base["repeats"]) == 3
    summary = (out / "st" / "summary.md").read_text()
    assert "| st-slow " in summary and "| st-hand " in summary and "no baseline" not in summary
    r = CliRunner().invoke(
        cli, ["go", str(path), "--out", str(out), "--only", "st-slow,st-hand", "--in-process"]
    )
    assert r.exit_code == 0, r.output
    assert r.output.count("(results complete; --force reruns)") == 2 and "kept " not in r.output


def test_a_study_tune_names_a_cell_that_exists(tmp_path, write_recipe, base_recipe):
    path = _study(write_recipe, base_recipe, start="st-slwo")
    err = user_error(_tune(path, "--dry-run"))
    assert err.startswith(
        "Error: {tmp}/st.yaml: tune.start: 'st-slwo' names no cell of the study\n"
    )
    assert "did you mean 'st-slow'?" in err
    path = _study(write_recipe, base_recipe, compare=["st-slow"])
    assert "tune.compare: 'st-slow' is the cell the tune starts from" in user_error(
        _tune(path, "--dry-run")
    )
    recipe = {**base_recipe, "tune": {"axes": {"sampling.max_tokens": [8]}, "compare": ["x"]}}
    err = user_error(_tune(write_recipe(recipe), "--dry-run"))
    assert "tune.compare: only a study file has cells to start from or compare with" in err


def test_a_text_axis_value_equal_to_the_recipes_is_the_recipe_as_written(
    tmp_path, write_recipe, base_recipe
):
    """Text values reach the recipe as written (not JSON-quoted): the template the recipe has is
    recognized."""
    path = _tune_file(
        write_recipe, base_recipe, {"prompt.template": ["jsquad.j2", "jsquad-context-first.j2"]}
    )
    r = _tune(path, "--dry-run")
    assert r.exit_code == 0, r.output
    rows = {
        line.split("|")[1].strip(): line
        for line in r.output.splitlines()
        if line.startswith("| tu-")
    }
    assert (
        "the recipe as written (not run: it is the baseline)" in rows["tu-t1"]
        and "| screen" in rows["tu-t2"]
    )


def test_an_unfinished_confirmation_or_a_failed_baseline_crowns_nothing_and_says_so():
    spec = TuneSpec(axes={"engine.delay_s": [1, 2]})
    a = Cell(1, "a", {}, full=_timed("a", [1.0, 1.1, 0.9]))
    # b and c not confirmed yet
    d = decide([a, Cell(2, "c", {})], Cell(0, "b", {}), spec, lambda r: {})
    assert d.winners == [] and d.words == (
        "Unfinished: 2 of 3 confirmation runs are not stored yet (b, c); the same command "
        "continues the tune."
    )
    failed = RunResult(name="b", recipe=a_recipe("b"), status="failed", error="boom")
    d = decide([a], Cell(0, "b", {}, full=failed), spec, lambda r: {})
    assert d.winners == [] and d.words.startswith(
        "The recipe as written (b) failed on every example"
    )


def test_the_winners_recipe_writes_lists_of_values_on_one_line():
    from runner.tune.report import winner_yaml

    text = winner_yaml(
        {"name": "x", "engine": {"kind": "vllm"}}, {"engine.engine_args.sizes": [1, 2, 4]}, "x"
    )
    assert "sizes: [1, 2, 4]\n" in text and "name: x-tuned\n" in text


def test_axes_that_change_nothing_are_refused(write_recipe, base_recipe):
    # the recipe's own delay
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.004]})
    err = user_error(_tune(path, "--dry-run"))
    assert err.startswith(
        "Error: {tmp}/tu.yaml: tune.axes: every candidate is the recipe as written: the axes "
        "change "
    )


@pytest.mark.parametrize("k", [4, 8])
def test_the_winners_curse_is_controlled_when_no_candidate_is_faster(k):
    """k candidates, none truly faster than the recipe as written: the screen keeps the fastest
    `keep` share (its own runs), the confirmation measures them and the baseline 3 times in turns (a
    shared load per turn and the fake engine's jitter per run), and the tune picks the fastest of
    those same runs. With the winner's interval widened for the candidates it was picked from
    (Bonferroni), a winner is crowned in at most 5% of 2,000 simulated tunes: here 2.1% (k = 4, 2
    confirmed) and 1.5% (k = 8, 4 confirmed); at a plain 95% it was 3.8% and 5.7%."""
    import random

    from runner.engines.fake import jitter_factor

    spec = TuneSpec(axes={"x": list(range(k))}, confirm={"repeat": 3}, screen={"keep": 0.5})
    rng, crowned, trials = random.Random(k), 0, 2000
    for _ in range(trials):
        screen = sorted(range(k), key=lambda i: jitter_factor(0.05, rng))
        kept = screen[: spec.confirmed(k)]
        loads = [jitter_factor(0.05, rng) for _ in range(3)]
        run = lambda name, loads=loads: _timed(
            name, [2.0 * f * jitter_factor(0.05, rng) for f in loads]
        )
        base = Cell(0, "b", {}, full=run("b"))
        cells = [Cell(i + 1, f"c{i}", {}, full=run(f"c{i}")) for i in kept]
        crowned += bool(decide(cells, base, spec, lambda r: {}).winners)
    assert crowned / trials <= 0.05, crowned / trials


def test_the_tune_lists_the_front_and_crowns_the_fastest_on_it_that_passed():
    """Time against the gate's score: a candidate slower and no more accurate than another is off
    the front; the winner is the fastest on the front that passed the gate."""
    from runner.tune.search import front

    spec = TuneSpec(axes={"x": [1, 2, 3]}, gate={"metric": "exact_match", "max_drop": 0.5})
    rows = lambda em: {f"q{i}": {"exact_match": em(i)} for i in range(40)}
    samples = {
        "b": rows(lambda i: 1.0),
        "fast": rows(lambda i: 1.0 if i % 4 else 0.0),
        "slow": rows(lambda i: 0.0),
    }
    samples["mid"] = rows(lambda i: 1.0)
    scored = lambda name, times, em: _timed(name, times).model_copy(
        update={"scores": {"exact_match": em}, "scores_meaningful": True}
    )
    base = Cell(0, "b", {}, full=scored("b", [2.0, 2.05, 1.95], 1.0))
    fast = Cell(1, "fast", {}, full=scored("fast", [0.5, 0.51, 0.49], 0.75))
    mid = Cell(2, "mid", {}, full=scored("mid", [1.0, 1.02, 0.98], 1.0))
    slow = Cell(3, "slow", {}, full=scored("slow", [1.5, 1.52, 1.48], 0.0))
    # b: slower, no better
    assert [c.name for c in front([base, fast, mid, slow], "exact_match")] == ["fast", "mid"]
    d = decide([fast, mid, slow], base, spec, lambda r: samples[r.name])
    assert [c.name for c in d.front] == ["fast", "mid"] and [c.name for c in d.winners] == ["fast"]
    assert slow.verdict == "failed the gate on every example"


def test_a_range_over_the_cap_and_a_repeated_value_are_refused_with_the_reason():
    """A range of 1,001 values was cut to 1,000 without a word, and a value listed twice ran
    twice."""
    from pydantic import ValidationError

    with pytest.raises(
        ValidationError, match="the range gives more than 1,000 values: raise `step` or narrow"
    ):
        TuneSpec(axes={"engine.delay_s": {"low": 0, "high": 1000, "scale": "linear", "step": 1}})
    assert (
        len(
            TuneSpec(
                axes={"x": {"low": 1, "high": 1000, "scale": "linear", "step": 1}}
            ).candidates()
        )
        == 1000
    )
    with pytest.raises(
        ValidationError, match="axis 'x' lists 2 twice: each value is one candidate"
    ):
        TuneSpec(axes={"x": [1, 2, 2]})
    with pytest.raises(ValidationError, match="axis 'e' lists {\"a\": 1} twice"):
        TuneSpec(axes={"e": {"one": {"a": 1}, "two": {"a": 1}}})


def test_a_set_that_pins_a_tuned_setting_is_refused(write_recipe, base_recipe):
    """A --set of a key the axes vary would make every candidate the same: refused before anything
    runs, as a study refuses one that pins an axis."""
    path = _tune_file(write_recipe, base_recipe, {"engine.delay_s": [0.001, 0.002]})
    err = user_error(_tune(path, "--dry-run", "--set", "engine.delay_s=0.003"))
    assert err.startswith(
        "Error: {tmp}/tu.yaml: --set engine.delay_s: the tune varies 'engine.delay_s' across its "
        "candidates; setting it for every one makes them the same\n"
    )
    assert "change the tune's axes in the file" in err


def test_the_tune_driver_runs_without_the_cli(tmp_path, write_recipe, base_recipe):
    """runner/tune/driver.py takes typed settings and the caller's wiring: a script tunes with no
    click loaded, the candidates' settings set into the recipe's data (no `--set` text), and its
    messages go where the caller says."""
    import subprocess
    import sys
    from pathlib import Path

    path = _tune_file(
        write_recipe, base_recipe, {"engine.delay_s": [0.002], "engine.reply": ["{{ answers[0] }}"]}
    )
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from runner.orchestrate import NO_WINGS\n"
        "from runner.tune import driver\n"
        "call = driver.Call(Path(sys.argv[1]), Path(sys.argv[2]), in_process=True, "
        "progress=False)\nsaid = []\n"
        "w = driver.Wiring(NO_WINGS, None, None, lambda text, err: said.append(text))\n"
        "t = driver.prepare(call, w)\n"
        "lr = t.load(t.cells[0].settings, t.cells[0].name)\n"
        "print(lr.recipe.engine.delay_s, lr.recipe.engine.reply, lr.overrides)\n"
        "print(driver.run(t, w).report.name, 'click' in sys.modules, any('tu-t1-screen' in s for s "
        "in said))\n"
    )
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0.002 {{ answers[0] }} []", "tu-tune.md False True"]
