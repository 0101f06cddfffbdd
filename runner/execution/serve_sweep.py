"""The rate sweep of a serving run (see serve_run.py); the RunResult it becomes is made in serve_result.py.

Per rate, in the order of `load.request_rate`: `load.warmup_requests` unmeasured requests, then the
prefix cache is emptied (POST /reset_prefix_cache) so no rate starts with the cache of the one before,
then every measured request on the seeded arrival schedule (runner.serving.client.run_rate), with the
recipe's sampling. Each rate is summarized (runner.serving.latency.summarize) and its outputs scored
with the recipe's metrics; the sweep stops at the first saturated rate (find_saturation), whose figures
are kept, and the rates above it are listed as skipped. The server's /metrics counters are read after
the cache reset and after the rate, so their growth covers the measured requests only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.engines.base import Generation
from runner.execution.assemble import make_sample
from runner.execution.job import Unit
from runner.reporting.results import Sample
from runner.serving.client import RateRun, RequestRecord, run_rate
from runner.serving.latency import RateSummary, Saturation, find_saturation, summarize
from runner.serving.server import Server, ServerError


@dataclass
class RateOutcome:
    run: RateRun
    summary: RateSummary
    samples: list[Sample]  # one per measured request, in order (failed ones unscored)
    counters: dict[str, float]  # growth of the server's *_total counters over the measured requests
    cache_reset: bool | None
    notes: list[str] = field(default_factory=list)


@dataclass
class Sweep:
    indices: list[int]  # which prompt each measured request sends
    outcomes: list[RateOutcome]
    saturation: Saturation | None
    skipped: list[float]
    notes: list[str] = field(default_factory=list)


def rate_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def _counters(server: Server) -> dict[str, float]:
    try:
        return {k: v for k, v in server.metrics().items() if k.endswith("_total")}
    except (ServerError, OSError, ValueError):
        return {}


def _sample(unit: Unit, texts: list[str], i: int, rec: RequestRecord) -> Sample:
    ex, r = unit.prepared.examples[i], unit.loaded.recipe
    if not rec.ok:
        return Sample(
            id=ex.id,
            prompt=texts[i],
            output=rec.output_text,
            answers=list(ex.answers),
            prompt_tokens=rec.prompt_tokens,
            output_tokens=rec.output_tokens,
            ttft_s=rec.ttft_s,
        )
    g = Generation(
        text=rec.output_text,
        prompt_tokens=rec.prompt_tokens,
        output_tokens=rec.output_tokens,
        cached_tokens=rec.cached_tokens,
        ttft_s=rec.ttft_s,
        latency_s=rec.e2e_s,
    )
    return make_sample(ex, texts[i], g, r, seconds=None)


def run_one(
    server: Server, unit: Unit, texts: list[str], ids: list[list[int]], indices: list[int], rate: float
) -> RateOutcome:
    """One rate: warmup, prefix-cache reset, the measured requests; summarized and scored."""
    from runner.execution.serve_run import request_sampling

    r = unit.loaded.recipe
    load = r.load
    assert load is not None
    state: dict[str, Any] = {"reset": None, "before": {}, "notes": []}

    def warmed() -> None:
        try:
            state["reset"] = server.reset_prefix_cache()
            if not state["reset"]:
                state["notes"].append("the server refused to empty its prefix cache (requests still running)")
        except ServerError as e:
            state["notes"].append(f"prefix cache not reset: {e}")
        state["before"] = _counters(server)

    run = run_rate(
        server.base_url,
        r.model.id,
        [ids[i] for i in indices],
        request_sampling(r.sampling),
        rate,
        load.burstiness,
        load.max_concurrency,
        load.seed,
        load.warmup_requests,
        on_warmed=warmed,
    )
    after, before = _counters(server), state["before"]
    grown = {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}
    samples = [_sample(unit, texts, indices[rec.index], rec) for rec in run.records]
    return RateOutcome(
        run=run,
        summary=summarize(run.records, rate, dict(load.slo) or None),
        samples=samples,
        counters=grown,
        cache_reset=state["reset"],
        notes=state["notes"],
    )


def _line(name: str, s: RateSummary) -> str:
    def ms(d: dict[str, float] | None) -> str:
        return f"{d['p50']:.1f} ms" if d else "–"

    return (
        f"{name}: rate {rate_label(s.rate)}: {s.completed}/{s.requests} completed, "
        f"{s.request_throughput:.2f} req/s achieved, TTFT p50 {ms(s.ttft_ms)}, TPOT p50 {ms(s.tpot_ms)}"
    )


def sweep(server: Server, unit: Unit, texts: list[str], ids: list[list[int]], say: Callable[[str], None]) -> Sweep:
    """Every rate in increasing order until the server saturates; raises if the server dies."""
    load = unit.loaded.recipe.load
    assert load is not None
    out = Sweep(indices=load.request_indices(len(ids)), outcomes=[], saturation=None, skipped=[])
    for k, rate in enumerate(load.request_rate):
        o = run_one(server, unit, texts, ids, out.indices, rate)
        out.outcomes.append(o)
        say(_line(unit.name, o.summary))
        if not server.alive():
            raise ServerError(
                f"the server exited during rate {rate_label(rate)} (code {server.proc.returncode}); "
                f"see {server.log_path}"
            )
        out.saturation = find_saturation([x.summary for x in out.outcomes])
        stop = None
        if out.saturation is not None:
            stop = f"saturated at {rate_label(rate)} req/s: " + "; ".join(out.saturation.reasons)
        elif o.summary.completed == 0:
            stop = f"every request failed at {rate_label(rate)} req/s"
        if stop:
            out.skipped = list(load.request_rate[k + 1 :])
            out.notes.append(
                stop + (f"; higher rates not run ({', '.join(map(rate_label, out.skipped))})" if out.skipped else "")
            )
            say(f"{unit.name}: {out.notes[-1]}")
            break
    return out
