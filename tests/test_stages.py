"""Where a run's wall time went (issue 41): each stage timed where it happens, in results.json and
one table in report.md."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner

from runner.cli import cli
from runner.report.markdown import report_markdown
from runner.results import RunResult, Stages

NAMED = ("prepare_s", "process_s", "start_s", "warmup_s", "tokenize_s", "generate_s", "write_s")


def _run(tmp_path, write_recipe, base_recipe, *extra, **fields):
    recipe = {
        **base_recipe,
        "name": "f",
        "model": {"id": "none"},
        "engine": {"kind": "fake", "delay_s": 0.02, "reply": "{{ answers[0] }}"},
        **fields,
    }
    out, t0 = tmp_path / "out", time.perf_counter()
    args = ["go", str(write_recipe(recipe)), "--out", str(out), "--limit", "10", "--no-progress"]
    r = CliRunner().invoke(cli, [*args, *extra])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "f" / "results.json").read_text())
    return res, time.perf_counter() - t0, (out / "f" / "report.md").read_text()


def _adds_up(s: dict, outer_s: float) -> None:
    """Every stage a time, none counted twice (the rest, `other_s`, not negative), the whole within
    the call's own wall time."""
    assert all(v >= 0 for k, v in s.items() if k != "other_s"), s
    assert s["other_s"] >= -1e-9, s
    assert abs(sum(s[k] for k in NAMED) + s["other_s"] - s["wall_s"]) < 1e-9
    assert s["prepare_s"] > 0 and s["tokenize_s"] > 0 and s["write_s"] > 0
    assert s["wall_s"] <= outer_s


def test_stages_of_a_run_add_up_to_its_wall_time(tmp_path, write_recipe, base_recipe):
    res, outer_s, report = _run(tmp_path, write_recipe, base_recipe, "--in-process", warmup=1)
    s = res["stages"]
    _adds_up(s, outer_s)
    # 10 examples at 0.02 s each: the generation and its warm-up, each a sleep of 0.2 s at least
    assert s["generate_s"] >= 0.2 and s["warmup_s"] >= 0.2
    assert s["generate_s"] >= res["timings"]["generate_s"] - res["repeats"][0]["reused_s"]
    assert s["process_s"] == 0  # in the caller's process
    assert s["start_s"] > 0 and 0 < s["sink_s"] < s["generate_s"] + s["warmup_s"]
    assert res["repeats"][0]["stages"] == {
        **s,
        "prepare_s": 0,
        "wall_s": s["wall_s"] - s["prepare_s"],
    }
    assert "### Where the time went" in report
    share = f"{s['generate_s'] / s['wall_s']:.0%}"
    assert any(
        line.startswith("| generation ") and f"| {share} " in line for line in report.splitlines()
    )


def test_stages_sum_over_repeats_and_count_the_process_start(tmp_path, write_recipe, base_recipe):
    res, outer_s, _ = _run(tmp_path, write_recipe, base_recipe, repeat=2)
    s, reps = res["stages"], res["repeats"]
    _adds_up(s, outer_s)
    assert s["generate_s"] >= 0.4 and s["process_s"] > 0 and s["warmup_s"] == 0
    for k in s:  # the run's: its repeats' and the input preparation
        want = sum(x["stages"][k] for x in reps) + s["prepare_s"] * (k in ("prepare_s", "wall_s"))
        assert abs(s[k] - want) < 1e-9, k
    # the process and the engine start counted once, by the repeat after them
    assert reps[0]["stages"]["process_s"] > 0 and reps[1]["stages"]["process_s"] == 0


def test_a_result_stored_before_stages_loads_and_its_report_has_no_table(
    tmp_path, write_recipe, base_recipe
):
    res, _, _ = _run(tmp_path, write_recipe, base_recipe, "--in-process")
    del res["stages"]
    for x in res["repeats"]:
        del x["stages"]
    r = RunResult.model_validate(res)
    assert r.stages is None
    assert "Where the time went" not in report_markdown(r, [])
    assert "Where the time went" in report_markdown(r.model_copy(update={"stages": Stages()}), [])
