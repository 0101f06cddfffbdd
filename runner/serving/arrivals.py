"""Request arrival schedules, as `vllm bench serve` makes them.

Source: vLLM 0.26.0, `vllm/benchmarks/serve.py`, `get_request` (and `main_async`, which calls
`np.random.seed(args.seed)` first). For a fixed rate r and burstiness b it draws, per request,

    gap_i = np.random.gamma(shape=b, scale=1 / (r * b))      (b = 1: exponential gaps, a Poisson process)

from numpy's global legacy generator, takes the running sum t_i = gap_0 + ... + gap_i as request i's
send time (so the first request waits gap_0 too), then rescales every t_i by (n / r) / t_{n-1} so the
last request goes out at exactly n / r seconds ("to close the 1-2% gap ... for stabilizing the
throughput data from different random seeds"). r = inf sends everything at t = 0; b = inf gives
constant gaps 1 / r.

`arrival_offsets(n, r, b, seed)` reproduces that bit for bit: `np.random.RandomState(seed)` is the
generator `np.random.seed(seed)` resets, and its vectorised `gamma(size=n)` yields the same numbers
as n scalar calls. `vllm bench serve --seed S` gives the same schedule as long as nothing drew from
numpy's global generator between its seeding and `get_request` (its `random` dataset uses a
`default_rng` of its own, so it does not).
"""

from __future__ import annotations

import math

import numpy as np


def inter_arrivals(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """The n raw gaps (seconds) before rescaling: gamma(shape=burstiness, scale=1/(rate*burstiness)).

    Their mean is 1/rate; their coefficient of variation 1/sqrt(burstiness)."""
    _check(n, rate, burstiness)
    if math.isinf(rate):
        return [0.0] * n
    if math.isinf(burstiness):
        return [1.0 / rate] * n
    rs = np.random.RandomState(seed)
    return rs.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n).tolist()


def arrival_offsets(
    n: int, rate: float, burstiness: float = 1.0, seed: int = 0, *, normalize: bool = True
) -> list[float]:
    """Send time of each of n requests, in seconds from the start of the rate's run.

    offsets_i = sum(gaps_0..i), then (normalize=True, as vLLM 0.26) scaled by (n / rate) / offsets_{n-1}
    so the last request goes out at n / rate. rate = inf: all zeros."""
    gaps = inter_arrivals(n, rate, burstiness, seed)
    offsets = np.cumsum(gaps).tolist() if gaps else []
    if normalize and offsets and offsets[-1] != 0 and not math.isinf(rate):
        factor = (n / rate) / offsets[-1]
        offsets = [t * factor for t in offsets]
    return offsets


def _check(n: int, rate: float, burstiness: float) -> None:
    if n < 0:
        raise ValueError(f"number of requests must be >= 0, not {n}")
    if not rate > 0:  # also rejects NaN
        raise ValueError(f"request rate must be > 0 requests/s or inf, not {rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, not {burstiness}")
