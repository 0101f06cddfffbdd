"""Latency and throughput arithmetic of one rate, and saturation across a sweep of rates.

Per request i (client-side times, see client.py; only requests without error):
    TTFT_i = t_first_chunk_i - t_send_i
    E2E_i  = t_last_chunk_i - t_send_i
    ITL    = every gap between consecutive content chunks of the request (one per chunk, not per token)
    TPOT_i = (E2E_i - TTFT_i) / (N_i - 1)      N_i = output tokens; undefined (left out) when N_i <= 1
This is vllm bench serve's TPOT (vLLM 0.26.0 `vllm/benchmarks/serve.py`, `calculate_metrics`): the mean
time per output token after the first, which spreads a multi-token chunk over its tokens. Other tools
differ: some divide by N_i (counting the first token), some report the mean ITL (per chunk) as TPOT.

Per rate (W = wall time = last end - first send, over all requests, failed ones included):
    mean, p50, p90, p99 of TTFT, TPOT, ITL (all gaps of all requests pooled) and E2E, in ms;
    percentiles linearly interpolated (numpy's default, runner.stats.percentile);
    request throughput      = completed requests / W
    output token throughput = sum of N_i over completed requests / W
    goodput                 = completed requests meeting every SLO / W
    peak concurrency        = most requests in flight at once, a sweep over the half-open intervals
                              [t_send, t_end) with an end before a start at equal times (as vLLM).
SLOs (ms), each met when the request's value is <= the SLO: ttft_ms on TTFT, tpot_ms on TPOT (met
when TPOT is undefined, N_i <= 1, as vLLM counts it 0), itl_ms on the request's largest chunk gap
(met when it has no gap), e2e_ms on E2E. Failed requests never count as good.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runner.reporting.stats import percentile

if TYPE_CHECKING:  # records come from client.py; this module needs neither aiohttp nor a server
    from runner.serving.client import RequestRecord


def tpot_s(rec: RequestRecord) -> float | None:
    """(E2E - TTFT) / (output tokens - 1); None for failed requests and for 1 or 0 output tokens."""
    e2e, ttft = rec.e2e_s, rec.ttft_s
    if e2e is None or ttft is None or rec.output_tokens <= 1:
        return None
    return (e2e - ttft) / (rec.output_tokens - 1)


def stats_ms(values_s: Sequence[float]) -> dict[str, float] | None:
    """mean, p50, p90, p99 in milliseconds of values in seconds; None when there are none."""
    xs = [v * 1000 for v in values_s]
    if not xs:
        return None
    return {"mean": sum(xs) / len(xs), "p50": percentile(xs, 50), "p90": percentile(xs, 90), "p99": percentile(xs, 99)}


def meets_slo(rec: RequestRecord, slo: dict[str, float]) -> bool:
    """Whether a request meets every SLO (milliseconds; keys ttft_ms, tpot_ms, itl_ms, e2e_ms)."""
    if not rec.ok or rec.e2e_s is None:
        return False
    tp = tpot_s(rec)
    value_ms = {
        "ttft_ms": rec.ttft_s * 1000,
        "e2e_ms": rec.e2e_s * 1000,
        "tpot_ms": 0.0 if tp is None else tp * 1000,
        "itl_ms": max(rec.itl_s, default=0.0) * 1000,
    }
    for k, limit in slo.items():
        if k not in value_ms:
            raise ValueError(f"unknown SLO metric {k!r}; allowed: {', '.join(value_ms)}")
        if value_ms[k] > limit:
            return False
    return True


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at once over [sent_s, end_s) (departures first at equal times)."""
    events = [(r.sent_s, 1) for r in records if r.sent_s is not None and r.end_s is not None]
    events += [(r.end_s, -1) for r in records if r.sent_s is not None and r.end_s is not None]
    events.sort()
    now = peak = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak


@dataclass
class RateSummary:
    rate: float  # offered request rate (req/s; inf = all at once)
    requests: int
    completed: int
    errors: int
    wall_s: float
    request_throughput: float  # completed / wall_s
    output_throughput: float  # output tokens / wall_s
    output_tokens: int
    goodput: float | None  # None without SLOs
    good: int | None
    peak_concurrency: int
    ttft_ms: dict[str, float] | None = None
    tpot_ms: dict[str, float] | None = None
    itl_ms: dict[str, float] | None = None
    e2e_ms: dict[str, float] | None = None
    queue_ms: dict[str, float] | None = None  # client-side wait before sending (max_concurrency)
    error_samples: list[str] = field(default_factory=list)


def wall_time_s(records: Sequence[RequestRecord]) -> float:
    """Last end - first send over all requests; 0 when nothing was sent."""
    sent = [r.sent_s for r in records if r.sent_s is not None]
    ends = [r.end_s for r in records if r.end_s is not None]
    return max(ends) - min(sent) if sent and ends else 0.0


def summarize(records: Sequence[RequestRecord], rate: float, slo: dict[str, float] | None = None) -> RateSummary:
    """Every per-rate number of the module docstring, from the measured requests of one rate."""
    ok = [r for r in records if r.ok]
    wall = wall_time_s(records)
    out_tokens = sum(r.output_tokens for r in ok)
    good = sum(meets_slo(r, slo) for r in ok) if slo else None

    def per_s(x: float) -> float:
        return x / wall if wall > 0 else 0.0

    return RateSummary(
        rate=rate,
        requests=len(records),
        completed=len(ok),
        errors=len(records) - len(ok),
        wall_s=wall,
        request_throughput=per_s(len(ok)),
        output_throughput=per_s(out_tokens),
        output_tokens=out_tokens,
        goodput=None if good is None else per_s(good),
        good=good,
        peak_concurrency=peak_concurrency(records),
        ttft_ms=stats_ms([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_ms=stats_ms([t for r in ok if (t := tpot_s(r)) is not None]),
        itl_ms=stats_ms([g for r in ok for g in r.itl_s]),
        e2e_ms=stats_ms([r.e2e_s for r in ok if r.e2e_s is not None]),
        queue_ms=stats_ms([r.queue_s for r in records if r.queue_s is not None]),
        error_samples=sorted({r.error for r in records if r.error})[:5],
    )


@dataclass
class Saturation:
    index: int  # position of the saturated rate in the sweep
    rate: float
    reasons: list[str]


def find_saturation(
    points: Sequence[RateSummary], *, follow: float = 0.9, min_gain: float = 0.05, ttft_growth: float = 2.0
) -> Saturation | None:
    """The first rate at which the server stopped keeping up, or None.

    Rate i > 0 is saturated when both hold:
      throughput stalls: achieved < follow x offered (finite offered rates only), or
                         achieved < (1 + min_gain) x achieved at rate i-1 (no real gain for more load);
      latency grows:     TTFT p50 > ttft_growth x the lowest TTFT p50 of the rates before it.
    achieved = request throughput over the rate's wall time. Defaults: 0.9, 5 %, 2x. The TTFT test keeps
    short runs (where the drain after the last arrival lowers achieved) and client-side caps (where the
    wait is in the client's queue, not the server's) from reading as saturation. Calling it on the
    sweep so far after each rate gives the same answer as on the whole sweep: stop when it is not None.
    """
    for i in range(1, len(points)):
        p, prev = points[i], points[i - 1]
        stall = []
        if math.isfinite(p.rate) and p.request_throughput < follow * p.rate:
            stall.append(f"achieved {p.request_throughput:.2f} req/s < {follow:g} x offered {p.rate:g} req/s")
        if p.request_throughput < (1 + min_gain) * prev.request_throughput:
            stall.append(
                f"achieved {p.request_throughput:.2f} req/s gains less than {min_gain:.0%} on "
                f"{prev.request_throughput:.2f} req/s at {_rate(prev.rate)}"
            )
        base = [q.ttft_ms["p50"] for q in points[:i] if q.ttft_ms]
        if not stall or not base or not p.ttft_ms:
            continue
        if p.ttft_ms["p50"] > ttft_growth * min(base):
            grew = f"TTFT p50 {p.ttft_ms['p50']:.1f} ms > {ttft_growth:g} x {min(base):.1f} ms (lowest before)"
            return Saturation(index=i, rate=p.rate, reasons=stall + [grew])
    return None


def _rate(r: float) -> str:
    return "inf" if math.isinf(r) else f"{r:g} req/s"
