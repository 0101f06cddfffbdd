"""runner/report/spread.py's rules for setting two runs' times side by side, and its legend."""

from __future__ import annotations

from pathlib import Path

from runner.report.spread import LEGEND, speedup, why_no_ratio
from tests.test_report import recipe, result

REAL = recipe("real")
FIXED = {"sampling": {"ignore_eos": True, "max_tokens": 32}}


def test_random_weights_against_real_weights_give_no_speed_up():
    """Random weights answer with other lengths: a ratio against real weights compares other work
    (a demo cell against a real model was headlined 183x)."""
    real, dummy = result("real", REAL, generate_s=20.0), result("dummy", meaningful=False)
    why = "random weights against real weights: their outputs differ in length"
    assert why_no_ratio(real, dummy) == why_no_ratio(dummy, real) == why
    assert speedup(real, dummy) is None and speedup(dummy, real) is None
    fake = result("fake", recipe("fake", engine={"kind": "fake"}), meaningful=False)
    assert why_no_ratio(real, fake) == (
        "a fake engine against real weights: their outputs differ in length"
    )
    # two runs alike (both random, both real): a ratio
    assert why_no_ratio(dummy, fake) is None and speedup(dummy, fake) == (1.0, None, None)
    assert round(speedup(real, result("b"))[0], 9) == 2.0  # type: ignore[index]


def test_a_ratio_across_weights_needs_both_held_to_the_same_output_tokens():
    """ignore_eos on both and the same output tokens measured: the same work, a ratio; ignore_eos on
    one only, or other counts (another max_tokens, a stop string that still ends outputs): none."""
    real = result("real", recipe("real", **FIXED), generate_s=20.0)
    dummy = result("dummy", recipe("dummy", **FIXED), meaningful=False)
    assert why_no_ratio(real, dummy) is None and round(speedup(real, dummy)[0], 9) == 2.0  # type: ignore[index]
    one_sided = result("dummy", meaningful=False)
    assert why_no_ratio(real, one_sided) is not None and speedup(real, one_sided) is None
    shorter = dummy.model_copy(update={"tokens": dummy.tokens.model_copy(update={"output": 40})})
    assert speedup(real, shorter) is None


def test_other_examples_come_before_the_weights():
    real, fewer = result("real", REAL, n=1000), result("screen", n=400, meaningful=False)
    assert why_no_ratio(real, fewer) == "other examples: 400" and speedup(real, fewer) is None


def test_the_legend_is_one_sentence_that_keeps_the_rule_and_points_at_the_full_text():
    assert LEGEND.count(". ") == 0 and LEGEND.endswith(".")
    assert "Student t" in LEGEND and "Welch's t" in LEGEND and "paired" in LEGEND
    assert "an interval that holds 1 is no clear difference" in LEGEND
    doc = Path(__file__).parents[1] / LEGEND.split("in full: ")[1].split(")")[0]
    text = doc.read_text(encoding="utf-8")
    assert '**An interval that holds 1 is written "no clear difference"**' in text
    assert "Welch-Satterthwaite" in text and "ignore_eos" in text
