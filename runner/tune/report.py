"""The tune's report: what was tried, in what order, at what cost; the winner against the baseline;
its recipe."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runner.base.dotted import set_dotted
from runner.base.format import secs, table
from runner.report.markdown import cost_figures, paragraphs
from runner.report.spread import clear, ratio_text, time_cell
from runner.report.summary import Time
from runner.results import RunResult

from .search import Cell, Decision
from .spec import TuneSpec


def settings_text(settings: dict[str, Any], labels: dict[str, str]) -> str:
    """`key=value, ...`; a labelled value (an axis written label -> value) by its label."""
    shown = (
        labels[k] if k in labels else json.dumps(v, ensure_ascii=False) for k, v in settings.items()
    )
    return ", ".join(f"{k}={v}" for k, v in zip(settings, shown)) or "(as written)"


def _score(r: RunResult | None, metric: str | None) -> str:
    if r is None or r.status != "ok" or not r.scores:
        return "–"
    m = metric if metric in r.scores else next(iter(r.scores))
    return f"{m} {r.scores[m]:.3f}"


def cost_s(cells: list[Cell]) -> float:
    """The measured total time of every run of the tune (engine starts, generations, repeats); a run
    that failed before it measured one counts from its start to its end."""
    return sum(_run_s(r) for c in cells for r in (c.screen, c.full) if r is not None)


def _run_s(r: RunResult) -> float:
    if r.timings.total_s:
        return r.timings.total_s
    try:
        return max(
            0.0,
            (
                dt.datetime.fromisoformat(r.finished_at) - dt.datetime.fromisoformat(r.started_at)
            ).total_seconds(),
        )
    except ValueError:
        return 0.0


def run_s_at(screen: RunResult | None, n: int | None = None) -> float | None:
    """What one run of `screen`'s recipe costs on `n` examples (None: the screen's own), from the
    screen: its measured total time with the generation scaled to n; None without a screen that
    finished."""
    if screen is None or screen.status != "ok" or not screen.n_samples:
        return None
    gen = screen.timings.generate_s or 0.0
    return _run_s(screen) + gen * ((n or screen.n_samples) / screen.n_samples - 1)


def confirm_examples(screen: RunResult | None) -> int | None:
    """The examples a confirmation runs: the dataset's, or the recipe's `dataset.limit` of them, or
    its `estimate` of those (a sample, the rest projected)."""
    if screen is None:
        return None
    n = min(filter(None, (screen.n_dataset, screen.recipe.dataset.limit)), default=None)
    return min(n, est) if n and (est := screen.recipe.estimate) else n


def confirm_s(screen: RunResult | None, spec: TuneSpec, confirmed: int) -> float:
    """The confirmation's projected time: the recipe as written, the confirmed candidates and the
    hand-written cells of `compare`, `confirm.repeat` runs each on every example, each as long as
    the baseline's screen scaled to the examples the confirmation runs (0 without a finished
    screen)."""
    one = run_s_at(screen, confirm_examples(screen))
    return 0.0 if one is None else one * (1 + confirmed + len(spec.compare)) * spec.confirm.repeat


def winner_yaml(data: dict[str, Any], settings: dict[str, Any], name: str) -> str:
    """The recipe file's own settings (without `tune:`) with the winner's values set at their dotted
    keys."""
    out = json.loads(json.dumps({k: v for k, v in data.items() if k != "tune"}))
    for key, value in settings.items():
        set_dotted(out, key, value)
    out["name"] = f"{name}-tuned"
    head = "# the recipe as written with the winner's settings and this call's --set overrides\n"
    return head + yaml.dump(out, Dumper=_FlowLists, sort_keys=False, allow_unicode=True, width=100)


class _FlowLists(yaml.SafeDumper):
    """Lists of plain values on one line (`[1, 2, 4]`), everything else in block style."""

    def represent_list(self, data):  # type: ignore[no-untyped-def]
        flow = all(isinstance(x, (int, float, str, bool)) or x is None for x in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_FlowLists.add_representer(list, _FlowLists.represent_list)


def hand_words(pick: Cell, base: Cell, hand: Cell, ratio: tuple | None, tied: bool = False) -> str:
    """The tune's pick against the fastest hand-written cell, in one sentence (`tied`: the pick is
    the fastest of winners within each other's noise)."""
    who = (
        f"the recipe as written (**{base.name}**: no winner)"
        if pick is base
        else f"the fastest of the tied winners, **{pick.name}**,"
        if tied
        else f"the winner **{pick.name}**"
    )
    head = (
        f"Against the fastest hand-written cell, **{hand.name}** "
        f"({time_cell(hand.full) if hand.full else '–'}): "
    )
    if ratio is None:
        return head + f"{who} has no time to compare."
    verdict = (
        "as fast within the noise"
        if not clear(ratio[1], ratio[2])
        else "clearly faster"
        if ratio[0] > 1
        else "clearly slower"
    )
    return head + f"{who} is {ratio_text(*ratio)}: {verdict}."


def _front_section(ran: Ran, metric: str | None) -> list[str]:
    """The confirmed cells no other beats on time, the gate's score and dollars at once, with their
    intervals."""
    base, hand, decision = ran.base, ran.hand, ran.decision
    if not decision.front:
        return []
    rows = []
    for c in sorted(decision.front, key=lambda c: c.full.timings.generate_s or 0):  # type: ignore[union-attr]
        r = c.full
        what = (
            "the recipe as written"
            if c is base
            else "hand-written cell"
            if c in hand
            else settings_text(c.settings, c.labels)
        )
        usd = (cost_figures(r) or {}).get("usd_run")  # type: ignore[arg-type]
        gate = "(the baseline)" if c is base else c.gate or "–"
        win = "winner" if c in decision.winners else c.verdict if c is not base else "baseline"
        rows.append(
            [
                c.name,
                what,
                time_cell(r),
                _score(r, metric),
                gate,
                f"${usd:.3g}" if usd else None,
                win,
            ]
        )
    head = [
        "cell",
        "settings",
        "time on every example (95% CI)",
        "score",
        "gate against the baseline (95% CI)",
        "$ for the run",
        "verdict",
    ]
    what = (
        "generation time"
        + (f", {metric}" if metric else "")
        + ", and dollars where every cell is priced"
    )
    note = (
        f"The confirmed cells (and the recipe as written) that no other beats on {what} at "
        "once, by their point estimates. The winner is picked among the tune's own candidates "
        "(the fastest that passed the gate and is clearly faster than the recipe as written), so "
        "a hand-written cell can stand here in its place."
    )
    out = paragraphs("## The front", note, table(rows, head, frozenset({"$ for the run"})))
    return out + (["", f"![front]({ran.chart})"] if ran.chart else [])


@dataclass(frozen=True)
class Ran:
    """What a tune ran and came to: the baseline, every candidate, the hand-written cells, the
    decision, the pick against the fastest hand-written cell in words, the winner's recipe, the
    front chart; the report, the decision in words and whether a run failed."""

    base: Cell
    cells: list[Cell]
    hand: list[Cell]
    decision: Decision
    versus: str | None
    recipe_yaml: str | None
    chart: str | None
    report: Path
    words: str
    failed: bool

    def as_json(self) -> dict[str, Any]:
        """`runner tune --json`: the decision, the winners (fastest first), the pick against the
        recipe as written, the front, and every cell with its screen time, its time on every
        example (`Time`), its gate and verdict."""
        d, ratio = self.decision, self.decision.against_baseline
        time = lambda r: r and (t := Time.of(r)) and t.model_dump()  # noqa: E731
        cells = [
            {
                "name": c.name,
                "settings": c.settings,
                "screen_s": c.screen and c.screen.timings.generate_s,
                "time": time(c.full),
                "gate": c.gate or None,
                "passed": c.passed,
                "verdict": "baseline" if c is self.base else c.verdict,
            }
            for c in [self.base, *self.cells, *self.hand]
        ]
        return {
            "report": str(self.report),
            "failed": self.failed,
            "words": self.words.replace("**", ""),
            "winners": [c.name for c in d.winners],
            "against_baseline": ratio and dict(zip(("ratio", "lo", "hi"), ratio)),
            "front": [c.name for c in d.front],
            "recipe": self.recipe_yaml,
            "cells": cells,
        }


def tune_markdown(name: str, spec: TuneSpec, plan: str, ran: Ran) -> str:
    base, hand, decision = ran.base, ran.hand, ran.decision
    metric = spec.gate.metric if spec.gate else None
    every = [base, *ran.cells, *hand]
    rows = []
    for c in every:
        screen = (
            "–"
            if c.screen is None or c.screen.status != "ok"
            else secs(c.screen.timings.generate_s)
        )
        full = "–" if c.full is None else (time_cell(c.full) or c.full.status)
        what = "hand-written cell" if c in hand else settings_text(c.settings, c.labels)
        cost = secs(cost_s([c])) if c.screen or c.full else "–"
        rows.append(
            [
                "base" if c is base else "hand" if c in hand else c.index,
                c.name,
                what,
                screen,
                _score(c.screen, metric),
                full,
                _score(c.full, metric),
                c.gate or "–",
                cost,
                "baseline" if c is base else c.verdict,
            ]
        )
    head = [
        "#",
        "cell",
        "settings",
        f"screen time ({spec.screen.examples} ex.)",
        "screen score",
        "time on every example (95% CI)",
        "score",
        "gate against the baseline",
        "cost",
        "verdict",
    ]
    # runs as the budget counts them: each repeat of a run (a run that failed: one)
    runs = sum(max(1, len(r.repeats)) for c in every for r in (c.screen, c.full) if r is not None)
    spent = f"Spent: {runs} measured runs, {secs(cost_s(every))} in all."
    out = [f"# Tune: {name}", *paragraphs(plan, spent, "## Verdict", decision.words)]
    # (without a winner the words say it)
    if decision.winners and decision.against_baseline is not None:
        out += [
            "",
            f"Against the recipe as written ({base.name}): "
            f"{ratio_text(*decision.against_baseline)}{decision.level}.",
        ]
    if ran.versus:
        out += ["", ran.versus]
    out += _front_section(ran, metric)
    if not all(r.scores_meaningful for c in every for r in (c.screen, c.full) if r is not None):
        out += [
            "",
            "> Scores here are not meaningful (random weights or the fake engine): the gate is "
            "exercised, not evidence.",
        ]
    with_hand = ", the study's hand-written cells with them" if hand else ""
    out += paragraphs(
        "## Trajectory",
        "In the order tried: the screen (first examples, one run each), then the confirmation "
        f"(every example, repeats taking turns{with_hand}). Cost: the cell's measured total time "
        "(engine starts, generations, repeats).",
        table(rows, head),
    )
    if ran.recipe_yaml:
        title = (
            "The winner's recipe" if len(decision.winners) == 1 else "The fastest winner's recipe"
        )
        out += ["", f"## {title}", "", "```yaml", ran.recipe_yaml.rstrip(), "```"]
    return "\n".join(out) + "\n"
