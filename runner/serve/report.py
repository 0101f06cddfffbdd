"""The Markdown of serving runs (recipes with `load:`): report.md's per-rate section with its chart
and the formulas behind its numbers, and summary.md's comparison of serving recipes."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from runner.base.format import secs, table
from runner.folder import RunFolder
from runner.report.plots import pyplot, save
from runner.results import LatencyMs, RatePoint, RunResult, ServingResult
from runner.serve.run import rate_label

CHART = "latency_throughput.png"  # in the run's folder, next to report.md
FORMULAS = [
    "Times are vLLM's benchmark client's (`vllm bench serve`'s request function, "
    "`time.perf_counter`), taken as the bytes of each streamed event arrive. Per request:",
    "",
    "- TTFT = t(first streamed chunk carrying text) − t(request sent)",
    "- E2E = t(last streamed chunk carrying text) − t(request sent)",
    "- TPOT = (E2E − TTFT) / (N − 1), N = output tokens (the server's `usage.completion_tokens`); "
    "a request with N ≤ 1 has none. This is `vllm bench serve`'s TPOT. Tools disagree here: some "
    "divide by N (counting the first token), some report the mean ITL as TPOT; compare TPOTs only "
    "under one definition.",
    "- ITL = every gap between consecutive streamed chunks of a request, pooled over the rate's "
    "requests: per chunk, not per token (a chunk can carry several tokens).",
    "- client wait = t(request sent) − t(request due on the schedule): the max_concurrency cap",
    "",
    "Per rate, with W = last response end − first request sent:",
    "",
    "- achieved req/s = completed requests / W; output tok/s = Σ N / W; total tok/s = Σ (prompt + "
    "output tokens) / W",
    "- goodput = completed requests meeting every SLO / W (a request without a TPOT meets a TPOT "
    "SLO)",
    "- mean and p50/p90/p99 over the completed requests, percentiles linearly interpolated; failed "
    "requests count as errors only (not in latencies, throughput or scores)",
    "- peak in flight = most requests sent and not yet answered at one time",
    "- saturated: rate i > 0 where achieved < 0.9 × offered (finite rates) or < 1.05 × the "
    "achieved rate before it, *and* TTFT p50 > 2 × the lowest TTFT p50 of the rates before it; the "
    "sweep stops there",
    "- scores: the recipe's metrics over the completed requests with gold answers, each request "
    "counted once (a prompt sent twice counts twice)",
]


LATENCY = [  # the latency table's columns: (name, RatePoint field, percentile)
    (name, key, q)
    for name, key, qs in [
        ("TTFT", "ttft_ms", "p50 p90 p99"),
        ("TPOT", "tpot_ms", "p50 p90 p99"),
        ("ITL", "itl_ms", "p50 p99"),
        ("E2E", "e2e_ms", "p50 p99"),
        ("client wait", "queue_ms", "p99"),
    ]
    for q in qs.split()
]


def _ms(x: LatencyMs | None, key: str) -> str | None:
    return None if x is None else f"{getattr(x, key):,.1f}"


def _flag(sv: ServingResult, p: RatePoint) -> str:
    return "saturated" if p.saturated else ("headline" if p.rate == sv.headline_rate else "")


def _intro(r: RunResult, sv: ServingResult) -> list[str]:
    load = r.recipe.load
    assert load is not None
    n = load.num_requests or (sv.rates[0].requests if sv.rates else 0)
    b = load.burstiness
    arrivals = (
        "evenly spaced"
        if math.isinf(b)
        else "Poisson arrivals"
        if b == 1
        else f"gamma gaps, burstiness {b:g}"
    )
    cap = (
        f"at most {load.max_concurrency} in flight"
        if load.max_concurrency
        else "with no cap on requests in flight"
    )
    out = [
        "The recipe ran against the engine's OpenAI-compatible server (ready after "
        f"{secs(sv.server_start_s)}), one measured run per offered request rate. Per rate: "
        f"{load.warmup_requests} warmup requests (the first prompt; "
        "not measured), then the server's prefix cache was emptied (`POST /reset_prefix_cache`) so "
        "that no rate is "
        f"sped up by the cache of the rates before it, then {n} requests sent on a seeded arrival "
        f"schedule (seed {load.seed}, {arrivals}, as `vllm bench serve` draws them), {cap}. "
        "Prompts go to the server as the token "
        "ids the offline engine would get; sampling is the recipe's.",
        "",
    ]
    not_reset = [rate_label(p.rate) for p in sv.rates if not p.cache_reset]
    if not_reset:
        out += [
            f"> **The prefix cache was NOT emptied** before the rates {', '.join(not_reset)} (see "
            "the notes "
            "above): their figures may include hits on earlier rates' prompts.",
            "",
        ]
    if r.status != "ok":  # the server died mid-sweep
        return out + [
            "**The sweep did not finish** (the run failed: above): below are the rates measured "
            "before it failed, with no headline rate."
        ]
    out += [
        f"**Headline: {rate_label(sv.headline_rate)} req/s**, the highest rate below saturation: "
        "the sections above "
        "(time, throughput, latency, tokens, scores) and samples.jsonl hold its figures.",
        "",
    ]
    skipped = ", ".join(map(rate_label, sv.skipped_rates))
    if sv.saturated_rate is not None:
        why = (
            f"**Saturated at {rate_label(sv.saturated_rate)} req/s**: "
            f"{'; '.join(sv.saturation_reasons)}."
        )
        return out + [why + (f" Higher rates were not run: {skipped}." if skipped else "")]
    if skipped:
        return out + [f"The sweep stopped early; rates not run: {skipped}."]
    return out + ["No rate saturated the server (rule below)."]


def _tables(sv: ServingResult, metrics: list[str]) -> tuple[str, str]:
    busy, rows, lat = any(p.gpu_busy is not None for p in sv.rates), [], []
    for p in sv.rates:
        cached = None if p.cached_tokens is None else f"{p.cached_tokens:,}"
        cached = cached and cached + (
            f" ({p.cached_tokens / p.prompt_tokens:.0%})" if p.prompt_tokens else ""
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
                *(f"{p.scores[m]:.3f}" if m in p.scores else None for m in metrics),
                _flag(sv, p),
            ]
        )
        lat.append([rate_label(p.rate), *(_ms(getattr(p, key), q) for _, key, q in LATENCY)])
    heads = [
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
    ]
    lat_heads = ["offered req/s", *(f"{name} {q}" for name, _, q in LATENCY)]
    return table(rows, heads), table(lat, lat_heads)


def _chart(r: RunResult, path: Path) -> None:
    """TTFT p50 and p99 and TPOT p50 against the achieved request rate, one point per offered
    rate."""
    pts = [p for p in r.serving.rates if p.ttft_ms is not None]
    if not pts:
        return
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(10, 4))
    x = [p.request_throughput for p in pts]
    tpot = [p.tpot_ms.p50 if p.tpot_ms else math.nan for p in pts]
    p99 = [p.ttft_ms.p99 for p in pts]
    left.plot(x, [p.ttft_ms.p50 for p in pts], "o-", color="#1f77b4", label="TTFT p50")
    left.plot(x, p99, "s--", color="#ff7f0e", label="TTFT p99")
    right.plot(x, tpot, "o-", color="#2ca02c", label="TPOT p50")
    panels = [(left, p99, "time to first token"), (right, tpot, "time per output token")]
    for ax, ys, title in panels:
        for p, xi, yi in zip(pts, x, ys):
            if not math.isnan(yi):
                ax.annotate(
                    rate_label(p.rate),
                    (xi, yi),
                    fontsize=7,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
                if p.saturated:
                    ax.scatter([xi], [yi], s=120, facecolors="none", edgecolors="#d62728", zorder=3)
        finite = [y for y in ys if not math.isnan(y) and y > 0]
        ax.set_yscale("log") if finite and max(finite) / min(finite) > 20 else ax.set_ylim(bottom=0)
        ax.set(xlabel="achieved requests/s", ylabel="ms", title=title)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"{r.name}: latency against throughput (labels: offered req/s; red ring: saturated)",
        fontsize=10,
    )
    save(fig, path)


def serving_section(out: Path | None):
    """report.md's section for a serving run, its chart drawn beside it in `out`; nothing for other
    runs."""

    def section(r: RunResult) -> list[str]:
        sv = r.serving
        if sv is None or not sv.rates:
            return []
        if out is not None:
            _chart(r, RunFolder.of(out, r.name).root / CHART)
        metrics = list(r.scores) or sorted({m for p in sv.rates for m in p.scores})
        rates, latency = _tables(sv, metrics)
        lines = [
            "",
            "## Serving under load",
            "",
            *_intro(r, sv),
            "",
            "### Throughput, accuracy and errors per rate",
            "",
            rates,
        ]
        if not r.scores_meaningful and metrics:
            lines += ["", "Scores are not meaningful here (random weights or a fake engine)."]
        lines += ["", "### Latency per rate (ms)", "", latency]
        if any(p.ttft_ms for p in sv.rates):
            lines += ["", f"![TTFT p50/p99 and TPOT p50 against achieved requests/s]({CHART})"]
        errors = [
            f"- {rate_label(p.rate)} req/s: " + " | ".join(p.error_samples)
            for p in sv.rates
            if p.error_samples
        ]
        if errors:
            lines += ["", "### Errors (up to 5 distinct messages per rate)", "", *errors]
        if sv.command:
            lines += [
                "",
                "Server command (its output is in engine.log):",
                "",
                "```bash",
                shlex.join(sv.command),
                "```",
            ]
        return lines + ["", "### How these are computed", "", *FORMULAS]

    return section


def serving_summary(results: list[RunResult], out: Path | None = None) -> list[str]:
    """summary.md's comparison of serving runs: every rate of every serving recipe."""
    rows = [
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
            _flag(r.serving, p),
        ]
        for r in results
        if r.status == "ok" and r.serving is not None
        for p in r.serving.rates
    ]
    if not rows:
        return []
    heads = [
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
    ]
    intro = (
        "Every rate of every serving recipe (latencies in ms; TPOT = (E2E − TTFT) / (output tokens "
        "− 1); each report has the formulas). The summary table's figures for these recipes are "
        "those of their headline rate (the highest below saturation)."
    )
    return ["", "## Serving under load", "", intro, "", table(rows, heads)]
