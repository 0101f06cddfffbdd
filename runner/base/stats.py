"""Small statistics: percentiles, projections with intervals, shared prefixes, paired tests."""

from __future__ import annotations

import math
from collections.abc import Sequence


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
    return {"p50": percentile(xs, 50), "p90": percentile(xs, 90), "p99": percentile(xs, 99), "mean": sum(xs) / len(xs)}


# two-sided 95% Student t quantiles for small samples; normal beyond
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
_T95 |= {12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980, 1000: 1.962}


def t95(df: int) -> float:
    """Conservative two-sided 95% t quantile: the table row at or below df (never too small)."""
    if df <= 0:
        return float("inf")
    return _T95[max(k for k in _T95 if k <= df)]


def project(per_example_s: Sequence[float], n_total: int) -> dict[str, float]:
    """The time for n_total examples from a sample of per-example times: n_total * mean, with a 95% interval from
    the t-distribution of the mean (assumes the measured examples are representative of the rest)."""
    n = len(per_example_s)
    mean = sum(per_example_s) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in per_example_s) / (n - 1)) if n > 1 else float("nan")
    half = t95(n - 1) * sd / math.sqrt(n) if n > 1 else float("nan")
    low, high = (mean - half) * n_total, (mean + half) * n_total
    return {"per_example_s": mean, "projected_s": mean * n_total, "low_s": low, "high_s": high}


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


BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED = 2000, 0
BOOTSTRAP = f"paired bootstrap over the examples, {BOOTSTRAP_RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED}, percentile"


def paired_bootstrap(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """The mean of paired differences and its `level` interval (percentile bootstrap over the examples, fixed
    seed: the same differences always give the same interval)."""
    import numpy as np

    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        raise ValueError("no differences")
    rng, chunk = np.random.default_rng(BOOTSTRAP_SEED), max(1, 4_000_000 // d.size)  # bounded memory
    means = np.concatenate(
        [
            d[rng.integers(0, d.size, size=(min(chunk, BOOTSTRAP_RESAMPLES - i), d.size))].mean(axis=1)
            for i in range(0, BOOTSTRAP_RESAMPLES, chunk)
        ]
    )
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(d.mean()), float(lo), float(hi)


TIME_CI = "the median of log-normal timing noise, exp(mean log time), with a Student t interval on the log times"


def median_interval(xs: Sequence[float]) -> tuple[float, float | None, float | None]:
    """A typical time from repeated times, with its 95% interval: timing noise is skewed and multiplicative, taken as
    log-normal, whose median is exp(mean log); estimated as exp of the mean of the logs, with Student t on the logs
    (so the interval always holds the estimate). One time: itself, no interval."""
    if not xs or any(x <= 0 for x in xs):
        raise ValueError("times must be positive")
    if len(xs) < 2:
        return xs[0], None, None
    logs = [math.log(x) for x in xs]
    n, m = len(logs), sum(logs) / len(logs)
    half = t95(n - 1) * math.sqrt(sum((v - m) ** 2 for v in logs) / (n - 1) / n)
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def log_ratio(a: Sequence[float], b: Sequence[float], paired: bool) -> tuple[float, float | None, float]:
    """(mean log a - mean log b, its standard error, degrees of freedom): from the log ratios of the pairs
    (`paired`: a[i] and b[i] were measured side by side, turn i of an interleaved run) or Welch's t; no error
    unless each side has 2 times."""
    if paired and len(a) == len(b) >= 2:
        d = [math.log(x / y) for x, y in zip(a, b)]
        m = sum(d) / len(d)
        return m, math.sqrt(sum((v - m) ** 2 for v in d) / (len(d) - 1) / len(d)), len(d) - 1
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    if len(a) < 2 or len(b) < 2:
        return ma - mb, None, 0
    va = sum((v - ma) ** 2 for v in la) / (len(la) - 1) / len(la)
    vb = sum((v - mb) ** 2 for v in lb) / (len(lb) - 1) / len(lb)
    if va + vb == 0:
        return ma - mb, 0.0, len(a) + len(b) - 2
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))  # Welch-Satterthwaite
    return ma - mb, math.sqrt(va + vb), df


def combined_interval(parts: Sequence[tuple[float, float | None, float]]) -> tuple[float | None, float | None]:
    """95% interval of the geometric mean of several ratios from their `log_ratio`s (independent pairs; the
    fewest degrees of freedom among them, which errs wide); none if any part has none."""
    if not parts or any(se is None for _, se, _ in parts):
        return None, None
    k = len(parts)
    m = sum(e for e, _, _ in parts) / k
    half = t95(int(min(df for _, _, df in parts))) * math.sqrt(sum(se**2 for _, se, _ in parts)) / k  # type: ignore[operator]
    return math.exp(m - half), math.exp(m + half)


def ratio_interval(a: Sequence[float], b: Sequence[float], paired: bool) -> tuple[float, float | None, float | None]:
    """The ratio of the two medians (each exp(mean log), as `median_interval`) with its 95% interval (`log_ratio`: t
    on the pairs' log ratios, or Welch's t on the logs)."""
    return (math.exp(log_ratio(a, b, paired)[0]), *combined_interval([log_ratio(a, b, paired)]))
