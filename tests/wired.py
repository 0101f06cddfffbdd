"""Recipes, report.md and summary.md as `runner go` loads and writes them: the core's loading and
writers with every wing's part."""

from __future__ import annotations

from pathlib import Path

from runner.config import calls
from runner.report import markdown, summary
from runner.wings import report_sections, studies, summary_sections


def load_all(paths, sets=(), model_paths=(), only=None, **kw):
    """The recipes of the named files as the CLI loads them (a study's cells through the study
    wing)."""
    return calls.load_all(paths, calls.Asked(sets, model_paths, only), studies=studies, **kw)


def report_markdown(r, samples, out: Path | None = None) -> str:
    return markdown.report_markdown(r, samples, report_sections(out))


def write_report(r, out: Path) -> Path:
    return markdown.write_report(r, out, report_sections(out))


def summary_markdown(results, baseline=None, out: Path | None = None) -> str:
    return summary.summary_markdown(summary.judged(results, baseline, out), summary_sections())


def write_summary(results, out: Path, baseline=None) -> Path:
    return summary.write_summary(results, out, baseline, summary_sections())


def a_recipe(name: str = "run", **over) -> dict:
    """A valid recipe as results.json stores it (the fake engine on the demo data), for stored
    results in tests."""
    from runner.recipe import Recipe

    d = {
        "name": name,
        "model": {"id": "m"},
        "engine": {"kind": "fake"},
        "dataset": {"format": "squad", "path": "demo.json"},
        "prompt": {"template": "jsquad.j2"},
        **over,
    }
    return Recipe.model_validate(d).canonical()
