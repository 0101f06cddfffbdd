"""What each setting of a study bought: the speed-up of changing one axis alone, over the pairs of cells
that differ only there."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from runner.reporting.format import table
from runner.reporting.results import RunResult
from runner.reporting.study_axes import ABSENT, Axes, Labels, axis_value, value_key, value_label
from runner.reporting.study_times import projected, timed, times


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
            if value_key(a.cell[k]) != value_key(b.cell[k]):
                return False
        elif axis != "variant":
            return False
    return True


def axis_effects(cells: list[RunResult], axes: Axes) -> list[Effect]:
    """For each axis, from its reference value to each other value (cells without the axis take no part).
    The reference is the baseline cell's value (a study's `baseline: true` cell), else the first value."""
    ok = [r for r in cells if timed(r)]
    base = next((r for r in cells if r.recipe.get("baseline")), None)
    out = []
    for axis, values in axes.items():
        vals = [v for v in values if v is not ABSENT]
        ref = ABSENT if base is None else axis_value(base, axis)
        if ref is not ABSENT and value_key(ref) in {value_key(v) for v in vals}:
            vals = [ref] + [v for v in vals if value_key(v) != value_key(ref)]
        at = {value_key(v): [r for r in ok if value_key(axis_value(r, axis)) == value_key(v)] for v in vals}
        for v in vals[1:]:
            pairs = tuple(
                (a, b) for a in at[value_key(vals[0])] for b in at[value_key(v)] if only_differ_in(a, b, axis)
            )
            out.append(Effect(axis, vals[0], v, pairs))
    return out


def effects_section(effects: list[Effect], labels: Labels | None = None) -> list[str]:
    if not effects:
        return []
    rows, lines = [], []
    for e in effects:
        change = f"{value_label(e.frm, axis=e.axis, labels=labels)} → {value_label(e.to, axis=e.axis, labels=labels)}"
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
        "first value (the baseline cell's, where the study has one) ÷ time with the other value, the median "
        "over the pairs of cells that differ only in "
        "that setting (above 1× the change is faster; failed cells take no part; across variants, settings "
        "only one of the two cells has count as the variant's; `~`: a projected time).",
        "",
        table(rows, ["setting", "change", "median speed-up", "pairs"]),
        "",
        *lines,
    ]
