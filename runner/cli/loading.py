"""Recipe files named on the command line -> validated recipes, with the call's overrides."""

from __future__ import annotations

import fnmatch
import glob
from pathlib import Path

from runner.base.errors import RunnerError
from runner.folder import check_name
from runner.recipe import LoadedRecipe

MP_HELP = (
    "Load a hub model from a local folder instead: HUB_ID=PATH (repeatable; applies to model.id and "
    "model.tokenizer of every recipe that names HUB_ID)."
)
SET_HELP = (
    "Override a recipe field, e.g. --set model.id=../shared/models/x (repeatable). A value for a text "
    "field is taken as written; other values are read as YAML (numbers, true/false, lists)."
)
ONLY_HELP = "only the recipes or study cells whose name matches (a name or glob; several separated by commas)."


def expand_paths(paths: tuple[str, ...]) -> list[Path]:
    """Files, folders (their *.yaml / *.yml) and globs the shell did not expand."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found, why = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]), "folder has no .yaml/.yml recipes"
        elif path.exists():
            found, why = [path], ""
        elif any(ch in p for ch in "*?["):
            found, why = sorted(Path(x) for x in glob.glob(p)), "glob matches no file"
        else:
            found, why = [], "file not found"
        if not found:
            raise RunnerError(why, file=p)
        out += found
    unique: dict[Path, Path] = {}  # the first of the names of one file
    for p in out:
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def parse_model_paths(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k or not v:
            raise RunnerError(f"--model-path {it!r}: expected HUB_ID=PATH", field="--model-path")
        out[k] = str(Path(v).expanduser().resolve())
    return out


def load_all(
    paths: tuple[str, ...],
    sets: tuple[str, ...],
    model_paths: tuple[str, ...] = (),
    only: str | None = None,
    none_ok: bool = False,
) -> list[LoadedRecipe]:
    """Every recipe (or study cell) of the named files, checked for unique, safe names (`none_ok`: --only may match
    none of these files' recipes)."""
    from runner.study.load import load_recipes

    mp = parse_model_paths(model_paths)
    patterns = [p.strip() for p in (only or "").split(",") if p.strip()]
    keep = (lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)) if only is not None else None
    loaded: list[LoadedRecipe] = []
    files = expand_paths(paths)
    for p in files:  # with --only, the recipes it leaves out are not validated (nor checked against --set)
        loaded += load_recipes(p, list(sets), model_paths=mp, keep=keep)
    if only is not None and not loaded and not none_ok:
        every = [lr.recipe.name for p in files for lr in load_recipes(p, [], model_paths=mp)]
        names = ", ".join(every[:20]) + (" ..." if len(every) > 20 else "")
        raise RunnerError(f"--only {only!r} matches no recipe; recipes: {names}", field="--only")
    names: dict[str, str] = {}
    for lr in loaded:
        n = check_name(lr.recipe.name, lr.path)
        if n in names:
            why = f"two recipes are named {n!r}: {names[n]} and {lr.path}; names must be unique in one call"
            raise RunnerError(why + " (they name the report folders)", field="name")
        names[n] = lr.path
    return loaded
