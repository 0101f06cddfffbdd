"""The public API, `runner.<name>` (runner/__init__.py hands these out; each function imports what
it needs when called, so `import runner` stays light):

    cells = runner.load_recipes("recipes/jsquad-study.yaml")    # a recipe file: one, a study: its
    cells result = runner.run_recipe(cells[0], out="reports", limit=8)  # RunResult; results.json,
    report.md in out results = runner.read_results("reports")                     # every stored
    results.json, checked
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.recipe import LoadedRecipe
    from runner.results import RunResult

__all__ = ["load_recipe", "load_recipes", "read_results", "run_recipe"]


def load_recipes(
    path: str | Path,
    overrides: list[str] | None = None,
    *,
    model_paths: dict[str, str] | None = None,
) -> list[LoadedRecipe]:
    """Every experiment a recipe file holds, validated: 1 for a recipe, one per cell of a study, 0
    for a base-only file. `overrides`: `--set`-style `key.path=value` items; `model_paths`: hub id
    -> local folder (`--model-path`). Raises RunnerError for bad input."""
    from runner.base.errors import RunnerError
    from runner.config.loading import load_recipes as load
    from runner.wings import studies

    if isinstance(overrides, str):  # not read letter by letter
        why = f"is the string {overrides!r}; give a list of `key.path=value` items"
        raise RunnerError(why, field="overrides", hint=f"overrides=[{overrides!r}]")
    return load(path, overrides, model_paths=model_paths, studies=studies)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> LoadedRecipe:
    """The one experiment a recipe file holds (a study or a base-only file is a RunnerError)."""
    from runner.base.errors import RecipeError

    loaded = load_recipes(path, overrides)
    if not loaded:
        msg = (
            "holds shared settings for other files' `base:` (abstract: true); it is not an "
            "experiment"
        )
        raise RecipeError(msg, file=str(path))
    if loaded[0].cell is not None:
        msg = (
            f"is a study of {len(loaded)} experiments "
            f"({', '.join(c.recipe.name for c in loaded)}); "
        )
        raise RecipeError(msg + "load it with load_recipes", file=str(path))
    return loaded[0]


def run_recipe(
    recipe: LoadedRecipe | str | Path,
    out: str | Path = "reports",
    *,
    limit: int | None = None,
    isolated: bool = True,
    force: bool = False,
) -> RunResult:
    """Check and run one recipe as `runner go` does, through the same orchestrator
    (`runner.orchestrate`): in its own process unless `isolated=False`; its folder `out/<name>/`
    locked (a second writer: RunnerError); an unchanged recipe whose results are complete there is
    not run again (its stored RunResult comes back; `force` reruns); what another run left there is
    set aside in `out/<name>/replaced/`, never overwritten. Writes results.json, samples.jsonl and
    report.md under `out/<name>/` and `out/summary.md`, and returns the RunResult. `limit`: None
    (every example) or the first N examples. A run that fails returns a failed RunResult; bad input
    raises RunnerError before anything runs; Ctrl-C raises `runner.orchestrate.Interrupted` (a
    KeyboardInterrupt) after the summary is written. Progress goes to the `runner` logger (INFO)."""
    from runner.base.errors import RunnerError
    from runner.orchestrate import Executor, new_call, run_loaded
    from runner.recipe import LoadedRecipe
    from runner.run.job import RunOptions
    from runner.wings import call_wings  # the wings' part of the call, as for `runner go`

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        why = (
            f"is {limit!r}; give None (every example) or a positive whole number (the first N "
            "examples)"
        )
        raise RunnerError(why, field="limit")
    if not isinstance(out, (str, os.PathLike)):
        raise RunnerError(f"is {out!r}, not a path; give the reports' folder", field="out")
    if not str(out).strip():
        raise RunnerError("is empty; give a folder for the reports", field="out")
    if isinstance(recipe, (str, Path)):
        recipe = load_recipe(recipe)
    elif not isinstance(recipe, LoadedRecipe):
        hint = "pass the recipe file's path, or the recipe runner.load_recipe(path) returns"
        raise RunnerError(f"is a {type(recipe).__name__}, not a recipe", field="recipe", hint=hint)
    ex = Executor(in_process=not isolated)
    ex.check_recipes([recipe])
    opts = RunOptions(Path(out), limit, progress=False, call=new_call(), force=force)
    [result] = run_loaded([recipe], opts, ex, wings=call_wings(), say=_log)
    return result


def _log(text: str, to_stderr: bool) -> None:
    """The orchestrator's messages, for a script: the `runner` logger, a warning where the text is
    one or a recipe failed (a script logging at WARNING sees it)."""
    import logging

    bad = text.startswith(("WARNING", "FAILED"))
    logging.getLogger("runner").log(logging.WARNING if bad else logging.INFO, text)


def read_results(out: str | Path) -> list[RunResult]:
    """Every `<out>/*/results.json`, each checked against the schema (RunnerError for a damaged one,
    and for an `out` that is not a folder; a folder with no results gives [])."""
    from runner.base.errors import RunnerError
    from runner.folder import load_results

    path = Path(out)
    if not path.is_dir():
        why = "is not a folder" if path.exists() else "does not exist"
        raise RunnerError(
            f"{why}; give the folder `runner go --out` wrote (default: reports)", file=str(out)
        )
    return load_results(path)
