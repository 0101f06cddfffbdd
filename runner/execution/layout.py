"""The report folder's layout: the one place its file names are spelled.

    <out>/summary.md, <out>/*.png            the call's summary and charts
    <out>/<study>-pareto.png                 a study's accuracy-vs-time chart
    <out>/<name>/results.json               what the run produced (schema: schema/results.schema.json)
    <out>/<name>/samples.jsonl[.gz]         one line per example, written when the run completes
    <out>/<name>/samples.partial.jsonl      finished samples of a run in progress (resume reads it)
    <out>/<name>/engine.log                 the engine's own output
    <out>/<name>/report.md                  the recipe's report
    <out>/<name>/.runner.lock               held by the one `runner go` writing this folder
    <out>/<name>/.server.pgid               a serving run's server process group, while it runs

Every name read back from disk goes through `RunFolder.of`, which checks it like a recipe name,
so a `results.json` that says `name: ../../x` cannot make the runner write outside `--out`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from runner.errors import RunnerError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
NAME_MAX = 100
SUMMARY = "summary.md"
CHARTS = {"time": "time.png", "accuracy": "accuracy_vs_time.png", "memory": "memory.png"}
RESERVED = frozenset({SUMMARY, *CHARTS.values()})


def check_name(name: object, where: str = "") -> str:
    """A run name that is safe as one folder under --out (no separators, no `..`, not reserved)."""
    if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > NAME_MAX or name in RESERVED:
        raise RunnerError(
            f"{name!r} is not a valid run name (letters, digits, `._-`, at most {NAME_MAX} "
            f"characters, not starting with `.` or `-`, not one of {', '.join(sorted(RESERVED))})",
            file=where or None,
            field="name",
        )
    return name


class _File:
    """A file of the run folder: `folder.results` is `folder.root / "results.json"`."""

    def __init__(self, filename: str):
        self.filename = filename

    def __get__(self, folder: RunFolder | None, owner: type) -> Path:
        return folder.root / self.filename if folder is not None else Path(self.filename)


@dataclass(frozen=True)
class RunFolder:
    root: Path

    results = _File("results.json")
    samples = _File("samples.jsonl")
    samples_gz = _File("samples.jsonl.gz")
    partial = _File("samples.partial.jsonl")
    engine_log = _File("engine.log")
    report = _File("report.md")
    lock = _File(".runner.lock")
    server_pgid = _File(".server.pgid")  # a serving run's server group while it runs (the parent ends it)

    @classmethod
    def of(cls, out: Path, name: str, where: str = "") -> RunFolder:
        return cls(Path(out) / check_name(name, where))

    @property
    def name(self) -> str:
        return self.root.name


def summary_path(out: Path) -> Path:
    return Path(out) / SUMMARY


def chart_path(out: Path, chart: str) -> Path:
    return Path(out) / CHARTS[chart]


def study_chart_path(out: Path, study: str) -> Path:
    """A study's accuracy-vs-time chart: `<out>/<study>-pareto.png` (the study's name checked like a run name)."""
    return Path(out) / f"{check_name(study)}-pareto.png"


def stored_results(out: Path) -> list[Path]:
    """Every `<out>/*/results.json`, in name order."""
    return sorted(Path(out).glob("*/results.json"))
