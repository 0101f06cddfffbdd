"""A study's section of summary.md, what each knob bought: a pivot of generation times over two axes (the
study file's `report: {rows, columns}`, else the two with the most distinct values), the effect of each axis
alone, the fastest cell, wall time against the cells' generation and engine starts, and the chart
(study_plots.py). An axis: a key of the cells' `cell` (dotted key or `variant`) with more than one value."""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.reporting.format import cell, secs, short, table
from runner.reporting.results import RunResult

ABSENT: Any = type("Absent", (), {"__repr__": lambda _: "ABSENT"})()  # an axis the cell's variant has not got
REUSED = re.compile(r"ran on the engine started for ([A-Za-z0-9][A-Za-z0-9._-]*)")
Axes = dict[str, list[Any]]


def study_groups(results: Iterable[RunResult]) -> dict[str, list[RunResult]]:
    """study name -> its cells, in the order they come (runs without a study are left out)."""
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        if r.study:
            groups.setdefault(r.study, []).append(r)
    return groups


def projected(r: RunResult) -> float | None:
    """Generation time, projected to the full dataset for an estimate."""
    return r.estimate.projected_s if r.estimate else r.timings.generate_s


def timed(r: RunResult) -> bool:
    return r.status == "ok" and bool(projected(r))


_NAMES: dict[tuple[str, str], str] = {}  # (axis, value key) -> the study file's label, set per section


def value_label(v: Any, width: int = 36, axis: str | None = None) -> str:
    """An axis value as a short label: the study file's own label where it gives one, else text as it
    is, mappings as k=v pairs, other values as JSON."""
    if v is ABSENT:
        return "n/a"
    if axis is not None and (axis, _key(v)) in _NAMES:
        return _NAMES[axis, _key(v)]
    if isinstance(v, dict) and v:
        v = ",".join(f"{k}={x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)}" for k, x in v.items())
    elif not isinstance(v, (str, list)):
        v = json.dumps(v, ensure_ascii=False, default=str)
    return short(v, width)


def cell_line(r: RunResult) -> list[str]:
    """report.md's line naming the study a run is a cell of and the settings that make it different."""
    if not r.study:
        return []
    what = ", ".join(f"{k}={r.cell_labels.get(k) or value_label(v, 80)}" for k, v in r.cell.items())
    return [f"Cell of study **{r.study}**" + (f": {what}" if what else ""), ""]


def _key(v: Any) -> str:
    return "\0absent" if v is ABSENT else json.dumps(v, sort_keys=True, default=str)


def _get(r: RunResult, axis: str) -> Any:
    return r.cell.get(axis, ABSENT)


def axes_of(cells: list[RunResult]) -> Axes:
    """axis -> its distinct values in the order the cells bring them (ABSENT last), for every key of the cells'
    `cell` with more than one value among them; keys in the order of the cells with the most keys (the study's)."""
    out: Axes = {}
    for k in dict.fromkeys(k for r in sorted(cells, key=lambda r: -len(r.cell)) for k in r.cell):
        seen: dict[str, Any] = {}
        for r in cells:
            seen.setdefault(_key(_get(r, k)), _get(r, k))
        vals = [v for v in seen.values() if v is not ABSENT] + [v for v in seen.values() if v is ABSENT]
        if len(vals) > 1:
            out[k] = vals
    return out


def requested_axes(cells: list[RunResult]) -> dict[str, str | None] | None:
    """The study file's `report: {rows, columns}` as its cells carry it (`study_axes`), if they do."""
    for r in cells:
        a = getattr(r, "study_axes", None)
        if a is not None:
            return a.model_dump() if hasattr(a, "model_dump") else dict(a)
    return None


def pick_axes(axes: Axes, requested: dict[str, str | None] | None) -> tuple[str | None, str | None, str]:
    """(rows axis, columns axis, how they were picked): the requested ones where they vary here, the rest
    from the axes with the most distinct values (ties: the earlier axis)."""
    req = requested or {}
    rows = req.get("rows") if req.get("rows") in axes else None
    cols = req.get("columns") if req.get("columns") in axes and req.get("columns") != rows else None
    unknown = [f"`{k}`" for k in (req.get("rows"), req.get("columns")) if k and k not in axes]
    auto = sorted((k for k in axes if k not in (rows, cols)), key=lambda k: -sum(v is not ABSENT for v in axes[k]))
    how = "from the study's `report`" if (rows or cols) else "picked automatically: most distinct values"
    if rows is None and auto:
        rows = auto.pop(0)
    if cols is None and auto:
        cols = auto.pop(0)
    if unknown:
        how += f"; {', '.join(unknown)} asked for by `report` but not varying here"
    return rows, cols, how


def chart_metric(cells: list[RunResult]) -> str | None:
    """`exact_match` where a cell with meaningful scores has it, else the first such cell's first metric."""
    scored = [r for r in cells if r.status == "ok" and r.scores_meaningful and r.scores]
    if any("exact_match" in r.scores for r in scored):
        return "exact_match"
    return next(iter(scored[0].scores)) if scored else None


def fastest(cells: list[RunResult]) -> RunResult | None:
    rs = [r for r in cells if timed(r)]
    return min(rs, key=projected) if rs else None


def times(x: float, approx: bool = False) -> str:
    """A speed-up: `2.50×`, `12.5×`, `1,234×` (`~` where a projected time went into it)."""
    return ("~" if approx else "") + (f"{x:,.0f}×" if x >= 100 else f"{x:.1f}×" if x >= 10 else f"{x:.2f}×")


def time_text(r: RunResult, bold: bool = False) -> str | None:
    """`12.0 s`, `~12.0 s` for a projection, `failed`; in bold for the fastest cell."""
    if r.status != "ok":
        return "failed"
    t = projected(r)
    if t is None:
        return None
    s = ("~" if r.estimate else "") + secs(t)
    return f"**{s}**" if bold else s


def pivot(cells: list[RunResult], axes: Axes, rows: str | None, cols: str | None) -> str:
    """Generation time per cell: a row per value of `rows` and of the other axes, a column per value of `cols`."""
    lead = [k for k in axes if k == rows] + [k for k in axes if k not in (rows, cols)]
    col_keys = [_key(v) for v in axes[cols]] if cols else [""]
    headers = lead + (
        [cell(f"{cols.rsplit('.', 1)[-1]}={value_label(v, axis=cols)}") for v in axes[cols]]
        if cols
        else ["generation time"]
    )
    best = fastest(cells)
    grid: list[tuple[tuple[str, ...], dict[str, str | None]]] = []
    for r in cells:
        key = tuple(_key(_get(r, k)) for k in lead)
        ck = _key(_get(r, cols)) if cols else ""
        slot = next((g for g in grid if g[0] == key and ck not in g[1]), None)
        if slot is None:
            slot = (key, {})
            grid.append(slot)
        slot[1][ck] = time_text(r, bold=r is best)
    order = {k: [_key(v) for v in axes[k]] for k in lead}
    grid.sort(key=lambda g: [order[k].index(x) for k, x in zip(lead, g[0], strict=True)])
    labels = {(k, _key(v)): value_label(v, axis=k) for k in lead for v in axes[k]}
    body = [
        [labels[k, x] for k, x in zip(lead, key, strict=True)] + [got.get(c) for c in col_keys] for key, got in grid
    ]
    return table(body, headers)


@dataclass(frozen=True)
class Effect:
    """Changing `axis` alone from `frm` to `to`: the pairs of timed cells (from, to) that differ only there."""

    axis: str
    frm: Any
    to: Any
    pairs: tuple[tuple[RunResult, RunResult], ...]

    @property
    def median(self) -> float | None:
        return statistics.median(projected(a) / projected(b) for a, b in self.pairs) if self.pairs else None

    @property
    def approx(self) -> bool:
        return any(a.estimate or b.estimate for a, b in self.pairs)


def only_differ_in(a: RunResult, b: RunResult, axis: str) -> bool:
    """Every other setting is the same. Across variants a setting only one of the cells has (the other's
    variant replaced the section that holds it) is no difference: it belongs to the variant."""
    for k in (set(a.cell) | set(b.cell)) - {axis}:
        if k in a.cell and k in b.cell:
            if _key(a.cell[k]) != _key(b.cell[k]):
                return False
        elif axis != "variant":
            return False
    return True


def axis_effects(cells: list[RunResult], axes: Axes) -> list[Effect]:
    """For each axis, from its first value to each other value (cells without the axis take no part)."""
    ok = [r for r in cells if timed(r)]
    out = []
    for axis, values in axes.items():
        vals = [v for v in values if v is not ABSENT]
        at = {_key(v): [r for r in ok if _key(_get(r, axis)) == _key(v)] for v in vals}
        for v in vals[1:]:
            pairs = tuple((a, b) for a in at[_key(vals[0])] for b in at[_key(v)] if only_differ_in(a, b, axis))
            out.append(Effect(axis, vals[0], v, pairs))
    return out


def effects_section(effects: list[Effect]) -> list[str]:
    if not effects:
        return []
    rows, lines = [], []
    for e in effects:
        change = f"{value_label(e.frm, axis=e.axis)} → {value_label(e.to, axis=e.axis)}"
        med = times(e.median, e.approx) if e.median is not None else None
        rows.append([e.axis, change, med, len(e.pairs)])
        if e.pairs:
            lines.append(
                f"- {e.axis} {change}: "
                + ", ".join(f"{a.name} → {b.name} ({times(projected(a) / projected(b))})" for a, b in e.pairs)
            )
    return [
        "",
        "### What each setting bought",
        "",
        "Speed-up of changing one setting alone, every other setting held fixed: generation time with the "
        "first value ÷ time with the other value, the median over the pairs of cells that differ only in "
        "that setting (above 1× the change is faster; failed cells take no part; across variants, settings "
        "only one of the two cells has count as the variant's; `~`: a projected time).",
        "",
        table(rows, ["setting", "change", "median speed-up", "pairs"]),
        "",
        *lines,
    ]


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


def _when(s: str) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Spent:
    """A study's time: wall (first start to last finish), generation and engine start summed over its cells."""

    wall_s: float | None
    generate_s: float
    load_s: float
    starts: int
    reused: tuple[tuple[str, str | None], ...]  # (cell, the cell whose engine it ran on)


def time_spent(cells: list[RunResult]) -> Spent:
    starts = [t for t in (_when(r.started_at) for r in cells) if t]
    ends = [t for t in (_when(r.finished_at) for r in cells) if t]
    wall = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    reused = tuple(
        (r.name, next((m.group(1) for n in r.notes if (m := REUSED.search(n))), None))
        for r in cells
        if r.timings.load_s == 0
    )
    return Spent(
        wall,
        sum(r.timings.generate_s or 0 for r in cells),
        sum(r.timings.load_s or 0 for r in cells),
        sum(1 for r in cells if (r.timings.load_s or 0) > 0),
        reused,
    )


def spent_section(cells: list[RunResult]) -> list[str]:
    s = time_spent(cells)
    share = f" ({s.generate_s / s.wall_s:.0%} of the wall time)" if s.wall_s else ""
    out = [
        "",
        "### Time spent",
        "",
        "Wall time: from the first cell's start to the last cell's finish. Generation and engine start: "
        "summed over the cells (as measured: an estimate counts its partial run).",
        "",
        table(
            [[secs(s.wall_s), secs(s.generate_s) + share, secs(s.load_s), s.starts, len(cells)]],
            ["wall time", "generation (sum)", "engine start (sum)", "engine starts", "cells"],
        ),
    ]
    if s.reused:
        out += [
            "",
            "Cells that ran on an engine started for another cell: "
            + ", ".join(f"{name} (on {host}'s)" if host else name for name, host in s.reused)
            + ".",
        ]
    return out


def study_section(study: str, cells: list[RunResult], chart: Path | None = None) -> list[str]:
    _NAMES.clear()
    _NAMES.update({(k, _key(r.cell[k])): lab for r in cells for k, lab in r.cell_labels.items() if k in r.cell})
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
    out += effects_section(axis_effects(cells, axes))
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
