"""A study's section of summary.md, what each knob bought: a pivot of generation times over two axes (the
study file's `report: {rows, columns}`, else the two with the most distinct values), the effect of each axis
alone, the fastest cell, wall time against the cells' generation and engine starts, and the chart
(study_plots.py). The axes and their labels: study_axes.py; the effects: study_effects.py; the times:
study_times.py."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from runner.reporting.format import cell, table
from runner.reporting.results import RunResult
from runner.reporting.study_axes import (
    Axes,
    axes_of,
    axis_value,
    labels_of,
    pick_axes,
    requested_axes,
    value_key,
    value_label,
)
from runner.reporting.study_effects import axis_effects, effects_section
from runner.reporting.study_times import fastest, projected, spent_section, time_text, timed, times


def study_groups(results: Iterable[RunResult]) -> dict[str, list[RunResult]]:
    """study name -> its cells, in the order they come (runs without a study are left out)."""
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        if r.study:
            groups.setdefault(r.study, []).append(r)
    return groups


def chart_metric(cells: list[RunResult]) -> str | None:
    """`exact_match` where a cell with meaningful scores has it, else the first such cell's first metric."""
    scored = [r for r in cells if r.status == "ok" and r.scores_meaningful and r.scores]
    if any("exact_match" in r.scores for r in scored):
        return "exact_match"
    return next(iter(scored[0].scores)) if scored else None


def pivot(cells: list[RunResult], axes: Axes, rows: str | None, cols: str | None) -> str:
    """Generation time per cell: a row per value of `rows` and of the other axes, a column per value of `cols`."""
    lead = [k for k in axes if k == rows] + [k for k in axes if k not in (rows, cols)]
    names = labels_of(cells)
    col_keys = [value_key(v) for v in axes[cols]] if cols else [""]
    headers = lead + (
        [cell(f"{cols.rsplit('.', 1)[-1]}={value_label(v, axis=cols, labels=names)}") for v in axes[cols]]
        if cols
        else ["generation time"]
    )
    best = fastest(cells)
    grid: list[tuple[tuple[str, ...], dict[str, str | None]]] = []
    for r in cells:
        key = tuple(value_key(axis_value(r, k)) for k in lead)
        ck = value_key(axis_value(r, cols)) if cols else ""
        slot = next((g for g in grid if g[0] == key and ck not in g[1]), None)
        if slot is None:
            slot = (key, {})
            grid.append(slot)
        slot[1][ck] = time_text(r, bold=r is best)
    order = {k: [value_key(v) for v in axes[k]] for k in lead}
    grid.sort(key=lambda g: [order[k].index(x) for k, x in zip(lead, g[0], strict=True)])
    labels = {(k, value_key(v)): value_label(v, axis=k, labels=names) for k in lead for v in axes[k]}
    body = [
        [labels[k, x] for k, x in zip(lead, key, strict=True)] + [got.get(c) for c in col_keys] for key, got in grid
    ]
    return table(body, headers)


def fastest_section(cells: list[RunResult], metric: str | None) -> list[str]:
    best = fastest(cells)
    if best is None:
        return ["", "### Fastest cell", "", "No cell finished with a generation time."]
    slow = max((r for r in cells if timed(r)), key=projected)

    def vs(other: RunResult, what: str) -> str:
        ratio = times(projected(other) / projected(best), bool(best.estimate or other.estimate))
        return f"{ratio} faster than {what} {other.name} ({time_text(other)})"

    base = next((r for r in cells if r.recipe.get("baseline")), None)
    parts = (
        [vs(slow, "the slowest" + (" (the study's baseline)," if slow is base else ","))]
        if slow is not best
        else ["the only cell with a time"]
    )
    if base is best:
        parts.append("it is the study's baseline")
    elif base is not None and base is not slow:
        parts.append(vs(base, "the baseline,") if timed(base) else f"the baseline, {base.name}, has no time")
    scored = metric and best.scores_meaningful and metric in best.scores
    score = f"; {metric} {best.scores[metric]:.3f}" if scored else ""
    return ["", "### Fastest cell", "", f"**{best.name}** ({time_text(best)}{score}): " + "; ".join(parts) + "."]


def study_section(study: str, cells: list[RunResult], chart: Path | None = None) -> list[str]:
    axes = axes_of(cells)
    rows, cols, how = pick_axes(axes, requested_axes(cells))
    failed = sum(r.status != "ok" for r in cells)
    head = f"{len(cells)} cells" + (f" ({failed} failed)" if failed else "")
    out = ["", f"## Study {study}", ""]
    if axes:
        picked = f"rows: **{rows}**" + (f", columns: **{cols}**" if cols else "")
        out += [
            f"{head}; {picked} ({how}). Generation time per cell (`~`: projected from a partial run; fastest in bold).",
            "",
            pivot(cells, axes, rows, cols),
        ]
    else:
        out.append(f"{head}; no setting varies among them.")
    out += effects_section(axis_effects(cells, axes), labels_of(cells))
    metric = chart_metric(cells)
    out += fastest_section(cells, metric)
    out += spent_section(cells)
    if chart is not None:
        out += ["", f"![{study}: accuracy against time]({chart.name})"]
    elif metric is None:
        out += ["", "No accuracy chart: no cell of this study has meaningful scores."]
    return out


def study_sections(results: Iterable[RunResult], charts: dict[str, Path] | None = None) -> list[str]:
    """summary.md's section for each study among `results`."""
    charts = charts or {}
    return [
        line
        for study, cells in study_groups(results).items()
        for line in study_section(study, cells, charts.get(study))
    ]
