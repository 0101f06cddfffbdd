"""Small statistics: percentiles, time projections with intervals, shared prefixes, McNemar."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from runner.base.stats import (
    MIN_PAIRED,
    combined_log,
    common_prefix_len,
    examples_to_resolve,
    geomean_interval,
    interval_of,
    mcnemar_exact,
    paired_interval,
    percentile,
    prefix_share,
    project,
    summary,
    t_quantile,
)
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
    half = 2.7764451 * sd / math.sqrt(5)  # t(4)
    assert p["per_example_s"] == pytest.approx(3.0)
    assert p["projected_s"] == pytest.approx(300.0)
    assert p["low_s"] == pytest.approx((3 - half) * 100)
    assert p["high_s"] == pytest.approx((3 + half) * 100)
    assert p["low_s"] == pytest.approx(103.68, abs=0.01)
    assert p["high_s"] == pytest.approx(496.32, abs=0.01)


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


def test_t_quantile_known_values():
    """Student t's two-sided 95% quantiles from standard tables; fractional degrees of freedom
    (Welch) in between."""
    for df, q in {1: 12.706, 4: 2.776, 10: 2.228, 29: 2.045, 200: 1.972}.items():
        assert t_quantile(df) == pytest.approx(q, abs=5e-4)
    assert t_quantile(4) < t_quantile(3.5) < t_quantile(3)
    assert t_quantile(0) == float("inf")
    assert t_quantile(10, level=0.99) == pytest.approx(3.169, abs=5e-4)


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
    shot = {
        "question": "琵琶湖がある都道府県はどこか。",
        "context": "琵琶湖 [SEP] 滋賀県にある。",
        "answer": "滋賀県",
    }
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


# --------------------------------------------------------------------------- paired score
# differences
# Coverage by seeded simulation at the smallest n the runner accepts (MIN_PAIRED): per-example
# differences of an
# exact-match score (-1, 0, +1: answers lost, kept, gained) and of an F1-like score (continuous,
# clipped to -1..1).

SCENARIOS = {
    "EM, 15% lost, 10% gained": lambda rng, n: rng.choices(
        [-1.0, 0.0, 1.0], weights=[0.15, 0.75, 0.10], k=n
    ),
    "EM, 30% lost, 20% gained": lambda rng, n: rng.choices(
        [-1.0, 0.0, 1.0], weights=[0.3, 0.5, 0.2], k=n
    ),
    "F1-like, mean -0.03": lambda rng, n: [
        max(-1.0, min(1.0, rng.gauss(-0.03, 0.2))) for _ in range(n)
    ],
}
TRUE_MEAN = {"EM, 15% lost, 10% gained": -0.05, "EM, 30% lost, 20% gained": -0.1}


def _true_mean(name: str) -> float:
    if name in TRUE_MEAN:
        return TRUE_MEAN[name]
    rng = random.Random(99)
    xs = SCENARIOS[name](rng, 200_000)
    return sum(xs) / len(xs)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_paired_interval_covers_the_true_mean_at_the_smallest_n(name):
    """At 30 paired examples the 95% interval holds the true mean difference 93-97% of 3,000
    simulated comparisons (a percentile bootstrap held it 85-89% at 5-10 examples, which is why
    fewer than 30 give no interval)."""
    rng, truth, hits, trials = random.Random(7), _true_mean(name), 0, 3000
    for _ in range(trials):
        _, lo, hi = paired_interval(SCENARIOS[name](rng, MIN_PAIRED))
        hits += lo <= truth <= hi
    assert 0.93 <= hits / trials <= 0.97, hits / trials


def test_paired_interval_says_too_few_below_the_minimum():
    assert MIN_PAIRED == 30
    assert paired_interval([0.0] * 29) is None
    assert paired_interval([1.0]) is None  # one example: no zero-width "clear difference"
    assert paired_interval([0.5] * 30) == (0.5, 0.5, 0.5)


def test_a_true_drop_equal_to_the_allowance_passes_the_gate_at_most_at_the_nominal_rate():
    """The gate passes when the lower end is above -allowance: a one-sided 2.5% test. With the true
    drop exactly at the allowance (EM: 15% lost, 10% gained, drop 0.05; allowance 0.05), at 30
    examples it passes under 3.5% of 4,000 simulated gates (the percentile bootstrap passed 8.4% at
    5 examples)."""
    rng, passed, trials = random.Random(11), 0, 4000
    for _ in range(trials):
        _, lo, _ = paired_interval(SCENARIOS["EM, 15% lost, 10% gained"](rng, MIN_PAIRED))
        passed += lo > -0.05
    assert passed / trials <= 0.035, passed / trials


@pytest.mark.parametrize("n", [2, 3, 10])
def test_geomean_interval_covers_at_the_smallest_n(n):
    """Times = 2 s x the fake engine's log-normal jitter: the interval of the geometric mean holds 2
    s about 95% of the time from 2 repeats on."""
    from runner.engines.fake import jitter_factor

    rng, hits, trials = random.Random(5), 0, 4000
    for _ in range(trials):
        _, lo, hi = geomean_interval([2.0 * jitter_factor(0.3, rng) for _ in range(n)])
        hits += lo <= 2.0 <= hi
    assert 0.935 <= hits / trials <= 0.965, hits / trials


@pytest.mark.parametrize("n", [2, 3, 10])
def test_combined_speed_up_over_pairs_that_share_a_cell_covers(n):
    """A study's `variant vllm -> hf`: two vLLM cells (1 s and 1.2 s) each paired with the same hf
    cell (8 s), n repeats each with the fake engine's jitter. The geometric mean of the two
    speed-ups is sqrt(8/1 x 8/1.2); counting the hf cell's noise once with its weight
    (Welch-Satterthwaite over the cells) holds it 93.5-97% of the time; treating the two pairs as
    independent, as before, held it under 92% at 10 repeats."""
    from runner.engines.fake import jitter_factor

    truth = math.log(math.sqrt(8 / 1 * 8 / 1.2))
    rng, hits, naive, trials = random.Random(n), 0, 0, 3000
    for _ in range(trials):
        v1, v2, hf = ([t * jitter_factor(0.2, rng) for _ in range(n)] for t in (1.0, 1.2, 8.0))
        lo, hi = interval_of(*combined_log([hf, v1, v2], [1.0, -0.5, -0.5]))
        hits += lo <= math.exp(truth) <= hi
        parts = [combined_log([hf, v], [1.0, -1.0]) for v in (v1, v2)]
        se = math.sqrt(sum(p[1] ** 2 for p in parts)) / 2
        m = sum(p[0] for p in parts) / 2
        nlo, nhi = interval_of(m, se, min(p[2] for p in parts))
        naive += nlo <= math.exp(truth) <= nhi
    # Welch-Satterthwaite errs wide at 2 repeats
    assert 0.935 <= hits / trials <= 0.985, hits / trials
    if n == 10:
        assert naive / trials < 0.92, naive / trials


def test_examples_to_resolve_an_effect():
    """((1.96 + 0.84) x sd / effect)^2: an effect of 0.01 at an sd of 0.3 needs about 7,064
    examples."""
    assert examples_to_resolve(0.3, 0.01, 100) == 7064
    assert examples_to_resolve(0.3, -0.01, 100) == 7064
    # already more than enough: at least one more than now
    assert examples_to_resolve(0.3, 0.5, 100) == 101
    assert examples_to_resolve(0.0, 0.01, 100) is None


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_drift_check_is_wrong_at_its_stated_rate_and_finds_a_real_drift(n):
    """Repeats with the fake engine's jitter and no drift: a drift is reported in about 5% of 4,000
    simulations (the slope's 95% interval excludes 0); with a 5%-per-repeat drift at 10 repeats it
    is found almost always."""
    from runner.base.stats import drift
    from runner.engines.fake import jitter_factor

    rng, false, trials = random.Random(n), 0, 4000
    for _ in range(trials):
        _, lo, hi = drift([2.0 * jitter_factor(0.05, rng) for _ in range(n)])
        false += not lo <= 0 <= hi
    assert 0.035 <= false / trials <= 0.065, false / trials
    if n == 10:
        found = sum(
            drift([2.0 * 1.05**i * jitter_factor(0.05, rng) for i in range(n)])[1] > 0
            for _ in range(200)
        )
        assert found >= 190
    assert drift([1.0, 2.0]) is None
    share, lo, hi = drift([1.0, 1.1, 1.21, 1.331])
    assert share == pytest.approx(0.1) and lo == pytest.approx(0.1) and hi == pytest.approx(0.1)


def test_the_projection_interval_covers_at_the_smallest_n_it_is_given():
    """`estimate: N` projects the full time from N per-example times (mean x N, Student t).
    Per-example times log-normal (sd 0.3 on the log): at 30 examples, the smallest that gets an
    interval, it holds the true mean 93-96.5% of 4,000 simulations (at 5 examples and a skew of 0.6
    it held 90%: below 30 there is no interval)."""
    from runner.base.stats import MIN_PROJECTED

    rng, hits, trials, truth = random.Random(1), 0, 4000, math.exp(0.3**2 / 2)
    for _ in range(trials):
        p = project([math.exp(rng.gauss(0, 0.3)) for _ in range(MIN_PROJECTED)], 1)
        hits += p["low_s"] <= truth <= p["high_s"]
    assert 0.93 <= hits / trials <= 0.965, hits / trials


def test_an_estimate_from_too_few_examples_has_no_interval():
    from runner.results import Sample
    from runner.run.result import project_estimate

    one = dict(prompt="p", output="o", answers=[], prompt_tokens=1, output_tokens=1)
    few = [Sample(id=str(i), seconds=0.1 * (i + 1), **one) for i in range(5)]
    e = project_estimate(few, 1.5, True, 100)
    assert e.projected_s == pytest.approx(30.0) and e.low_s is None and e.high_s is None
    assert "too few examples to tell (n = 5, an interval needs 30): no interval" in e.method


@pytest.mark.parametrize("paired_turns", [True, False])
def test_combined_speed_up_over_independent_pairs_covers(paired_turns):
    """A setting's effect over two pairs of cells with no cell in common (3 repeats each, a shared
    load per turn where the pair took turns): the interval of the geometric mean of the two
    speed-ups (each pair's own interval, Welch-Satterthwaite over the parts) holds sqrt(2 x 3)
    93.5-98.5% of 3,000 simulations."""
    from runner.base.stats import combined_interval, log_ratio
    from runner.engines.fake import jitter_factor

    rng, hits, trials, truth = random.Random(9), 0, 3000, math.sqrt(2 * 3)
    for _ in range(trials):
        parts = []
        for ratio in (2.0, 3.0):
            load = [jitter_factor(0.2, rng) for _ in range(3)]
            other = load if paired_turns else [jitter_factor(0.2, rng) for _ in range(3)]
            a = [ratio * f * jitter_factor(0.05, rng) for f in load]
            b = [f * jitter_factor(0.05, rng) for f in other]
            parts.append(log_ratio(a, b, paired_turns))
        lo, hi = combined_interval(parts)
        hits += lo <= truth <= hi
    assert 0.935 <= hits / trials <= 0.985, hits / trials
