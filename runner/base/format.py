"""Table cells and small text helpers shared by every Markdown writer."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

N_EXAMPLES_SHOWN = 3


def cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def secs(v: float | None) -> str:
    if v is None:
        return "–"
    if v >= 3600:
        return f"{v / 3600:.1f} h"
    return f"{v:,.1f} s" if v >= 10 else f"{v:.2f} s"


def table(rows: list[list[Any]], headers: list[str], optional: frozenset[str] = frozenset()) -> str:
    """A GitHub Markdown table. `optional`: columns left out when they are empty in every row."""
    cells = [[cell(c) for c in r] for r in rows]
    if optional and cells:
        shown = [
            i
            for i, h in enumerate(headers)
            if h not in optional or any(r[i] not in ("–", "") for r in cells)
        ]
        cells, headers = [[r[i] for i in shown] for r in cells], [headers[i] for i in shown]
    return tabulate(cells, headers=headers, tablefmt="github", disable_numparse=True)


def gib(v: float | None) -> str | None:
    return None if v is None else f"{v:.1f} GiB"


def diff_cell(diff: dict[str, Any]) -> str:
    """The settings that differ, as many as fit in 300 characters, then a count of the rest."""
    parts: list[str] = []
    for i, (k, v) in enumerate(diff.items()):
        item = f"{k}={short(v)}"
        if parts and sum(len(p) + 2 for p in parts) + len(item) + 2 > 300:
            return ", ".join(parts) + f", … +{len(diff) - i} more (see its report.md)"
        parts.append(item)
    return ", ".join(parts)


def short(v: Any, width: int = 36) -> str:
    """A setting's value for a table cell: lists and mappings summarized, long text cut."""
    if v is None:
        return "(unset)"
    if isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v):
        return f"[{len(v)} item{'s' if len(v) != 1 else ''}]"
    s = ",".join(map(str, v)) if isinstance(v, list) else str(v)
    return s if len(s) <= width else "…" + s[-(width - 1) :]


def brief(v: Any) -> str:
    """A value in a table or a warning: long lists (CUDA-graph sizes) cut, None as "(default)"."""
    if isinstance(v, list):
        return short(v, 48)
    return "(default)" if v is None else str(v)


def inline(s: str) -> str:
    return s.replace("`", "ˋ").replace("\n", "⏎")
