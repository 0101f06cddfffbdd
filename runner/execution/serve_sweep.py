"""The rate sweep of a serving run (see serve_run.py) and the RunResult it becomes.

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

from runner.engines.base import EngineInfo, Generation
from runner.errors import RunnerError
from runner.execution.assemble import Measured, assemble, make_sample, mean_scores
from runner.execution.job import Unit
from runner.execution.layout import RunFolder
from runner.files import write_jsonl_atomic
from runner.reporting.results import RunResult, Sample
from runner.serving.client import RateRun, RequestRecord, run_rate
from runner.serving.latency import RateSummary, Saturation, find_saturation, summarize, tpot_s
from runner.serving.results import LatencyMs, RatePoint, ServingResult
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


def _lat(d: dict[str, float] | None) -> LatencyMs | None:
    return LatencyMs(**d) if d else None


def _point(unit: Unit, o: RateOutcome, saturated: bool) -> RatePoint:
    r, s = unit.loaded.recipe, o.summary
    ok = [(rec, smp) for rec, smp in zip(o.run.records, o.samples, strict=True) if rec.ok]
    prompt_tok = sum(rec.prompt_tokens for rec, _ in ok)
    reported = [rec.cached_tokens for rec, _ in ok if rec.cached_tokens is not None]
    cached = sum(reported) if reported else r.engine.serve_evidence(r.model, "", o.counters).cached_tokens
    return RatePoint(
        rate=s.rate,
        requests=s.requests,
        completed=s.completed,
        errors=s.errors,
        wall_s=s.wall_s,
        request_throughput=s.request_throughput,
        output_throughput=s.output_throughput,
        total_token_throughput=(prompt_tok + s.output_tokens) / s.wall_s if s.wall_s > 0 else 0.0,
        prompt_tokens=prompt_tok,
        output_tokens=s.output_tokens,
        cached_tokens=cached,
        goodput=s.goodput,
        good=s.good,
        peak_concurrency=s.peak_concurrency,
        ttft_ms=_lat(s.ttft_ms),
        tpot_ms=_lat(s.tpot_ms),
        itl_ms=_lat(s.itl_ms),
        e2e_ms=_lat(s.e2e_ms),
        queue_ms=_lat(s.queue_ms),
        scores=mean_scores([smp for _, smp in ok], list(r.metrics)),
        saturated=saturated,
        cache_reset=o.cache_reset,
        warmup_errors=sorted(set(o.run.warmup_errors))[:5],
        error_samples=s.error_samples,
        server_counters=o.counters,
    )


def _headline(out: Sweep) -> int:
    last = out.saturation.index if out.saturation is not None else len(out.outcomes)
    good = [k for k in range(last) if out.outcomes[k].summary.completed > 0]
    if not good:
        errors = sorted({e for o in out.outcomes for e in o.summary.error_samples})[:3]
        raise RunnerError(
            "no rate below saturation completed any request" + (f"; errors: {' | '.join(errors)}" if errors else "")
        )
    return good[-1]


def _lines(o: RateOutcome) -> list[dict[str, Any]]:
    """samples.jsonl: the usual sample fields plus the request's timings (s) and error."""
    lines = []
    for rec, smp in zip(o.run.records, o.samples, strict=True):
        d = smp.to_line()
        d.update(
            request=rec.index,
            rate=rate_label(o.summary.rate),
            e2e_s=rec.e2e_s,
            tpot_s=tpot_s(rec),
            sent_s=rec.sent_s,
            queue_s=rec.queue_s,
            finish_reason=rec.finish_reason,
            error=rec.error,
        )
        lines.append(d)
    return lines


def finish(
    unit: Unit,
    base: RunResult,
    out: Sweep,
    ids: list[list[int]],
    log_text: str,
    server: dict[str, Any],
    folder: RunFolder,
) -> RunResult:
    """The RunResult: top-level fields from the headline rate, every rate in `serving`; writes samples.jsonl."""
    from runner.execution.gpumem import device_facts

    r = unit.loaded.recipe
    h = _headline(out)
    head = out.outcomes[h]
    sat = out.saturation.index if out.saturation is not None else None
    points = [_point(unit, o, k == sat) for k, o in enumerate(out.outcomes)]
    total = {k: sum(o.counters.get(k, 0.0) for o in out.outcomes) for o in out.outcomes for k in o.counters}
    ev = r.engine.serve_evidence(r.model, log_text, total)
    info = EngineInfo(
        name=r.engine.kind,
        version=server["version"],
        device=device_facts().get("gpu", ""),
        load_s=server["start_s"] or 0.0,
        weights_gib=ev.weights_gib,
        kv_cache_tokens=ev.kv_cache_tokens,
        knobs=list(ev.knobs),
        notes=list(ev.notes),
        extra={"env": server["env"]},
    )
    done = [smp for rec, smp in zip(head.run.records, head.samples, strict=True) if rec.ok]
    m = Measured(
        generate_s=head.summary.wall_s,
        peak_gpu_gib=server["peak_gib"],
        baseline_gpu_gib=server["start_gib"],
        per_example=False,
        n_target=len(done),
    )
    result = assemble(base, r, done, [ids[i] for i in out.indices], info, m)
    hp = points[h]
    if hp.cached_tokens is not None:
        result.tokens.cached = hp.cached_tokens
        result.prefix.hit_rate = hp.cached_tokens / hp.prompt_tokens if hp.prompt_tokens else None
    result.serving = ServingResult(
        headline_rate=hp.rate,
        saturated_rate=out.saturation.rate if out.saturation else None,
        saturation_reasons=out.saturation.reasons if out.saturation else [],
        skipped_rates=out.skipped,
        server_start_s=server["start_s"],
        command=list(server["command"]),
        rates=points,
    )
    result.notes += [
        f"serving run: the figures outside the serving section (time, throughput, latency, tokens, "
        f"scores, samples.jsonl) are those of {rate_label(hp.rate)} req/s, the highest rate below "
        f"saturation",
        *out.notes,
        *dict.fromkeys(n for o in out.outcomes for n in o.notes),
    ]
    if hp.errors:
        result.notes.append(
            f"{hp.errors} of {hp.requests} requests failed at {rate_label(hp.rate)} req/s: "
            + " | ".join(hp.error_samples)
        )
    write_jsonl_atomic(folder.samples, _lines(head))
    return result
