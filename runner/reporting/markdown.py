"""Markdown of one run: report.md. (All Markdown the runner writes lives in runner/reporting/.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.execution.layout import RunFolder
from runner.files import write_text_atomic
from runner.reporting.format import N_EXAMPLES_SHOWN, brief, cell, gib, inline, secs, table
from runner.reporting.plan_markdown import predicted_vs_measured
from runner.reporting.replicas_markdown import where_it_ran
from runner.reporting.reproduce import reproducibility
from runner.reporting.results import RunResult
from runner.reporting.serving_markdown import serving_section
from runner.reporting.serving_plots import latency_chart
from runner.reporting.stored import load_samples
from runner.reporting.study_axes import cell_line


def _interval(e: Any) -> str:
    if e.low_s is None or e.high_s is None:
        return "no interval"
    return f"95% interval {secs(e.low_s)} – {secs(e.high_s)}"


def engine_label(r: RunResult) -> str:
    from runner.engines import spec_class

    cls = spec_class(r.recipe.get("engine", {}).get("kind"))
    return (cls.label if cls else "") or r.engine.name or str(r.recipe.get("engine", {}).get("kind"))


def _banners(r: RunResult) -> list[str]:
    out = []
    from runner.engines import spec_class

    cls = spec_class(r.recipe.get("engine", {}).get("kind"))
    if cls is not None and cls.fake:
        out.append(
            f"> **FAKE ENGINE**: `{cls.kind_name()}` made these outputs up from a template; no model ran. "
            "Times, tokens and scores test the pipeline only."
        )
    if r.status != "ok":
        out.append(f"> **FAILED**: {r.error}" + (f"\n>\n> Hint: {r.hint}" if r.hint else ""))
    if not r.scores_meaningful:
        out.append(
            "> **Scores are not meaningful**: this run used random weights "
            "(`load_format: dummy` or the builtin smoke-test model); read it for speed only."
        )
    for n in r.notes:
        out.append(f"> Note: {n}")
    if r.estimate:
        e = r.estimate
        out.append(
            f"> **Estimate**: {e.n_measured} of {e.n_total} examples were run; the full time is "
            f"projected at {secs(e.projected_s)} ({_interval(e)}; {e.method})."
        )
    return out


def report_markdown(r: RunResult, samples: list[dict]) -> str:
    """report.md: its sections in order."""
    sections = (
        _header,
        _time_section,
        where_it_ran,
        _tokens_section,
        _latency_section,
        serving_section,
        _memory_section,
        _scores_section,
        _prefix_section,
        predicted_vs_measured,
        _knobs_section,
    )
    parts = [line for section in sections for line in section(r)]
    parts += _samples_section(samples)
    parts += reproducibility(r)
    return "\n".join(parts)


def _header(r: RunResult) -> list[str]:
    """The title, the study cell line, the description, the status line and the banners."""
    rec = r.recipe
    parts = [f"# {r.name}", "", *cell_line(r)]
    if rec.get("description"):
        parts += [rec["description"], ""]
    parts += [
        f"Status: **{r.status}** · engine: {engine_label(r)} {r.engine.version} · "
        f"model: `{rec['model']['id']}` · device: {r.engine.device or '–'} · "
        f"samples: {r.n_samples} of {r.n_dataset} · finished {r.finished_at}",
        "",
    ]
    for b in _banners(r):  # each its own block quote (adjacent ones would merge)
        parts += [b, ""]
    return parts


def _time_section(r: RunResult) -> list[str]:
    parts = ["", "## Time and throughput", ""]
    t, th = r.timings, r.throughput
    row = [
        secs(t.load_s),
        secs(t.generate_s),
        secs(t.total_s),
        cell(th.requests_per_s),
        cell(th.output_tokens_per_s),
        cell(th.total_tokens_per_s),
    ]
    head = ["engine start", "generation", "total", "requests/s", "output tok/s", "total tok/s"]
    busy = t.gpu_busy is not None
    parts.append(table([[*row, f"{t.gpu_busy:.0%}"] if busy else row], [*head, "GPU busy"] if busy else head))
    if busy:
        parts += [
            "",
            "GPU busy: the mean of NVML's utilization counter (share of time a kernel was running, whole "
            "device) sampled every 50 ms during generation; it says whether the GPU waited, not how full it was."
            + (
                " By tenth of the generation time: "
                + " ".join(f"{x:.0%}" for x in t.gpu_busy_tenths)
                + " (NVML averages over its own window, up to a second: the tenths lag, the first reads low)."
                if t.gpu_busy_tenths
                else ""
            ),
        ]
    if r.estimate:
        e = r.estimate
        parts += [
            "",
            f"Projected full-dataset generation (**estimate**): ~{secs(e.projected_s)} "
            f"({_interval(e)}) from {e.n_measured} examples.",
        ]
    return parts


def _tokens_section(r: RunResult) -> list[str]:
    parts = ["", "## Tokens", ""]
    parts.append(
        table(
            [
                [
                    r.tokens.prompt,
                    r.tokens.output,
                    r.tokens.cached,
                    f"{r.tokens.prompt / r.n_samples:.1f}" if r.n_samples else None,
                    f"{r.tokens.output / r.n_samples:.1f}" if r.n_samples else None,
                ]
            ],
            ["prompt", "output", "prompt from cache", "prompt / example", "output / example"],
        )
    )
    return parts


def _latency_section(r: RunResult) -> list[str]:
    lat = [(n, p) for n, p in (("time to first token", r.latency.ttft_s), ("end-to-end", r.latency.e2e_s)) if p]
    if not lat:
        return []
    return [
        "",
        "## Latency per request",
        "",
        table(
            [[n, secs(p.p50), secs(p.p90), secs(p.p99), secs(p.mean)] for n, p in lat],
            ["", "p50", "p90", "p99", "mean"],
        ),
    ]


def _memory_section(r: RunResult) -> list[str]:
    m = r.memory
    parts = ["", "## Memory", ""]
    parts.append(
        table(
            [
                [
                    gib(m.peak_gpu_gib),
                    gib(m.baseline_gpu_gib),
                    gib(m.weights_gib),
                    f"{m.kv_cache_tokens:,}" if m.kv_cache_tokens else None,
                    gib(m.kv_cache_gib),
                ]
            ],
            ["peak GPU (whole device)", "GPU before start", "weights", "KV cache (tokens)", "KV cache"],
        )
    )
    return parts


def _scores_section(r: RunResult) -> list[str]:
    parts = ["", "## Scores", ""]
    if r.scores:
        parts += score_table(r)
    else:
        parts.append("No scores (no gold answers, or the run failed).")
    return parts


def _prefix_section(r: RunResult) -> list[str]:
    if r.status != "ok":
        return []
    p = r.prefix
    return [
        "",
        "## Prompt prefix",
        "",
        f"Every prompt starts with the same {p.shared_prefix_tokens} tokens "
        f"({p.shared_prefix_share:.1%} of all prompt tokens); a block-granular prefix cache also reuses "
        "prefixes shared by some prompts only (see the prediction below)."
        + (f" Measured hit rate: {p.hit_rate:.1%}." if p.hit_rate is not None else ""),
    ]


def _knobs_section(r: RunResult) -> list[str]:
    if not r.knobs:
        return []
    return [
        "",
        "## Knobs: requested and effective",
        "",
        table(
            [
                [
                    k.name,
                    brief(k.requested),
                    brief(k.effective),
                    ("**IGNORED**" if k.status == "ignored" else k.status),
                    k.evidence,
                ]
                for k in r.knobs
            ],
            ["knob", "requested", "effective", "status", "evidence"],
        ),
    ]


def _samples_section(samples: list[dict]) -> list[str]:
    if not samples:
        return []
    parts = ["", "## Sample prompts and outputs", ""]
    for s in samples[:N_EXAMPLES_SHOWN]:
        parts += [
            f"### {s['id']}",
            "",
            "Prompt:",
            "",
            "```text",
            s["prompt"].replace("```", "ˋˋˋ"),
            "```",
            "",
            f"Output: `{inline(s['output'])}` · gold: " + ", ".join(f"`{inline(a)}`" for a in s.get("answers", [])),
            "",
        ]
    return parts


def score_table(r: RunResult) -> list[str]:
    """Each score with the convention it follows, and the recipe's gold policy and clean-up."""
    from runner.scoring import conventions

    note = " (not meaningful: random weights or a fake engine)" if not r.scores_meaningful else ""
    scoring = r.recipe.get("scoring") or {}
    gold = scoring.get("gold")
    conv = conventions([k for k in r.scores])
    rows = [[k, f"{v:.4f}", conv[k].name, gold or conv[k].gold, conv[k].formula] for k, v in r.scores.items()]
    out = [table(rows, ["metric", "score" + note, "convention", "gold answers", "formula"])]
    post = {k: v for k, v in (scoring.get("postprocess") or {}).items() if v}
    out += [
        "",
        "Output clean-up before scoring: "
        + (", ".join(f"{k}={v!r}" for k, v in post.items()) or "none")
        + (f"; gold policy set by the recipe: {gold}" if gold else "; gold policy: each metric's own")
        + ".",
    ]
    return out


def write_report(r: RunResult, out: Path) -> Path:
    folder = RunFolder.of(out, r.name)
    latency_chart(r, folder.root)
    write_text_atomic(folder.report, report_markdown(r, load_samples(folder)))
    return folder.report
