"""Samples and engine facts -> the RunResult that results.json holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.config.recipe import Recipe
from runner.engines.base import EngineInfo, Generation, Knob
from runner.execution.job import Unit
from runner.inputs.datasets import Example
from runner.reporting.format import brief
from runner.reporting.results import (
    EngineSummary,
    Estimate,
    Latency,
    Memory,
    Percentiles,
    Prefix,
    RunResult,
    Sample,
    Throughput,
    Timings,
    Tokens,
)
from runner.reporting.stats import prefix_share, project, summary
from runner.scoring import score_sample


@dataclass(frozen=True)
class Measured:
    """What the run measured around the engine."""

    generate_s: float
    peak_gpu_gib: float | None
    baseline_gpu_gib: float | None
    per_example: bool  # examples finished one by one: their wall times are real
    n_target: int
    gpu_busy: float | None = None  # NVML utilization over the generation window (0..1)
    gpu_busy_tenths: list[float] | None = None  # the same per tenth of the window


def make_sample(ex: Example, prompt: str, g: Generation, r: Recipe, seconds: float | None) -> Sample:
    scores = score_sample(g.text, ex.answers, list(r.metrics), r.scoring) if ex.answers else {}
    return Sample(
        id=ex.id,
        prompt=prompt,
        output=g.text,
        answers=list(ex.answers),
        prompt_tokens=g.prompt_tokens,
        output_tokens=g.output_tokens,
        scores=scores,
        cached_tokens=g.cached_tokens,
        ttft_s=g.ttft_s,
        latency_s=g.latency_s,
        seconds=seconds,
    )


def unit_result(unit: Unit, command: str, **fields: Any) -> RunResult:
    """A recipe's RunResult before anything is measured (status failed until the run says otherwise)."""
    lr, r = unit.loaded, unit.loaded.recipe
    return RunResult(
        name=r.name,
        recipe=r.canonical(),
        recipe_hash=r.digest(),
        recipe_path=lr.path,
        status="failed",
        command=command,
        run_key=unit.run_key,
        n_dataset=unit.prepared.n_dataset,
        study=lr.study,
        cell=dict(lr.cell),
        cell_labels=dict(lr.cell_labels),
        study_axes=lr.study_axes,
        **fields,
    )


def failure_hint(error: str) -> str | None:
    e = error.lower()
    if "out of memory" in e or "outofmemory" in e or "less than desired gpu memory" in e or "cuda oom" in e:
        return (
            "GPU memory ran out: lower engine.gpu_memory_utilization or engine.max_model_len, use a "
            "quantized checkpoint (engine.quantization), set engine.cpu_offload_gb, or a smaller "
            "engine.batch_size (transformers)"
        )
    if (
        "not a valid model identifier" in e
        or "repository not found" in e
        or "no such file" in e
        or "can't load" in e
        or "does not appear to have" in e
        or "repo id must be" in e
        or "model folder not found" in e
    ):
        return "check model.id (a hub id needs network access; here pass a local folder with --set model.id=PATH)"
    return None


def mean_scores(samples: list[Sample], metrics: list[str]) -> dict[str, float]:
    """Each metric averaged over the examples that have gold answers (others are not scored)."""
    scored = [s for s in samples if s.scores]
    if not scored:
        return {}
    return {m: sum(s.scores[m] for s in scored) / len(scored) for m in metrics}


def _pct(xs: list[float | None]) -> Percentiles | None:
    s = summary([x for x in xs if x is not None])
    return Percentiles(**s) if s else None


def project_estimate(samples: list[Sample], m: Measured) -> Estimate:
    n = len(samples)
    secs = [s.seconds for s in samples if s.seconds is not None]
    if m.per_example and len(secs) == n and n >= 2:
        p = project(secs, m.n_target)
        p["low_s"] = max(p["low_s"], 0.0)
        method = "per-example wall times of a random sample, mean x N, 95% t-interval"
    else:
        per = m.generate_s / n
        p = {"per_example_s": per, "projected_s": per * m.n_target, "low_s": None, "high_s": None}
        method = (
            "generation time of a random sample scaled linearly (examples ran in batches: no "
            "per-example times, no interval)"
        )
    return Estimate(n_measured=n, n_total=m.n_target, method=method, **p)


def _throughput(n: int, p_tok: int, o_tok: int, gen_s: float) -> Throughput:
    if not (gen_s and n):
        return Throughput()
    return Throughput(
        requests_per_s=n / gen_s, output_tokens_per_s=o_tok / gen_s, total_tokens_per_s=(p_tok + o_tok) / gen_s
    )


def sample_figures(samples: list[Sample], metrics: list[str], generate_s: float) -> dict[str, Any]:
    """What a run's samples add up to: sample count, tokens, throughput, latency percentiles, scores, and the
    estimate when they stand for more examples (RunResult fields)."""
    p_tok = sum(s.prompt_tokens for s in samples)
    o_tok = sum(s.output_tokens for s in samples)
    cached = [s.cached_tokens for s in samples if s.cached_tokens is not None]
    return dict(
        n_samples=len(samples),
        tokens=Tokens(prompt=p_tok, output=o_tok, cached=sum(cached) if cached else None),
        throughput=_throughput(len(samples), p_tok, o_tok, generate_s),
        latency=Latency(ttft_s=_pct([s.ttft_s for s in samples]), e2e_s=_pct([s.latency_s for s in samples])),
        scores=mean_scores(samples, metrics),
    )


def assemble(
    base: RunResult, r: Recipe, samples: list[Sample], ids: list[list[int]], info: EngineInfo, m: Measured
) -> RunResult:
    n = len(samples)
    p_tok = sum(s.prompt_tokens for s in samples)
    cached = [s.cached_tokens for s in samples if s.cached_tokens is not None]
    k, share = prefix_share(ids)
    res = base.model_copy(
        update=dict(
            status="ok",
            timings=Timings(
                load_s=info.load_s, generate_s=m.generate_s, gpu_busy=m.gpu_busy, gpu_busy_tenths=m.gpu_busy_tenths
            ),
            **sample_figures(samples, r.metrics, m.generate_s),
            memory=Memory(
                peak_gpu_gib=m.peak_gpu_gib,
                baseline_gpu_gib=m.baseline_gpu_gib,
                weights_gib=info.weights_gib,
                kv_cache_tokens=info.kv_cache_tokens,
                kv_cache_gib=info.extra.get("kv_cache_gib"),
            ),
            prefix=Prefix(
                shared_prefix_tokens=k,
                shared_prefix_share=share,
                hit_rate=(sum(cached) / p_tok if cached and p_tok else None),
            ),
            knobs=list(info.knobs),
            engine=EngineSummary(
                name=info.name, version=info.version, device=info.device, quantization=info.quantization
            ),
            notes=[*base.notes, *info.notes],
        )
    )
    if n < m.n_target:
        res.estimate = project_estimate(samples, m)
    res.notes += ignored_knob_notes(res.knobs)
    extra: dict[str, Any] = {k: v for k, v in info.extra.items() if k != "metrics"}
    res.environment = {"engine_extra": extra}
    if info.extra.get("metrics"):
        res.environment["vllm_metrics"] = info.extra["metrics"]
    return res


def ignored_knob_notes(knobs: list[Knob]) -> list[str]:
    """A note per knob the engine did not apply (long values cut as in the knob table)."""
    return [
        f"knob `{k.name}` did NOT take effect: requested {brief(k.requested)}, effective {brief(k.effective)} "
        f"({k.evidence})"
        for k in knobs
        if k.status == "ignored"
    ]
