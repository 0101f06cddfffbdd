"""The Markdown of serving runs (recipes with `load:`): report.md's per-rate section, with the formulas
behind its numbers, and the summary's comparison of serving recipes."""

from __future__ import annotations

import math
import shlex
from typing import Any

from runner.reporting.format import secs, table
from runner.reporting.results import RunResult
from runner.reporting.serving_plots import CHART
from runner.serving.results import LatencyMs, RatePoint, ServingResult

FORMULAS = [
    "Times are taken by the client (`time.perf_counter`) as the bytes of each streamed event arrive. Per request:",
    "",
    "- TTFT = t(first streamed chunk carrying text) − t(request sent)",
    "- E2E = t(last streamed chunk carrying text) − t(request sent)",
    "- TPOT = (E2E − TTFT) / (N − 1), N = output tokens (the server's `usage.completion_tokens`); a request with "
    "N ≤ 1 has none. This is `vllm bench serve`'s TPOT. Tools disagree here: some divide by N (counting the first "
    "token), some report the mean ITL as TPOT; compare TPOTs only under one definition.",
    "- ITL = every gap between consecutive streamed chunks of a request, pooled over the rate's requests: per "
    "chunk, not per token (a chunk can carry several tokens).",
    "",
    "Per rate, with W = last response end − first request sent:",
    "",
    "- achieved req/s = completed requests / W; output tok/s = Σ N / W; total tok/s = Σ (prompt + output tokens) / W",
    "- goodput = completed requests meeting every SLO / W (a request without a TPOT meets a TPOT SLO)",
    "- mean and p50/p90/p99 over the completed requests, percentiles linearly interpolated; failed requests count "
    "as errors only (not in latencies, throughput or scores)",
    "- peak in flight = most requests sent and not yet answered at one time",
    "- saturated: rate i > 0 where achieved < 0.9 × offered (finite rates) or < 1.05 × the achieved rate before "
    "it, *and* TTFT p50 > 2 × the lowest TTFT p50 of the rates before it; the sweep stops there",
    "- scores: the recipe's metrics over the completed requests with gold answers, each request counted once (a "
    "prompt sent twice counts twice)",
]


def rate_label(rate: float | None) -> str:
    return "–" if rate is None else ("inf" if math.isinf(rate) else f"{rate:g}")


def _ms(x: LatencyMs | None, key: str) -> str | None:
    return None if x is None else f"{getattr(x, key):,.1f}"


def _intro(r: RunResult, sv: ServingResult) -> list[str]:
    load: dict[str, Any] = r.recipe.get("load") or {}
    n = load.get("num_requests") or (sv.rates[0].requests if sv.rates else 0)
    b = load.get("burstiness", 1.0)
    arrivals = (
        "evenly spaced" if b == "inf" else "Poisson arrivals" if b == 1 else f"gamma-distributed gaps, burstiness {b}"
    )
    cap = load.get("max_concurrency")
    out = [
        f"The recipe ran against the engine's OpenAI-compatible server (ready after "
        f"{secs(sv.server_start_s)}), one measured run per offered request rate. Per rate: "
        f"{load.get('warmup_requests', 0)} warmup requests (the first prompt; not measured), then the server's "
        "prefix cache was emptied (`POST /reset_prefix_cache`) so that no rate is sped up by the cache of the "
        f"rates before it, then {n} requests sent on a seeded arrival schedule (seed {load.get('seed', 0)}, "
        f"{arrivals}, as `vllm bench serve` draws them), "
        + (f"at most {cap} in flight" if cap else "with no cap on requests in flight")
        + ". Prompts go to the server as the token ids the offline engine would get; sampling is the recipe's.",
        "",
    ]
    not_reset = [rate_label(p.rate) for p in sv.rates if not p.cache_reset]
    if not_reset:
        out += [
            f"> **The prefix cache was NOT emptied** before the rates {', '.join(not_reset)} (see the notes "
            "above): their figures may include hits on earlier rates' prompts.",
            "",
        ]
    out.append(
        f"**Headline: {rate_label(sv.headline_rate)} req/s**, the highest rate below saturation: the "
        "sections above (time, throughput, latency, tokens, scores) and samples.jsonl hold its figures."
    )
    out.append("")
    if sv.saturated_rate is not None:
        out.append(
            f"**Saturated at {rate_label(sv.saturated_rate)} req/s**: {'; '.join(sv.saturation_reasons)}."
            + (
                f" Higher rates were not run: {', '.join(map(rate_label, sv.skipped_rates))}."
                if sv.skipped_rates
                else ""
            )
        )
    elif sv.skipped_rates:
        out.append(f"The sweep stopped early; rates not run: {', '.join(map(rate_label, sv.skipped_rates))}.")
    else:
        out.append("No rate saturated the server (rule below).")
    return out


def _throughput_table(sv: ServingResult, metrics: list[str]) -> str:
    busy = any(p.gpu_busy is not None for p in sv.rates)
    rows = []
    for p in sv.rates:
        cached = (
            None
            if p.cached_tokens is None
            else f"{p.cached_tokens:,}" + (f" ({p.cached_tokens / p.prompt_tokens:.0%})" if p.prompt_tokens else "")
        )
        rows.append(
            [
                rate_label(p.rate),
                f"{p.request_throughput:.2f}",
                f"{p.output_throughput:,.0f}",
                None if p.goodput is None else f"{p.goodput:.2f}",
                f"{p.completed}/{p.requests}",
                p.errors,
                p.peak_concurrency,
                cached,
                *([None if p.gpu_busy is None else f"{p.gpu_busy:.0%}"] if busy else []),
                *(_score(p, m) for m in metrics),
                _flag(sv, p),
            ]
        )
    return table(
        rows,
        [
            "offered req/s",
            "achieved req/s",
            "output tok/s",
            "goodput req/s",
            "completed",
            "errors",
            "peak in flight",
            "prompt tokens from cache",
            *(["GPU busy"] if busy else []),
            *metrics,
            "",
        ],
    )


def _score(p: RatePoint, m: str) -> str | None:
    return f"{p.scores[m]:.3f}" if m in p.scores else None


def _flag(sv: ServingResult, p: RatePoint) -> str:
    return "saturated" if p.saturated else ("headline" if p.rate == sv.headline_rate else "")


def _latency_table(sv: ServingResult) -> str:
    rows = [
        [
            rate_label(p.rate),
            _ms(p.ttft_ms, "p50"),
            _ms(p.ttft_ms, "p90"),
            _ms(p.ttft_ms, "p99"),
            _ms(p.tpot_ms, "p50"),
            _ms(p.tpot_ms, "p90"),
            _ms(p.tpot_ms, "p99"),
            _ms(p.itl_ms, "p50"),
            _ms(p.itl_ms, "p99"),
            _ms(p.e2e_ms, "p50"),
            _ms(p.e2e_ms, "p99"),
            _ms(p.queue_ms, "p99"),
        ]
        for p in sv.rates
    ]
    return table(
        rows,
        [
            "offered req/s",
            "TTFT p50",
            "TTFT p90",
            "TTFT p99",
            "TPOT p50",
            "TPOT p90",
            "TPOT p99",
            "ITL p50",
            "ITL p99",
            "E2E p50",
            "E2E p99",
            "client wait p99",
        ],
    )


def serving_section(r: RunResult) -> list[str]:
    """report.md's section for a serving run: every rate's throughput, scores and latencies, the chart,
    and how each number is computed. Empty for other runs."""
    sv = r.serving
    if sv is None or not sv.rates:
        return []
    metrics = list(r.scores) or sorted({m for p in sv.rates for m in p.scores})
    out = [
        "",
        "## Serving under load",
        "",
        *_intro(r, sv),
        "",
        "### Throughput, accuracy and errors per rate",
        "",
        _throughput_table(sv, metrics),
    ]
    if not r.scores_meaningful and metrics:
        out += ["", "Scores are not meaningful here (random weights or a fake engine)."]
    out += ["", "### Latency per rate (ms)", "", _latency_table(sv)]
    if any(p.ttft_ms for p in sv.rates):
        out += ["", f"![TTFT p50/p99 and TPOT p50 against achieved requests/s]({CHART})"]
    errors = [f"- {rate_label(p.rate)} req/s: " + " | ".join(p.error_samples) for p in sv.rates if p.error_samples]
    if errors:
        out += ["", "### Errors (up to 5 distinct messages per rate)", "", *errors]
    if sv.command:
        out += [
            "",
            "Server command (its output is in engine.log):",
            "",
            "```bash",
            " ".join(shlex.quote(c) for c in sv.command),
            "```",
        ]
    return out + ["", "### How these are computed", "", *FORMULAS]


def summary_cells(r: RunResult, time_cell: str | None, speed: str | None) -> tuple[str | None, str | None]:
    """The summary's time and speed-up cells: a serving run's time is its headline rate's wall time, set by
    the offered rate, so it is labelled and not turned into a speed-up."""
    if r.serving is None or r.serving.headline_rate is None:
        return time_cell, speed
    return f"{time_cell} at {rate_label(r.serving.headline_rate)} req/s (serving)", None


def serving_summary(results: list[RunResult]) -> list[str]:
    """The summary's comparison of serving runs: every rate of every serving recipe."""
    served = [r for r in results if r.status == "ok" and r.serving is not None and r.serving.rates]
    if not served:
        return []
    rows = []
    for r in served:
        sv = r.serving
        assert sv is not None
        for p in sv.rates:
            rows.append(
                [
                    r.name,
                    rate_label(p.rate),
                    f"{p.request_throughput:.2f}",
                    _ms(p.ttft_ms, "p50"),
                    _ms(p.ttft_ms, "p99"),
                    _ms(p.tpot_ms, "p50"),
                    None if p.goodput is None else f"{p.goodput:.2f}",
                    p.errors,
                    ", ".join(f"{m} {v:.3f}" for m, v in p.scores.items()) if r.scores_meaningful else None,
                    _flag(sv, p),
                ]
            )
    return [
        "",
        "## Serving under load",
        "",
        "Every rate of every serving recipe (latencies in ms; TPOT = (E2E − TTFT) / (output tokens − 1); "
        "each report has the formulas). The summary table's figures for these recipes are those of their "
        "headline rate (the highest below saturation).",
        "",
        table(
            rows,
            [
                "recipe",
                "offered req/s",
                "achieved req/s",
                "TTFT p50",
                "TTFT p99",
                "TPOT p50",
                "goodput req/s",
                "errors",
                "scores",
                "",
            ],
        ),
    ]
