"""runner: a declarative experiment runner for LLM inference speed-ups.

The public API (each function imports what it needs when called, so `import runner` stays light):

    cells = runner.load_recipes("recipes/jsquad-study.yaml")    # a recipe file: one, a study: its cells
    result = runner.run_recipe(cells[0], out="reports", limit=8)  # RunResult; results.json, report.md in out
    results = runner.read_results("reports")                     # every stored results.json, checked
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runner.base import __version__

if TYPE_CHECKING:
    from runner.recipe import LoadedRecipe
    from runner.results import RunResult

__all__ = ["__version__", "load_recipe", "load_recipes", "read_results", "run_recipe"]


def load_recipes(path: str | Path, overrides: list[str] | None = None) -> list[LoadedRecipe]:
    """Every experiment a recipe file holds, validated: 1 for a recipe, one per cell of a study, 0 for a
    base-only file. `overrides`: `--set`-style `key.path=value` items. Raises RunnerError for bad input."""
    from runner.study.load import load_recipes as load

    return load(path, overrides)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> LoadedRecipe:
    """The one experiment a recipe file holds (a study or a base-only file is a RunnerError)."""
    from runner.study.load import load_recipe as load

    return load(path, overrides)


def run_recipe(
    recipe: LoadedRecipe | str | Path, out: str | Path = "reports", *, limit: int | None = None, isolated: bool = True
) -> RunResult:
    """Check and run one recipe as `runner go` does (in its own process unless `isolated=False`), write its
    results.json, samples.jsonl and report.md under `out/<name>/`, and return its RunResult. A run that fails
    returns a failed RunResult; bad input raises RunnerError before anything runs."""
    from runner.report.markdown import write_report
    from runner.run.isolate import run_isolated
    from runner.run.job import Job, RunOptions, make_unit
    from runner.run.loop import run_job

    lr = recipe if not isinstance(recipe, (str, Path)) else load_recipe(recipe)
    opts = RunOptions(out=Path(out), limit=limit, progress=False)
    job = Job(units=(make_unit(lr, opts),), options=opts)
    result = (run_isolated(job) if isolated else run_job(job))[0]
    write_report(result, opts.out)
    return result


def read_results(out: str | Path) -> list[RunResult]:
    """Every `<out>/*/results.json`, each checked against the schema (RunnerError for a damaged one)."""
    from runner.folder import load_results

    return load_results(Path(out))
