"""A study's axes: the settings that vary among its cells, their values and labels, and which two the pivot
table puts on rows and columns. An axis: a key of the cells' `cell` (dotted key or `variant`) with more than
one value."""

from __future__ import annotations

import json
from typing import Any

from runner.reporting.format import short
from runner.reporting.results import RunResult

ABSENT: Any = type("Absent", (), {"__repr__": lambda _: "ABSENT"})()  # an axis the cell's variant has not got
Axes = dict[str, list[Any]]
Labels = dict[tuple[str, str], str]  # (axis, value key) -> the study file's label for that value


def labels_of(cells: list[RunResult]) -> Labels:
    """The labels the study file gives these cells' values."""
    return {(k, value_key(r.cell[k])): lab for r in cells for k, lab in r.cell_labels.items() if k in r.cell}


def value_label(v: Any, width: int = 36, axis: str | None = None, labels: Labels | None = None) -> str:
    """An axis value as a short label: the study file's own label where `labels` has one, else text as it
    is, mappings as k=v pairs, other values as JSON."""
    if v is ABSENT:
        return "n/a"
    if labels and axis is not None and (axis, value_key(v)) in labels:
        return labels[axis, value_key(v)]
    if isinstance(v, dict) and v:
        v = _pairs(v)
    elif not isinstance(v, (str, list)):
        v = json.dumps(v, ensure_ascii=False, default=str)
    return short(v, width)


def _pairs(v: dict[str, Any]) -> str:
    """A mapping as k=v pairs; nested mappings in braces, lists of more than four values as a count."""

    def one(x: Any) -> str:
        if isinstance(x, str):
            return x
        if isinstance(x, dict):
            return "{" + _pairs(x) + "}"
        if isinstance(x, list) and len(x) > 4:
            return f"[{len(x)} values]"
        return json.dumps(x, ensure_ascii=False)

    return ",".join(f"{k}={one(x)}" for k, x in v.items())


def cell_line(r: RunResult) -> list[str]:
    """report.md's line naming the study a run is a cell of and the settings that make it different."""
    if not r.study:
        return []
    what = ", ".join(f"{k}={r.cell_labels.get(k) or value_label(v, 80)}" for k, v in r.cell.items())
    return [f"Cell of study **{r.study}**" + (f": {what}" if what else ""), ""]


def value_key(v: Any) -> str:
    return "\0absent" if v is ABSENT else json.dumps(v, sort_keys=True, default=str)


def axis_value(r: RunResult, axis: str) -> Any:
    return r.cell.get(axis, ABSENT)


def axes_of(cells: list[RunResult]) -> Axes:
    """axis -> its distinct values in the order the cells bring them (ABSENT last), for every key of the cells'
    `cell` with more than one value among them; keys in the order of the cells with the most keys (the study's)."""
    out: Axes = {}
    for k in dict.fromkeys(k for r in sorted(cells, key=lambda r: -len(r.cell)) for k in r.cell):
        seen: dict[str, Any] = {}
        for r in cells:
            seen.setdefault(value_key(axis_value(r, k)), axis_value(r, k))
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
