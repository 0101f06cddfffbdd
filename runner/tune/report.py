"""The tune's report: what was tried, in what order, at what cost; the winner against the baseline; its recipe."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import yaml

from runner.base.dotted import set_dotted
from runner.base.format import secs, table
from runner.folder import check_name
from runner.report.spread import ratio_text, time_cell
from runner.results import RunResult

from .search import Cell, Decision
from .spec import TuneSpec


def tune_report_path(out: Path, name: str) -> Path:
    return Path(out) / f"{check_name(name)}-tune.md"


def settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in settings.items()) or "(as written)"


def _score(r: RunResult | None, metric: str | None) -> str:
    if r is None or r.status != "ok" or not r.scores:
        return "–"
    m = metric if metric in r.scores else next(iter(r.scores))
    return f"{m} {r.scores[m]:.3f}"


def cost_s(cells: list[Cell]) -> float:
    """The measured total time of every run of the tune (engine starts, generations, repeats); a run that failed
    before it measured one counts from its start to its end."""
    return sum(_run_s(r) for c in cells for r in (c.screen, c.full) if r is not None)


def _run_s(r: RunResult) -> float:
    if r.timings.total_s:
        return r.timings.total_s
    try:
        return max(
            0.0, (dt.datetime.fromisoformat(r.finished_at) - dt.datetime.fromisoformat(r.started_at)).total_seconds()
        )
    except ValueError:
        return 0.0


def measured_runs(cells: list[Cell]) -> int:
    """Runs as the budget counts them: each repeat of a run (a run that failed: one)."""
    return sum(max(1, len(r.repeats)) for c in cells for r in (c.screen, c.full) if r is not None)


def winner_yaml(data: dict[str, Any], settings: dict[str, Any], name: str) -> str:
    """The recipe file's own settings (without `tune:`) with the winner's values set at their dotted keys."""
    out = json.loads(json.dumps({k: v for k, v in data.items() if k != "tune"}))
    for key, value in settings.items():
        set_dotted(out, key, value)
    out["name"] = f"{name}-tuned"
    head = "# the recipe as written with the winner's settings and this call's --set overrides\n"
    return head + yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=100)


def tune_markdown(
    name: str, spec: TuneSpec, base: Cell, cells: list[Cell], decision: Decision, plan: str, recipe_yaml: str | None
) -> str:
    metric = spec.gate.metric if spec.gate else None
    rows = []
    for c in [base, *cells]:
        screen = "–" if c.screen is None or c.screen.status != "ok" else secs(c.screen.timings.generate_s)
        full = "–" if c.full is None else (time_cell(c.full) or c.full.status)
        rows.append([c.index or "base", c.name, settings_text(c.settings), screen, _score(c.screen, metric), full])
        rows[-1] += [_score(c.full, metric), c.gate or "–", secs(cost_s([c])) if c.screen or c.full else "–"]
        rows[-1].append("baseline" if c is base else c.verdict)
    head = ["#", "cell", "settings", f"screen time ({spec.screen.examples} ex.)", "screen score"]
    head += ["time on every example (95% CI)", "score", "gate against the baseline", "cost", "verdict"]
    runs = measured_runs([base, *cells])
    out = [f"# Tune: {name}", "", plan, "", f"Spent: {runs} measured runs, {secs(cost_s([base, *cells]))} in all.", ""]
    out += ["## Verdict", "", decision.words]
    if decision.winners and decision.against_baseline is not None:  # (without a winner the words say it)
        out += ["", f"Against the recipe as written ({base.name}): {ratio_text(*decision.against_baseline)}."]
    if not all(r.scores_meaningful for c in [base, *cells] for r in (c.screen, c.full) if r is not None):
        out += ["", "> Scores here are not meaningful (random weights or the fake engine): the gate is exercised, "]
        out[-1] += "not evidence."
    out += ["", "## Trajectory", "", "In the order tried: the screen (first examples, one run each), then the "]
    out[-1] += "confirmation (every example, repeats taking turns). Cost: the cell's measured total time (engine "
    out[-1] += "starts, generations, repeats)."
    out += ["", table(rows, head)]
    if recipe_yaml:
        out += ["", "## The winner's recipe", "", "```yaml", recipe_yaml.rstrip(), "```"]
    return "\n".join(out) + "\n"
