"""A study's section of summary.md, what each knob bought: a pivot of generation times over two axes
(the study file's `report: {rows, columns}`, else the two with the most distinct values), the effect
of each axis alone (over the pairs of cells that differ only there), the fastest cell, wall time
against the cells' generation and engine starts, and the accuracy-vs-time chart. An axis: a key of
the cells' `cell` (dotted key or `variant`) with more than one value. A cell's time: its generation
time, projected for an estimate."""

from __future__ import annotations

import datetime as dt
import json
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.base.errors import RunnerError
from runner.base.files import write_text_atomic
from runner.base.format import cell, secs, short, table
from runner.folder import SUMMARY, load_results, study_chart_path, study_summary_path
from runner.recipe import GateSpec
from runner.report.markdown import cell_value, cost_figures, paragraphs
from runner.report.plots import Accuracy, accuracy_chart, pyplot
from runner.report.spread import (
    clear,
    examples,
    ratio_text,
    speedup,
    speedup_parts,
    time_cell,
    why_no_ratio,
)
from runner.report.summary import (
    Sections,
    SummaryJson,
    chart_metric,
    gates,
    in_order,
    judged,
    pick_baseline,
    stopped_by_gate,
    summary_markdown,
    write_summary_json,
)
from runner.results import RunResult

# an axis the cell's variant has not got
ABSENT: Any = type("Absent", (), {"__repr__": lambda _: "ABSENT"})()
Axes = dict[str, list[Any]]
Labels = dict[tuple[str, str], str]  # (axis, value key) -> the study file's label for that value


def value_key(v: Any) -> str:
    return "\0absent" if v is ABSENT else json.dumps(v, sort_keys=True, default=str)


def settings(r: RunResult) -> dict[str, Any]:
    """The settings a study's cell varies ({} for a run that is no study's cell)."""
    return r.cell.settings if r.cell is not None else {}


def study_of(r: RunResult) -> str | None:
    return r.cell.study if r.cell is not None else None


def axis_value(r: RunResult, axis: str) -> Any:
    return settings(r).get(axis, ABSENT)


def labels_of(cells: list[RunResult]) -> Labels:
    return {
        (k, value_key(c.settings[k])): lab
        for c in (r.cell for r in cells if r.cell is not None)
        for k, lab in c.labels.items()
        if k in c.settings
    }


def value_label(
    v: Any, width: int = 36, axis: str | None = None, labels: Labels | None = None
) -> str:
    """An axis value as a short label: the study file's own label where `labels` has one, else as
    report.md writes a cell's value (text as it is, mappings as k=v pairs, nested ones in braces,
    lists of more than four values as a count, others as JSON), cut to `width`."""
    if v is ABSENT:
        return "n/a"
    if (own := (labels or {}).get((axis, value_key(v)))) is not None:
        return own
    return short(cell_value(v), width)


def axes_of(cells: list[RunResult]) -> Axes:
    """axis -> its distinct values in the order the cells bring them (ABSENT last); keys in the
    order of the cells with the most keys (the study's)."""
    out: Axes = {}
    for k in dict.fromkeys(
        k for r in sorted(cells, key=lambda r: -len(settings(r))) for k in settings(r)
    ):
        seen: dict[str, Any] = {}
        for r in cells:  # the first of values written alike (mappings' keys in another order)
            seen.setdefault(value_key(axis_value(r, k)), axis_value(r, k))
        if len(seen) > 1:
            out[k] = sorted(seen.values(), key=lambda v: v is ABSENT)
    return out


def requested_axes(cells: list[RunResult]) -> dict[str, str | None] | None:
    """The study file's `report: {rows, columns}` as its cells carry it (`cell.axes`), if they
    do."""
    return next(
        (dict(r.cell.axes) for r in cells if r.cell is not None and r.cell.axes is not None), None
    )


def pick_axes(
    axes: Axes, requested: dict[str, str | None] | None
) -> tuple[str | None, str | None, str]:
    """(rows axis, columns axis, how they were picked): the requested ones where they vary here, the
    rest from the axes with the most distinct values (ties: the earlier axis)."""
    want = (requested or {}).get("rows"), (requested or {}).get("columns")
    rows = want[0] if want[0] in axes else None
    cols = want[1] if want[1] in axes and want[1] != rows else None
    unknown = [f"`{k}`" for k in want if k and k not in axes]
    auto = sorted(
        (k for k in axes if k not in (rows, cols)),
        key=lambda k: -sum(v is not ABSENT for v in axes[k]),
    )
    how = (
        "from the study's `report`"
        if (rows or cols)
        else "picked automatically: most distinct values"
    )
    if rows is None and auto:
        rows = auto.pop(0)
    if cols is None and auto:
        cols = auto.pop(0)
    if unknown:
        how += f"; {', '.join(unknown)} asked for by `report` but not varying here"
    return rows, cols, how


def timed(r: RunResult) -> bool:
    return r.status == "ok" and bool(r.projected_s)


def full(cells: list[RunResult]) -> list[RunResult]:
    """The timed cells that timed the most examples (a cell run with --limit in another call stands
    apart: its time is not set against theirs)."""
    ok = [r for r in cells if timed(r)]
    most = max((examples(r) for r in ok), key=lambda e: e[1], default=None)
    return [r for r in ok if examples(r) == most]


def fastest(cells: list[RunResult], stopped: Collection[str] = ()) -> RunResult | None:
    """The fastest cell that timed the most examples, leaving out the cells `stopped` by their
    gate."""
    return min(
        (r for r in full(cells) if r.name not in stopped), key=lambda r: r.projected_s, default=None
    )


def gate_stopped(cells: list[RunResult], out: Path | None) -> set[str]:
    """The cells their gate stopped against the study's baseline cell (failed, too few examples to
    tell, or not checkable): never named the study's fastest, drawn red."""
    return stopped_by_gate(gates(cells, pick_baseline(cells), out))


def time_text(r: RunResult, bold: bool = False) -> str | None:
    """`12.0 s (11.2 s–12.9 s, n=5)`, `~12.0 s` for a projection of one run, `failed`; the time in
    bold for the fastest cell."""
    if r.status != "ok":
        return "failed"
    return time_cell(r, "~" if r.estimate else "", compact=True, bold=bold)


def pivot(cells: list[RunResult], axes: Axes, rows: str | None, cols: str | None) -> str:
    """Generation time per cell: a row per value of `rows` and of the other axes, a column per value
    of `cols`."""
    lead = [k for k in axes if k == rows] + [k for k in axes if k not in (rows, cols)]
    names, best = labels_of(cells), fastest(cells)
    pos = {(k, value_key(v)): i for k, vals in axes.items() for i, v in enumerate(vals)}
    at = lambda r, k: pos[k, value_key(axis_value(r, k))]  # the index of r's value of axis k
    grid: list[tuple[tuple[int, ...], dict[int, str | None]]] = []
    for r in cells:
        key, ck = tuple(at(r, k) for k in lead), at(r, cols) if cols else 0
        if (slot := next((g for g in grid if g[0] == key and ck not in g[1]), None)) is None:
            grid.append(slot := (key, {}))
        slot[1][ck] = time_text(r, bold=r is best)
    label = lambda k, v: value_label(v, axis=k, labels=names)
    short_key = (cols or "").rsplit(".", 1)[-1]
    named = lambda lab: lab if lab.startswith(f"{short_key}-") else f"{short_key}={lab}"
    heads = [cell(named(label(cols, v))) for v in axes[cols]] if cols else ["generation time"]
    row = lambda key: [label(k, axes[k][i]) for k, i in zip(lead, key, strict=True)]
    grid.sort(key=lambda g: g[0])
    body = [row(key) + [got.get(c) for c in range(len(heads))] for key, got in grid]
    return table(body, lead + heads)


@dataclass(frozen=True)
class Effect:
    """Changing `axis` alone from `frm` to `to`: the pairs of timed cells (from, to) that differ
    only there, the geometric mean of their speed-ups (so the change back is its reciprocal), and
    whether a projected time went into it."""

    axis: str
    frm: Any
    to: Any
    pairs: tuple[tuple[RunResult, RunResult], ...]
    speedup: float | None
    approx: bool
    low: float | None  # the 95% interval of the speed-up (none from single runs)
    high: float | None


def only_differ_in(a: RunResult, b: RunResult, axis: str) -> bool:
    """Every other setting is the same. Across variants a setting only one of the cells has (the
    other's variant replaced the section that holds it) is no difference: it belongs to the
    variant."""
    sa, sb = settings(a), settings(b)
    shared, keys = sa.keys() & sb.keys(), (sa.keys() | sb.keys()) - {axis}
    return all(
        value_key(sa[k]) == value_key(sb[k]) if k in shared else axis == "variant" for k in keys
    )


def axis_effects(cells: list[RunResult], axes: Axes) -> list[Effect]:
    """For each axis, from its reference value to each other value (cells without the axis take no
    part). The reference is the baseline cell's value (a study's `baseline: true` cell), else the
    first value."""
    ok = [r for r in cells if timed(r)]
    base, out = pick_baseline(cells), []
    for axis, values in axes.items():
        vals = [v for v in values if v is not ABSENT]
        ref = ABSENT if base is None else axis_value(base, axis)
        # the baseline's own value first, where it has one of them
        if ref is not ABSENT and value_key(ref) in {value_key(v) for v in vals}:
            vals = [ref] + [v for v in vals if value_key(v) != value_key(ref)]
        at = [[r for r in ok if value_key(axis_value(r, axis)) == value_key(v)] for v in vals]
        for v, group in zip(vals[1:], at[1:]):
            pairs = tuple(
                (a, b)
                for a in at[0]
                for b in group
                if only_differ_in(a, b, axis) and why_no_ratio(a, b) is None
            )
            speedup = (
                statistics.geometric_mean([a.projected_s / b.projected_s for a, b in pairs])
                if pairs
                else None
            )
            approx = any(a.estimate or b.estimate for a, b in pairs)
            out.append(Effect(axis, vals[0], v, pairs, speedup, approx, *speedup_parts(pairs)))
    return out


def score_change(e: Effect, metric: str) -> float | None:
    """What changing the setting did to a score: the mean over the pairs of (score with the other
    value - score with the first); None where a pair lacks the score or ran with random weights."""
    pairs = [(a, b) for a, b in e.pairs if a.scores_meaningful and b.scores_meaningful]
    if not pairs or any(metric not in a.scores or metric not in b.scores for a, b in pairs):
        return None
    return statistics.fmean(b.scores[metric] - a.scores[metric] for a, b in pairs)


def effects_section(effects: list[Effect], labels: Labels | None = None) -> list[str]:
    if not effects:
        return []
    cells = [r for e in effects for pair in e.pairs for r in pair]
    metrics = list(dict.fromkeys(m for r in cells if r.scores_meaningful for m in r.scores))
    rows, lines = [], []
    for e in effects:
        change = (
            f"{value_label(e.frm, axis=e.axis, labels=labels)} → "
            f"{value_label(e.to, axis=e.axis, labels=labels)}"
        )
        approx = "~" if e.approx else ""
        speed = ratio_text(e.speedup, e.low, e.high, approx) if e.speedup is not None else None
        deltas = [score_change(e, m) for m in metrics]
        changes = [f"{round(d, 3) + 0.0:+.3f}" if d is not None else None for d in deltas]
        rows.append([e.axis, change, speed, len(e.pairs), *changes])
        if e.pairs:
            each = (f"{a.name} → {b.name} ({ratio_text(*speedup(a, b))})" for a, b in e.pairs)  # type: ignore[misc]
            lines.append(f"- {e.axis} {change}: " + ", ".join(each))
    note = (
        "Speed-up of changing one setting alone, every other setting held fixed: generation time "
        "with the first value (the baseline cell's, where the study has one) ÷ time with the other "
        "value, the geometric mean over the pairs of cells that differ only in that setting (above "
        "1× the change is faster; failed cells take no part; across variants, settings only one of "
        "the two cells has count as the variant's; `~`: a projected time), with its 95% interval "
        "(over several pairs, of their geometric mean); an interval that holds 1 is no clear "
        "difference."
    )
    if metrics:
        note += (
            " Beside it, what the change did to each score: the mean over the same pairs of (score "
            "with the other value − score with the first); cells with random weights take no part."
        )
    head = ["setting", "change", "speed-up", "pairs", *(f"{m} change" for m in metrics)]
    return [*paragraphs("### What each setting bought", note, table(rows, head)), "", *lines]


def fastest_section(
    cells: list[RunResult], metric: str | None, stopped: Collection[str] = ()
) -> list[str]:
    if (best := fastest(cells, stopped)) is None:
        why = "No cell that passed its gate has" if stopped else "No cell finished with"
        return paragraphs("### Fastest cell", f"{why} a generation time.")
    slow = max(full(cells), key=lambda r: r.projected_s)

    def vs(other: RunResult, what: str) -> str:
        if (got := speedup(other, best)) is None:
            if examples(other) != examples(best):
                return f"{what} {other.name} timed other examples ({examples(other)[1]:,})"
            return f"no ratio against {what} {other.name}: {why_no_ratio(other, best)}"
        ratio, lo, hi = got
        text = ratio_text(ratio, lo, hi, "~" if (best.estimate or other.estimate) else "")
        tied = lo is not None and lo <= 1 <= hi  # type: ignore[operator]
        how = "against" if tied else "faster than" if ratio >= 1 else "than"  # `2.00× slower`
        return f"{text} {how} {what} {other.name} ({time_text(other)})"

    base = pick_baseline(cells)
    slowest = "the slowest" + (" (the study's baseline)," if slow is base else ",")
    alone = all(r is best for r in full(cells))
    # (the slowest itself, where every faster cell was stopped by its gate)
    parts = [
        vs(slow, slowest)
        if slow is not best
        else "the only cell with a time"
        if alone
        else "the slowest cell"
    ]
    if base is best:
        parts.append("it is the study's baseline")
    elif base is not None and base is not slow:
        parts.append(
            vs(base, "the baseline,") if timed(base) else f"the baseline, {base.name}, has no time"
        )
    runner_up = min(
        (r for r in full(cells) if r is not best), key=lambda r: r.projected_s, default=None
    )
    if (
        runner_up is not None
        and (ratio := speedup(runner_up, best))
        and ratio[1] is not None
        and not clear(*ratio[1:])
    ):
        parts.append(
            f"not clearly faster than the next, {runner_up.name} ({time_text(runner_up)}: "
            f"{ratio_text(*ratio)})"
        )
    scored = metric and best.scores_meaningful and metric in best.scores
    score = f"; {metric} {best.scores[metric]:.3f}" if scored else ""
    faster = [r.name for r in full(cells) if r.name in stopped and r.projected_s < best.projected_s]  # type: ignore[operator]
    if faster:
        parts.append(f"faster, but stopped by their gate: {', '.join(faster)}")
    return paragraphs(
        "### Fastest cell", f"**{best.name}** ({time_text(best)}{score}): " + "; ".join(parts) + "."
    )


def _when(s: str) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(s)  # a trailing Z included
    except (ValueError, TypeError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def time_spent(cells: list[RunResult]) -> tuple[float | None, float | None]:
    """(wall: the first start to the last finish, running: the time at least one cell was running,
    less when the cells ran in separate calls with pauses between), in seconds."""
    spans = [(_when(r.started_at), _when(r.finished_at)) for r in cells]
    starts, ends = [a for a, _ in spans if a], [b for _, b in spans if b]
    running, reach = None, None
    for a, b in sorted((a, b) for a, b in spans if a and b):  # the union of the spans, in seconds
        running = (running or 0.0) + max(0.0, (b - max(a, reach or a)).total_seconds())
        reach = max(b, reach or b)
    return (max(ends) - min(starts)).total_seconds() if starts and ends else None, running


def spent_section(cells: list[RunResult]) -> list[str]:
    """The study's wall and running time against its generation and engine starts summed over its
    cells, its energy and cost, its cold and warm engine starts (torch.compile and CUDA graph
    capture over every engine start the engines split) and the cells that ran on another's
    engine."""
    wall, running = time_spent(cells)
    # every repeat's generation and engine start (a cell stored without repeats: its timings)
    gens = [x.generate_s for r in cells for x in r.repeats or [r.timings] if x.generate_s]
    starts = [x.load_s for r in cells for x in r.repeats or [r.timings] if x.load_s]
    busy = running or wall
    share = lambda s: f" ({s / busy:.0%} of the running time)" if busy else ""
    note = (
        "Wall time: from the first cell's start to the last cell's finish; running: the part of it "
        "in which a cell was running (less when the cells ran in separate calls). Generation and "
        "engine start: summed over the cells and their repeats (as measured: an estimate counts "
        "its partial run)."
    )
    row = [
        secs(wall),
        secs(running),
        secs(sum(gens)) + share(sum(gens)),
        secs(sum(starts)) + share(sum(starts)),
        len(starts),
        len(cells),
    ]
    heads = [
        "wall time",
        "running",
        "generation (sum)",
        "engine start (sum)",
        "engine starts",
        "cells",
    ]
    out = paragraphs("### Time spent", note, table([row], heads))
    joules = [x.energy_j for r in cells for x in r.repeats if x.energy_j is not None]
    usd = [c["usd_run"] for r in cells if (c := cost_figures(r)) and "usd_run" in c]
    if joules or usd:
        what = (
            [f"GPU energy of every measured generation {sum(joules) / 1000:,.1f} kJ"]
            if joules
            else []
        )
        what += (
            [f"the runs' cost ${sum(usd):.3g} (each run's total time x GPUs x its price)"]
            if usd
            else []
        )
        out += ["", "Summed over the cells: " + "; ".join(what) + "."]
    parts = [x.start for r in cells for x in r.repeats if x.start is not None]
    if parts:
        named = {
            "weights": "load_s",
            "compile": "compile_s",
            "CUDA graphs": "capture_s",
            "profiling, KV cache and kernel warm-up": "profile_kv_s",
            "the recipes' warm-up": "warmup_s",
            "the rest": "other_s",
        }
        sums = {w: sum(getattr(p, k) or 0.0 for p in parts) for w, k in named.items()}
        split = ", ".join(f"{w} {secs(v)}" for w, v in sums.items() if v)
        out += [
            "",
            f"Where {len(parts)} engine starts' {secs(sum(sums.values()))} went, as the engines' "
            f"logs account for them: {split}.",
        ]
    if cold := [p for p in parts if p.cold is not None]:
        compile_s = sum((p.compile_s or 0) + (p.capture_s or 0) for p in parts)
        words = (
            f"Of the engine starts, {sum(p.cold for p in cold)} compiled (cold) and "
            f"{sum(not p.cold for p in cold)} loaded the compiled graphs from the compile cache "
            f"(warm); compiling and capturing CUDA graphs took {secs(compile_s)} in all "
            "(`engine.compile_cache` keeps the cache in a folder you name, for a later call or "
            "another host)."
        )
        out += ["", words]
    if skipped := sum(bool(p.autotune_skipped) for p in parts):
        out += [
            "",
            f"{skipped} of the {len(parts)} engine starts left out FlashInfer's autotuning (an "
            "earlier start of the same configuration found nothing to tune).",
        ]
    if reused := [r for r in cells if r.timings.load_s == 0]:
        on = ", ".join(f"{r.name} (on {r.engine_of}'s)" if r.engine_of else r.name for r in reused)
        out += ["", f"Cells that ran on an engine started for another cell: {on}."]
    return out


def study_section(
    study: str,
    cells: list[RunResult],
    dest: Path | None = None,
    link: str | None = None,
    out: Path | None = None,
) -> list[str]:
    """The study's accuracy-vs-time chart drawn in `dest` (None: none), beside the summary; `link`:
    where the study's own summary is (from the call's summary); the gates read the samples in
    `out`."""
    stopped = gate_stopped(cells, out)  # never named fastest
    chart = None if dest is None else study_chart(study, cells, dest, stopped)
    cells = in_order(cells)  # the study's order (how `runner go` ran them)
    axes = axes_of(cells)
    rows, cols, how = pick_axes(axes, requested_axes(cells))
    failed = sum(r.status != "ok" for r in cells)
    head = f"{len(cells)} cells" + (f" ({failed} failed)" if failed else "")
    out = paragraphs(f"## Study {study}")
    if link:
        out += paragraphs(
            f"Every stored cell of this study, whichever call ran it: [{link}]({link})."
        )
    if axes:
        picked = f"rows: **{rows}**" + (f", columns: **{cols}**" if cols else "")
        note = (
            "Generation time per cell (`~`: projected from a partial run; fastest in bold): the "
            "geometric mean with its 95% interval and the number of repeats; a time alone is one "
            "run, with no interval."
        )
        out += paragraphs(f"{head}; {picked} ({how}). {note}", pivot(cells, axes, rows, cols))
    else:
        out += paragraphs(f"{head}; no setting varies among them.")
    out += effects_section(axis_effects(cells, axes), labels_of(cells))
    metric = chart_metric(cells)
    out += fastest_section(cells, metric, stopped) + spent_section(cells)
    if chart is not None:
        out += ["", f"![{study}: accuracy against time]({chart.name})"]
    elif metric is None:
        out += ["", "No accuracy chart: no cell of this study has meaningful scores."]
    return out


def study_groups(results: list[RunResult]) -> dict[str, list[RunResult]]:
    """study name -> its cells, in the order they come (runs without a study are left out)."""
    studies = dict.fromkeys(s for r in results if (s := study_of(r)))
    return {s: [r for r in results if study_of(r) == s] for s in studies}


def study_summary(results: list[RunResult], out: Path | None) -> list[str]:
    """summary.md's sections of the studies among `results`, each with its accuracy-vs-time chart in
    `out` and a link to the study's own summary (`write_study_summaries`)."""
    return [
        line
        for s, cells in study_groups(results).items()
        for line in study_section(s, cells, out, None if out is None else f"{s}/{SUMMARY}", out)
    ]


def write_study_summaries(
    results: list[RunResult],
    out: Path,
    baseline: str | None = None,
    gate: GateSpec | None = None,
    others: Sequence[Sections] = (),
) -> list[Path]:
    """Each study among `results` gets `<out>/<study>/summary.md`, of every cell of it stored in
    `out` (the cells a call with `--only` did not run included), in the study's order; `others`: the
    other wings' sections."""
    try:
        stored = load_results(out)
    except RunnerError:  # a damaged results.json elsewhere in --out: the cells of this call only
        stored = results
    # this call's view of a cell (a re-priced one) over the stored one
    mine = {r.name: r for r in results}
    stored = [mine.get(r.name, r) for r in stored]
    paths = []
    for study in study_groups(results):
        cells = [r for r in stored if study_of(r) == study]
        path = study_summary_path(out, study)
        path.parent.mkdir(parents=True, exist_ok=True)
        # its own chart (the call's shows the call's cells), from the cells as stored
        section = lambda rs, o, s=study, c=cells, d=path.parent: study_section(s, c, d, None, o)
        # the baseline this call's cells name, over a stored cell that claimed it before
        own = next((r.name for r in results if study_of(r) == study and r.recipe.baseline), None)
        base = baseline if any(c.name == baseline for c in cells) else own
        j = judged(cells, base, out, gate)
        title = f"Study {study}: every stored cell"
        write_text_atomic(path, summary_markdown(j, [section, *others], title))
        write_summary_json(SummaryJson.of(j, title), path.parent)
        paths.append(path)
    return paths


def study_chart(
    study: str, cells: list[RunResult], dest: Path, stopped: Collection[str]
) -> Path | None:
    """The study's accuracy-vs-time chart in `dest` (the call's --out, or the study's own summary's
    folder); None without meaningful scores, matplotlib or a safe file name. `stopped`: the cells
    their gate stopped (drawn red)."""
    try:
        pyplot()
        path = study_chart_path(dest, study)
    except (ImportError, RunnerError):
        return None
    if (metric := chart_metric(cells)) is None:
        return None
    label = lambda r: r.name.removeprefix(f"{study}-") + (" (est.)" if r.estimate else "")
    red = "; red: stopped by its gate" if stopped else ""
    title = f"{study}: {metric} against time (green: Pareto front{red})"
    return accuracy_chart(cells, Accuracy(metric, stopped), path, label=label, title=title)
