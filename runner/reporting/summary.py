"""Markdown of a call: summary.md, comparing every recipe of the call (and each study's cells)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from runner.execution.layout import summary_path
from runner.files import write_text_atomic
from runner.reporting.comparisons import changed_answers_section, prefix_section
from runner.reporting.format import diff_cell, gib, secs, table
from runner.reporting.plan_markdown import roofline
from runner.reporting.recipe_diff import recipe_diff
from runner.reporting.results import RunResult
from runner.reporting.serving_markdown import serving_summary, summary_cells
from runner.reporting.study import study_sections


def pick_baseline(results: list[RunResult], name: str | None = None) -> RunResult | None:
    if name:
        return next((r for r in results if r.name == name), None)
    return next((r for r in results if r.recipe.get("baseline")), None)


def _metric_names(results: list[RunResult]) -> list[str]:
    names: list[str] = []
    for r in results:
        names += [m for m in r.scores if m not in names]
    return names


def _row(r: RunResult, base: RunResult | None, metric_names: list[str]) -> list:
    """One recipe's row of the summary table."""
    t = r.estimate.projected_s if r.estimate else r.timings.generate_s
    bt = None
    if base is not None and base.status == "ok":
        bt = base.estimate.projected_s if base.estimate else base.timings.generate_s
    approx = "~" if (r.estimate or (base is not None and base.estimate)) else ""
    speed = f"{approx}{bt / t:.1f}×" if (t and bt and r.status == "ok") else None
    tcell = secs(t) if t is not None else None
    if r.estimate and t is not None:
        tcell = f"~{secs(t)} (est. from {r.estimate.n_measured})"
    tcell, speed = summary_cells(r, tcell, speed)
    diff = recipe_diff(r.recipe, base.recipe) if base is not None and r is not base else {}
    diff_s = diff_cell(diff) if diff else ("(baseline)" if r is base else "")
    knob_flags = [k.name for k in r.knobs if k.status == "ignored"]
    status = r.status if not knob_flags else f"{r.status}; ignored: {', '.join(knob_flags)}"
    scores = [
        (
            f"{r.scores[m]:.3f}"
            if m in r.scores and r.scores_meaningful
            else ("n/a (random weights)" if m in r.scores else None)
        )
        for m in metric_names
    ]
    roof = roofline(r)
    return [
        r.name,
        status,
        r.recipe.get("engine", {}).get("kind"),
        tcell,
        speed,
        r.throughput.requests_per_s,
        r.throughput.output_tokens_per_s,
        gib(r.memory.peak_gpu_gib),
        f"{roof:.0%}" if roof is not None else None,
        *scores,
        diff_s,
    ]


def summary_markdown(
    results: list[RunResult],
    baseline: str | None = None,
    out: Path | None = None,
    study_charts: dict[str, Path] | None = None,
) -> str:
    base = pick_baseline(results, baseline)
    parts = _overview(results, base)
    parts += study_sections(results, study_charts)
    parts += serving_summary(results)
    parts += prefix_section(results)
    parts += changed_answers_section(results, base, out)
    parts += _failures(results)
    parts += [
        "",
        "Times marked `~` are projections from a partial run (see each report). "
        "Scores of runs with random weights are left out of comparisons.",
        "",
    ]
    return "\n".join(parts)


def _overview(results: list[RunResult], base: RunResult | None) -> list[str]:
    """The title, the baseline, and the table of every recipe against it."""
    parts = [
        "# Summary",
        "",
        f"{len(results)} recipes; "
        + (
            f"baseline: **{base.name}**."
            if base
            else "no baseline (mark one with `baseline: true` or `--baseline NAME`)."
        ),
    ]
    metric_names = _metric_names(results)
    if metric_names and not any(r.scores_meaningful and r.scores for r in results):
        parts.append("Scores are left out: every recipe here ran with random weights (speed and memory only).")
        metric_names = []
    rows = [_row(r, base, metric_names) for r in results]
    headers = ["recipe", "status", "engine", "generation time", "speed-up", "requests/s", "output tok/s"]
    headers += ["peak GPU", "roofline", *metric_names, "differs from baseline"]
    return parts + [
        "",
        table(rows, headers),
        "",
        "Roofline: the predicted floor of the generation time (compute, memory bandwidth or PCIe, "
        "whichever binds; `runner plan`) ÷ the measured generation time.",
    ]


def _failures(results: list[RunResult]) -> list[str]:
    failed = [r for r in results if r.status != "ok"]
    if not failed:
        return []
    return ["", "## Failures", ""] + [
        f"- **{r.name}**: {r.error}" + (f" — hint: {r.hint}" if r.hint else "") for r in failed
    ]


def write_summary(results: Iterable[RunResult], out: Path, baseline: str | None = None) -> Path:
    from runner.reporting.plots import write_charts
    from runner.reporting.study_plots import write_study_charts

    results = list(results)
    path = summary_path(out)
    charts = write_charts(results, pick_baseline(results, baseline), out)
    text = summary_markdown(results, baseline, out, write_study_charts(results, out))
    if charts:
        text += "\n## Charts\n\n" + "\n\n".join(f"![{c.stem}]({c.name})" for c in charts) + "\n"
    write_text_atomic(path, text)
    return path
