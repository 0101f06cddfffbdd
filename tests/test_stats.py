"""Small statistics: percentiles, time projections with intervals, shared prefixes, McNemar."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from runner.base.stats import common_prefix_len, mcnemar_exact, percentile, prefix_share, project, summary, t95
from runner.base.types import Example
from runner.inputs.prompts import PromptBuilder
from runner.recipe import PromptSpec

SHARED = Path(__file__).resolve().parents[2] / "shared"


# --------------------------------------------------------------------------- percentile / summary


def test_percentile_known_values():
    xs = [1, 2, 3, 4, 5]
    assert percentile(xs, 0) == 1
    assert percentile(xs, 50) == 3
    assert percentile(xs, 100) == 5
    assert percentile(xs, 25) == 2
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile(list(range(1, 11)), 90) == pytest.approx(9.1)
    assert percentile([7.0], 99) == 7.0


def test_percentile_ignores_input_order():
    assert percentile([5, 1, 4, 2, 3], 50) == 3
    assert percentile([10, 0], 30) == pytest.approx(3.0)


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    rng = random.Random(1)
    for n in (1, 2, 7, 40, 101):
        xs = [rng.random() * 10 for _ in range(n)]
        for q in (0, 1, 33.3, 50, 90, 99, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), abs=1e-12)


def test_percentile_empty_raises():
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summary():
    s = summary([1, 2, 3, 4, None, 5])
    assert s == {"p50": 3, "p90": pytest.approx(4.6), "p99": pytest.approx(4.96), "mean": 3.0}
    assert summary([]) is None
    assert summary([None]) is None


# --------------------------------------------------------------------------- project


def test_project_known_sequence():
    p = project([1, 2, 3, 4, 5], 100)
    sd = math.sqrt(2.5)  # sample sd of 1..5
    half = 2.776 * sd / math.sqrt(5)  # t(4) = 2.776
    assert p["per_example_s"] == pytest.approx(3.0)
    assert p["projected_s"] == pytest.approx(300.0)
    assert p["low_s"] == pytest.approx((3 - half) * 100)
    assert p["high_s"] == pytest.approx((3 + half) * 100)
    assert p["low_s"] == pytest.approx(103.71, abs=0.01)
    assert p["high_s"] == pytest.approx(496.29, abs=0.01)


def test_project_constant_times_has_zero_width():
    p = project([2.0, 2.0, 2.0], 10)
    assert p["projected_s"] == pytest.approx(20.0)
    assert p["low_s"] == pytest.approx(20.0)
    assert p["high_s"] == pytest.approx(20.0)


def test_project_single_sample_has_no_interval():
    p = project([4.0], 50)
    assert p["projected_s"] == pytest.approx(200.0)
    assert math.isnan(p["low_s"]) and math.isnan(p["high_s"])


def test_project_interval_brackets_projection():
    rng = random.Random(0)
    xs = [rng.uniform(1, 3) for _ in range(40)]
    p = project(xs, 4442)
    assert p["low_s"] < p["projected_s"] < p["high_s"]
    assert p["projected_s"] == pytest.approx(sum(xs) / 40 * 4442)


def test_t95_table_values():
    assert t95(1) == 12.706
    assert t95(4) == 2.776
    assert t95(10) == 2.228
    assert t95(0) == float("inf")
    assert 1.96 <= t95(10_000) <= 1.962


# two-sided 95% Student t quantiles (t_{0.975, df}) from standard tables
TRUE_T975 = {
    11: 2.201,
    13: 2.160,
    14: 2.145,
    16: 2.120,
    19: 2.093,
    21: 2.080,
    29: 2.045,
    35: 2.030,
    39: 2.023,
    50: 2.009,
    100: 1.984,
    200: 1.972,
}


@pytest.mark.parametrize("df", sorted(TRUE_T975))
def test_t95_is_never_below_the_true_quantile(df):
    assert t95(df) >= TRUE_T975[df] - 5e-4


# --------------------------------------------------------------------------- shared prefixes


def test_common_prefix_len():
    assert common_prefix_len([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_len([[1, 2, 3], [1, 2, 3]]) == 3
    assert common_prefix_len([[1, 2, 3]]) == 3
    assert common_prefix_len([[9, 2], [1, 2]]) == 0
    assert common_prefix_len([[1, 2], []]) == 0
    assert common_prefix_len([]) == 0


def test_prefix_share():
    k, share = prefix_share([[1, 2, 3, 4], [1, 2, 5, 6]])
    assert k == 2
    assert share == pytest.approx(2 * 2 / 8)
    k, share = prefix_share([[7, 7, 7], [7, 7, 7, 8, 9], [7, 7, 7, 1]])
    assert k == 3
    assert share == pytest.approx(9 / 12)
    assert prefix_share([]) == (0, 0.0)


def test_prefix_share_on_rendered_oneshot_prompts(tmp_path):
    """Prompts rendered from the one-shot templates share exactly the system prompt plus the
    user template's head ("\\nQuestion:") when the questions differ in their first character."""
    shot = {"question": "琵琶湖がある都道府県はどこか。", "context": "琵琶湖 [SEP] 滋賀県にある。", "answer": "滋賀県"}
    b = PromptBuilder(
        PromptSpec(
            template="jsquad.j2",
            system_template="jsquad-system-oneshot.j2",
            shots={"placement": "system", "examples": [shot]},
        ),
        tmp_path,
        "r.yaml",
    )
    exs = [
        Example("1", "日本の首都は？", "東京"),
        Example("2", "富士山の高さは？", "3776m"),
        Example("3", "琵琶湖の面積は？", "670"),
    ]
    texts = ["\n".join(m["content"] for m in b.messages(e)) for e in exs]
    seqs = [[ord(ch) for ch in t] for t in texts]
    system = b.messages(exs[0])[0]["content"]
    expected = len(system) + len("\n") + len("\nQuestion:")
    k, share = prefix_share(seqs)
    assert k == expected
    assert texts[0][:k].endswith("\nQuestion:")
    assert share == pytest.approx(k * 3 / sum(len(s) for s in seqs))


# --------------------------------------------------------------------------- McNemar


def test_mcnemar_known_values():
    assert mcnemar_exact(0, 6) == pytest.approx(0.03125)  # 2 * (1/2)^6
    assert mcnemar_exact(6, 0) == pytest.approx(0.03125)
    assert mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 1024)
    assert mcnemar_exact(0, 5) == pytest.approx(0.0625)
    assert mcnemar_exact(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024)


def test_mcnemar_no_evidence():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0  # capped at 1
    assert mcnemar_exact(5, 4) == 1.0


def test_mcnemar_symmetric_and_decreasing():
    assert mcnemar_exact(3, 12) == pytest.approx(mcnemar_exact(12, 3))
    ps = [mcnemar_exact(0, n) for n in range(1, 12)]
    assert all(a > b for a, b in zip(ps, ps[1:]))


def test_paired_bootstrap_covers_the_true_mean_at_about_95_percent():
    """Paired score differences with a known mean (-1, 0, +1 with probabilities .3, .5, .2: mean -0.1): over 200
    simulated comparisons of 150 examples the interval holds -0.1 about 95% of the time, and the same
    differences always give the same interval (fixed seed)."""
    import random

    from runner.base.stats import paired_bootstrap

    rng, hits = random.Random(1), 0
    for _ in range(200):
        diffs = rng.choices([-1.0, 0.0, 1.0], weights=[0.3, 0.5, 0.2], k=150)
        _, lo, hi = paired_bootstrap(diffs)
        hits += lo <= -0.1 <= hi
    assert 0.90 <= hits / 200 <= 0.99
    assert paired_bootstrap(diffs) == paired_bootstrap(list(diffs))
    assert paired_bootstrap([0.5] * 7) == (0.5, 0.5, 0.5)
