"""Small statistics: percentiles, projections with intervals, shared prefixes, paired tests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), as numpy's default."""
    s = sorted(xs)
    if not s:
        raise ValueError("no values")
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary(xs: Sequence[float]) -> dict[str, float] | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {**{f"p{q}": percentile(xs, q) for q in (50, 90, 99)}, "mean": sum(xs) / len(xs)}


LEVEL = 0.95  # every interval the reports print


def t_quantile(df: float, level: float = LEVEL) -> float:
    """The two-sided `level` quantile of Student's t with `df` degrees of freedom (scipy; df may be
    fractional, as Welch-Satterthwaite's); infinite without a degree of freedom."""
    if df <= 0:
        return float("inf")
    from scipy.stats import t

    return float(t.ppf((1 + level) / 2, df))


# fewer measured examples: a projection without an interval ("too few examples to tell")
MIN_PROJECTED = 30


def project(per_example_s: Sequence[float], n_total: int) -> dict[str, float]:
    """The time for n_total examples from a sample of per-example times: n_total * mean, with a 95%
    interval from the t-distribution of the mean (assumes the measured examples are representative
    of the rest)."""
    mean, low, high = mean_interval(per_example_s)
    return {
        "per_example_s": mean,
        "projected_s": mean * n_total,
        "low_s": low * n_total,
        "high_s": high * n_total,
    }


def mean_interval(xs: Sequence[float]) -> tuple[float, float, float]:
    """The mean of `xs` and its 95% Student t interval (NaN ends for one value)."""
    n = len(xs)
    m = math.fsum(xs) / n
    if n < 2:
        return m, float("nan"), float("nan")
    half = t_quantile(n - 1) * math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1) / n)
    return m, m - half, m + half


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    n = min((len(s) for s in seqs), default=0)
    return next((i for i in range(n) if any(s[i] != seqs[0][i] for s in seqs)), n)


def prefix_share(seqs: Sequence[Sequence[int]]) -> tuple[int, float]:
    """(tokens every prompt shares at its start, share of all prompt tokens that prefix covers)."""
    total, k = sum(len(s) for s in seqs), common_prefix_len(seqs)
    return k, (k * len(seqs) / total if total else 0.0)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b, c = discordant pair counts."""
    n = b + c
    if n == 0:
        return 1.0
    p = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * p)


MIN_PAIRED = 30  # fewer paired examples: "too few examples to tell", no interval
PAIRED_CI = (
    "Student t on the paired differences, as scipy.stats.ttest_rel; none under 30 paired examples"
)


def paired_interval(diffs: Sequence[float]) -> tuple[float, float, float] | None:
    """The mean of paired differences (one per example, this run's score minus the other's) and its
    95% interval: Student t on the differences. None under MIN_PAIRED examples: too few to tell
    (the t interval covers at its stated rate from there on in the seeded simulations of
    tests/test_stats.py, within about 2 points where few answers change and mostly one way; a
    percentile bootstrap covered 85% at 5 examples and gave one example a zero-width interval)."""
    return mean_interval(diffs) if len(diffs) >= MIN_PAIRED else None


def examples_to_resolve(sd: float, effect: float, n_now: int) -> int | None:
    """How many examples (or repeats) would make a difference of `effect` at noise `sd` (the spread
    of one example's difference, or of one repeat's log ratio) clear at 95% with 80% power: ((z_.975
    + z_.8) sd / effect)^2, at least one more than now; None for no effect or no noise."""
    if not effect or not sd or not math.isfinite(sd):
        return None
    z = NormalDist().inv_cdf  # the standard normal quantile
    need = math.ceil(((z(0.975) + z(0.8)) * sd / abs(effect)) ** 2)
    return max(need, n_now + 1)


TIME_CI = (
    "the geometric mean of the repeats, exp(mean log time), with a Student t interval on "
    "the log times"
)


def geomean_interval(xs: Sequence[float]) -> tuple[float, float | None, float | None]:
    """A typical time from repeated times, with its 95% interval: timing noise is skewed and
    multiplicative, taken as log-normal; the geometric mean exp(mean log) with Student t on the logs
    (so the interval always holds the estimate; under log-normal noise it is the median's interval
    too). One time: itself, no interval."""
    if not xs or any(not x > 0 or not math.isfinite(x) for x in xs):
        raise ValueError("times must be positive and finite")
    m, var = _mean_var([math.log(x) for x in xs])
    if var is None:
        return xs[0], None, None
    return (math.exp(m), *interval_of(m, math.sqrt(var), len(xs) - 1))


def _mean_var(vs: list[float]) -> tuple[float, float | None]:
    """(mean, the variance of that mean); None under two values."""
    m = sum(vs) / len(vs)
    return m, (sum((v - m) ** 2 for v in vs) / (len(vs) - 1) / len(vs) if len(vs) > 1 else None)


def log_ratio(
    a: Sequence[float], b: Sequence[float], paired: bool
) -> tuple[float, float | None, float]:
    """(mean log a - mean log b, its standard error, degrees of freedom): from the log ratios of the
    pairs (`paired`: a[i] and b[i] were measured side by side, turn i of an interleaved run) or
    Welch's t; no error unless each side has 2 times."""
    if paired and len(a) == len(b) >= 2:
        m, var = _mean_var([math.log(x / y) for x, y in zip(a, b)])
        return m, math.sqrt(var), len(a) - 1  # type: ignore[arg-type]
    return combined_log([a, b], [1.0, -1.0])


def combined_log(
    cells: Sequence[Sequence[float]], weights: Sequence[float]
) -> tuple[float, float | None, float]:
    """Σ w_c · mean log time of cell c, its standard error and Welch-Satterthwaite degrees of
    freedom, the cells' repeats taken as independent samples. One cell may stand in several pairs (a
    study's shared cell): its weight then sums its parts, and its noise counts once with that
    weight, not once per pair as if independent."""
    used = [
        (w, *_mean_var([math.log(x) for x in xs]), len(xs)) for w, xs in zip(weights, cells) if w
    ]
    m = sum(w * mu for w, mu, _, _ in used)
    if any(v is None for _, _, v, _ in used):
        return m, None, 0
    terms = [(w * w * v, n - 1) for w, _, v, n in used]  # type: ignore[operator]
    var = sum(t for t, _ in terms)
    if var == 0:
        return m, 0.0, sum(df for _, df in terms)
    return m, math.sqrt(var), var**2 / sum(t * t / df for t, df in terms)


def combined_interval(
    parts: Sequence[tuple[float, float | None, float]],
) -> tuple[float | None, float | None]:
    """95% interval of the geometric mean of several ratios from their `log_ratio`s (independent
    pairs: no cell in two of them; Welch-Satterthwaite degrees of freedom over the parts); none if
    any part has none."""
    if not parts or any(se is None for _, se, _ in parts):
        return None, None
    k = len(parts)
    m = sum(e for e, _, _ in parts) / k
    var = [se * se / k / k for _, se, _ in parts]  # type: ignore[operator]
    df = (
        sum(var) ** 2 / sum(v * v / max(d, 1e-9) for v, (_, _, d) in zip(var, parts))
        if sum(var)
        else 1.0
    )
    return interval_of(m, math.sqrt(sum(var)), df)


def interval_of(
    m: float, se: float | None, df: float, level: float = LEVEL
) -> tuple[float | None, float | None]:
    """exp of the `level` t interval of a log effect `m` with standard error `se`."""
    if se is None:
        return None, None
    half = t_quantile(df, level) * se
    return math.exp(m - half), math.exp(m + half)


def ratio_interval(
    a: Sequence[float], b: Sequence[float], paired: bool, level: float = LEVEL
) -> tuple[float, float | None, float | None]:
    """The ratio of the two geometric means (each as `geomean_interval`) with its `level` interval
    (`log_ratio`: t on the pairs' log ratios, or Welch's t on the logs)."""
    m, se, df = log_ratio(a, b, paired)
    return (math.exp(m), *interval_of(m, se, df, level))


def drift(xs: Sequence[float]) -> tuple[float, float, float] | None:
    """A trend in repeated times, in the order measured: the least-squares slope of log time on the
    repeat's place, as a share per repeat (exp(slope) - 1), with its 95% Student t interval (n - 2
    degrees of freedom); None under 3 times. An interval that excludes 0 means the machine drifted
    while the repeats ran."""
    n = len(xs)
    if n < 3 or any(not x > 0 for x in xs):
        return None
    ys, mx = [math.log(x) for x in xs], (n - 1) / 2
    my = sum(ys) / n
    sxx = sum((i - mx) ** 2 for i in range(n))
    b = sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sxx
    resid = sum((y - my - b * (i - mx)) ** 2 for i, y in enumerate(ys))
    lo, hi = interval_of(b, math.sqrt(resid / (n - 2) / sxx), n - 2)
    return math.exp(b) - 1, lo - 1, hi - 1  # type: ignore[operator]
