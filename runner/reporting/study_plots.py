"""A study's chart for summary.md: its cells' score against generation time, the Pareto front marked.
The file is `<out>/<study>-pareto.png` (runner/execution/layout.py spells it)."""

from __future__ import annotations

from pathlib import Path

from runner.errors import RunnerError
from runner.execution.layout import study_chart_path
from runner.reporting.plots import accuracy_chart, pyplot
from runner.reporting.results import RunResult
from runner.reporting.study import chart_metric, study_groups


def point_label(r: RunResult) -> str:
    """The cell's name without its study's prefix (the chart's title names the study); `(est.)` for estimates."""
    name = r.name
    if r.study and name.startswith(f"{r.study}-"):
        name = name[len(r.study) + 1 :]
    return name + (" (est.)" if r.estimate else "")


def study_chart(study: str, cells: list[RunResult], out: Path) -> Path | None:
    """The study's accuracy-vs-time chart; None without a scored cell or when the study's name is no file name."""
    metric = chart_metric(cells)
    if metric is None:
        return None
    try:
        path = study_chart_path(out, study)
    except RunnerError:
        return None
    return accuracy_chart(
        cells, metric, path, label=point_label, title=f"{study}: {metric} against time (green: Pareto front)"
    )


def write_study_charts(results: list[RunResult], out: Path) -> dict[str, Path]:
    """study name -> its chart, for each study among `results` that has cells with meaningful scores."""
    try:
        pyplot()
    except ImportError:
        return {}
    charts = {}
    for study, cells in study_groups(results).items():
        path = study_chart(study, cells, out)
        if path is not None:
            charts[study] = path
    return charts
