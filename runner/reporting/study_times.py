"""A study's times: each cell's generation time (projected for an estimate), speed-ups, and the time the
whole study took (wall time against the cells' generation and engine starts)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from runner.reporting.format import secs, table
from runner.reporting.results import RunResult

REUSED = re.compile(r"ran on the engine started for ([A-Za-z0-9][A-Za-z0-9._-]*)")


def projected(r: RunResult) -> float | None:
    """Generation time, projected to the full dataset for an estimate."""
    return r.estimate.projected_s if r.estimate else r.timings.generate_s


def timed(r: RunResult) -> bool:
    return r.status == "ok" and bool(projected(r))


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


def _when(s: str) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Spent:
    """A study's time: wall (first start to last finish), running (the time at least one cell was running:
    less than the wall time when the cells ran in separate calls with pauses between), generation and
    engine start summed over its cells."""

    wall_s: float | None
    running_s: float | None
    generate_s: float
    load_s: float
    starts: int
    reused: tuple[tuple[str, str | None], ...]  # (cell, the cell whose engine it ran on)


def time_spent(cells: list[RunResult]) -> Spent:
    times = [(_when(r.started_at), _when(r.finished_at)) for r in cells]
    starts, ends = [a for a, _ in times if a], [b for _, b in times if b]
    wall = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    spans = sorted((a, b) for a, b in times if a and b)
    reused = tuple(
        (r.name, next((m.group(1) for n in r.notes if (m := REUSED.search(n))), None))
        for r in cells
        if r.timings.load_s == 0
    )
    return Spent(
        wall,
        _union_s(spans) if spans else None,
        sum(r.timings.generate_s or 0 for r in cells),
        sum(r.timings.load_s or 0 for r in cells),
        sum(1 for r in cells if (r.timings.load_s or 0) > 0),
        reused,
    )


def _union_s(spans: list[tuple[dt.datetime, dt.datetime]]) -> float:
    """Seconds covered by the union of sorted [start, end] intervals."""
    total, (cur_a, cur_b) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > cur_b:
            total += (cur_b - cur_a).total_seconds()
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    return total + (cur_b - cur_a).total_seconds()


def spent_section(cells: list[RunResult]) -> list[str]:
    s = time_spent(cells)
    busy = s.running_s or s.wall_s
    share = f" ({s.generate_s / busy:.0%} of the running time)" if busy else ""
    out = [
        "",
        "### Time spent",
        "",
        "Wall time: from the first cell's start to the last cell's finish; running: the part of it in which "
        "a cell was running (less when the cells ran in separate calls). Generation and engine start: "
        "summed over the cells (as measured: an estimate counts its partial run).",
        "",
        table(
            [[secs(s.wall_s), secs(s.running_s), secs(s.generate_s) + share, secs(s.load_s), s.starts, len(cells)]],
            ["wall time", "running", "generation (sum)", "engine start (sum)", "engine starts", "cells"],
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
