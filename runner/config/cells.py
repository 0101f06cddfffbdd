"""A study's cells: every variant x every combination of the axes it is free along, less the
excluded ones, each with its name, the settings that vary, and its recipe data (rules: study.py)."""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
from dataclasses import dataclass
from itertools import product
from typing import Any

from runner.config.keys import overlaps, set_dotted
from runner.config.recipe import NAME_PATTERN
from runner.config.study import Axis, ReportAxes, default_label, same
from runner.errors import RecipeError

MAX_CELLS = 1000
MAX_NAME = 100


@dataclass(frozen=True)
class Cell:
    name: str
    cell: dict[str, Any]  # the settings that vary (LoadedRecipe.cell)
    data: dict  # the cell's recipe data (before --set)
    variant: str | None
    origins: tuple[tuple, ...]  # YAML locations of the settings the cell's overlays set


def describe(cell: dict[str, Any], axes: list[Axis]) -> str:
    """`variant=vllm-oneshot, engine.enable_prefix_caching=true (cache)` for listings and errors."""
    by_key = {a.key: a for a in axes}
    out = []
    for k, v in cell.items():
        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        lab = by_key[k].label(v) if k in by_key else None
        shown = lab and lab != text and lab != default_label(k, v)
        out.append(f"{k}={text}" + (f" ({lab})" if shown else ""))
    return ", ".join(out)


def _excluded(match: dict, excludes: list[dict]) -> bool:
    return any(all(k in match and same(match[k], v) for k, v in e.items()) for e in excludes)


def _one(
    name: str, axes: list[Axis], variants: dict[str, dict], v: str | None, chosen: dict[str, Any]
) -> tuple[str, dict, dict]:
    """(cell name, cell settings, settings to match excludes against)."""
    overlay = variants.get(v, {}) if v is not None else {}
    match: dict[str, Any] = {}
    cell: dict[str, Any] = {}
    parts = [name]
    if v is not None:
        match["variant"] = cell["variant"] = v
        if len(variants) > 1:
            parts.append(v)
    for a in axes:
        if a.key in chosen:
            val = chosen[a.key]
            lab = a.label(val)
            if lab and len(a.values) > 1:
                parts.append(lab)
        elif a.key in overlay:  # the variant fixes this axis at its own value
            val = overlay[a.key]
        else:
            continue
        match[a.key] = val
        if len(a.values) > 1:
            cell[a.key] = val
    return "-".join(parts), cell, match


def _data(data: dict, overlay: dict, chosen: dict, cell_name: str, where: str) -> dict:
    d = copy.deepcopy(data)
    for k, val in [*overlay.items(), *chosen.items()]:
        try:
            set_dotted(d, k, copy.deepcopy(val))
        except TypeError as e:
            raise RecipeError(f"cell {cell_name!r}: cannot set {k}: {e}", file=where, field=k) from None
    d["name"] = cell_name
    return d


def expand(
    name: str, data: dict, axes: list[Axis], variants: dict[str, dict], excludes: list[dict], where: str
) -> list[Cell]:
    vnames: list[str | None] = list(variants) or [None]
    total = len(vnames) * math.prod(len(a.values) for a in axes)
    if total > MAX_CELLS:
        raise RecipeError(
            f"the study makes {total:,} cells before `exclude`; at most {MAX_CELLS:,}",
            file=where,
            field="matrix",
            hint="fewer axes or values, or split the study into files",
        )
    cells: list[Cell] = []
    for v in vnames:
        overlay = variants.get(v, {}) if v is not None else {}
        free = [a for a in axes if not any(overlaps(a.key, k) for k in overlay)]
        origins = tuple(("variants", v, k) for k in overlay) + tuple(("matrix", a.key) for a in free)
        for combo in product(*(a.values for a in free)):
            chosen = dict(zip((a.key for a in free), combo, strict=True))
            cell_name, cell, match = _one(name, axes, variants, v, chosen)
            if _excluded(match, excludes):
                continue
            cells.append(Cell(cell_name, cell, _data(data, overlay, chosen, cell_name, where), v, origins))
    if not cells:
        raise RecipeError("`exclude` drops every cell of the study", file=where, field="exclude")
    _check_names(cells, axes, where)
    return cells


def _check_names(cells: list[Cell], axes: list[Axis], where: str) -> None:
    seen: dict[str, Cell] = {}
    for c in cells:
        if len(c.name) > MAX_NAME or not re.match(NAME_PATTERN, c.name):
            raise RecipeError(
                f"cell name {c.name!r} ({describe(c.cell, axes)}) is not a valid recipe name "
                f"(letters, digits, ._-, at most {MAX_NAME} characters)",
                file=where,
                field="name",
                hint="shorten the study's name, or give the axis values short labels: `matrix: {key: {label: value}}`",
            )
        if c.name in seen:
            raise RecipeError(
                f"two cells are named {c.name!r}: ({describe(seen[c.name].cell, axes)}) and ({describe(c.cell, axes)})",
                file=where,
                field="matrix",
                hint="give the axis values distinct labels: `matrix: {key: {label: value}}` "
                "(an empty label leaves a value out of names)",
            )
        seen[c.name] = c


def _resolve_value(axis: Axis, v: Any) -> Any:
    for w in axis.values:
        if same(w, v):
            return w
    for w, lab in zip(axis.values, axis.labels, strict=True):
        if lab and lab == v:
            return w
    return KeyError


def parse_excludes(exclude: Any, axes: list[Axis], variants: dict[str, dict], where: str) -> list[dict]:
    if exclude is None:
        return []
    if not isinstance(exclude, list):
        raise RecipeError("expected a list of mappings (axis key or `variant` -> value)", file=where, field="exclude")
    by_key = {a.key: a for a in axes}
    if variants:
        by_key["variant"] = Axis("variant", tuple(variants), tuple(variants))
    out = []
    for i, entry in enumerate(exclude):
        what = f"exclude[{i}]"
        if not isinstance(entry, dict) or not entry:
            raise RecipeError(f"expected a mapping of axis key -> value, got {entry!r}", file=where, field=what)
        norm = {}
        for k, v in entry.items():
            axis = by_key.get(k)
            if axis is None:
                close = difflib.get_close_matches(str(k), list(by_key), n=1)
                raise RecipeError(
                    f"{k!r} is not an axis of this study"
                    + (f"; did you mean {close[0]!r}?" if close else ".")
                    + " Axes: "
                    + ", ".join(by_key),
                    file=where,
                    field=what,
                )
            value = _resolve_value(axis, v)
            if value is KeyError:
                shown = ", ".join(
                    repr(w) + (f" ({lab})" if lab and lab != w else "")
                    for w, lab in zip(axis.values, axis.labels, strict=True)
                )
                raise RecipeError(f"{k}: {v!r} is none of the axis's values: {shown}", file=where, field=what)
            norm[k] = value
        out.append(norm)
    return out


def check_report(report: Any, axes: list[Axis], variants: dict, where: str) -> ReportAxes | None:
    if report is None:
        return None
    if not isinstance(report, dict) or set(report) - {"rows", "columns"}:
        raise RecipeError("expected `{rows: AXIS, columns: AXIS}`", file=where, field="report")
    names = [a.key for a in axes] + (["variant"] if variants else [])
    for k, v in report.items():
        if v is not None and v not in names:
            close = difflib.get_close_matches(str(v), names, n=1)
            raise RecipeError(
                f"{v!r} is not an axis of this study"
                + (f"; did you mean {close[0]!r}?" if close else ".")
                + " Axes: "
                + (", ".join(names) or "none"),
                file=where,
                field=f"report.{k}",
            )
    return ReportAxes(**report)
