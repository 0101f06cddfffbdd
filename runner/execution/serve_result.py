"""The RunResult a serving run's rate sweep (serve_sweep.py) becomes.

The top-level figures (time, throughput, latency, tokens, scores, samples.jsonl) are those of the
headline rate, the highest rate below saturation at which a request completed; every rate swept is
in the `serving` section, one RatePoint each."""

from __future__ import annotations

from typing import Any

from runner.engines.base import EngineInfo
from runner.errors import RunnerError
from runner.execution.assemble import Measured, assemble, mean_scores
from runner.execution.job import Unit
from runner.execution.layout import RunFolder
from runner.execution.serve_sweep import RateOutcome, Sweep, rate_label
from runner.files import write_jsonl_atomic
from runner.reporting.results import RunResult
from runner.serving.latency import tpot_s
from runner.serving.results import LatencyMs, RatePoint, ServingResult


def _lat(d: dict[str, float] | None) -> LatencyMs | None:
    return LatencyMs(**d) if d else None


def _point(unit: Unit, o: RateOutcome, saturated: bool, gpu_busy: float | None = None) -> RatePoint:
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
        gpu_busy=gpu_busy,
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
    r = unit.loaded.recipe
    h = _headline(out)
    head = out.outcomes[h]
    sat = out.saturation.index if out.saturation is not None else None
    busy = server["gpu_busy"]  # per rate, None without a GPU
    points = [_point(unit, o, k == sat, busy[k]) for k, o in enumerate(out.outcomes)]
    done = [smp for rec, smp in zip(head.run.records, head.samples, strict=True) if rec.ok]
    m = Measured(
        generate_s=head.summary.wall_s,
        peak_gpu_gib=server["peak_gib"],
        baseline_gpu_gib=server["start_gib"],
        per_example=False,
        n_target=len(done),
        gpu_busy=busy[h],
    )
    result = assemble(base, r, done, [ids[i] for i in out.indices], _engine_info(unit, out, log_text, server), m)
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
    result.notes += _notes(out, hp)
    write_jsonl_atomic(folder.samples, _lines(head))
    return result


def _engine_info(unit: Unit, out: Sweep, log_text: str, server: dict[str, Any]) -> EngineInfo:
    """What the server's log and its counters over the whole sweep show of the engine."""
    from runner.execution.gpumem import device_facts

    r = unit.loaded.recipe
    total = {k: sum(o.counters.get(k, 0.0) for o in out.outcomes) for o in out.outcomes for k in o.counters}
    ev = r.engine.serve_evidence(r.model, log_text, total)
    return EngineInfo(
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


def _notes(out: Sweep, hp: RatePoint) -> list[str]:
    """Which rate the top-level figures are of, the sweep's notes and each rate's, the headline's errors."""
    notes = [
        f"serving run: the figures outside the serving section (time, throughput, latency, tokens, "
        f"scores, samples.jsonl) are those of {rate_label(hp.rate)} req/s, the highest rate below "
        f"saturation",
        *out.notes,
        *dict.fromkeys(n for o in out.outcomes for n in o.notes),
    ]
    if hp.errors:
        notes.append(
            f"{hp.errors} of {hp.requests} requests failed at {rate_label(hp.rate)} req/s: "
            + " | ".join(hp.error_samples)
        )
    return notes
