"""Recipe files named on the command line -> validated recipes, with the call's overrides."""

from __future__ import annotations

import glob
from pathlib import Path

from runner.config.recipe import LoadedRecipe
from runner.errors import RunnerError
from runner.execution.layout import check_name

MP_HELP = (
    "Load a hub model from a local folder instead: HUB_ID=PATH (repeatable; applies to model.id and "
    "model.tokenizer of every recipe that names HUB_ID)."
)
SET_HELP = (
    "Override a recipe field, e.g. --set model.id=../shared/models/x (repeatable). A value for a text "
    "field is taken as written; other values are read as YAML (numbers, true/false, lists)."
)


def expand_paths(paths: tuple[str, ...]) -> list[Path]:
    """Files, folders (their *.yaml / *.yml) and globs the shell did not expand."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
            if not found:
                raise RunnerError("folder has no .yaml/.yml recipes", file=p)
            out += found
        elif path.exists():
            out.append(path)
        elif any(ch in p for ch in "*?["):
            found = sorted(Path(x) for x in glob.glob(p))
            if not found:
                raise RunnerError("glob matches no file", file=p)
            out += found
        else:
            raise RunnerError("file not found", file=p)
    seen, unique = set(), []
    for p in out:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            unique.append(p)
    return unique


def parse_model_paths(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k or not v:
            raise RunnerError(f"--model-path {it!r}: expected HUB_ID=PATH", field="--model-path")
        out[k] = str(Path(v).expanduser().resolve())
    return out


def load_all(
    paths: tuple[str, ...], sets: tuple[str, ...], model_paths: tuple[str, ...] = (), only: str | None = None
) -> list[LoadedRecipe]:
    """Every recipe (or study cell) of the named files, checked for unique, safe names."""
    from runner.config.loading import load_recipes

    mp = parse_model_paths(model_paths)
    loaded: list[LoadedRecipe] = []
    for p in expand_paths(paths):
        loaded += load_recipes(p, list(sets), model_paths=mp)
    if only is not None:
        loaded = _select(loaded, only)
    names: dict[str, str] = {}
    for lr in loaded:
        n = check_name(lr.recipe.name, lr.path)
        if n in names:
            raise RunnerError(
                f"two recipes are named {n!r}: {names[n]} and {lr.path}; names must be unique "
                "in one call (they name the report folders)",
                field="name",
            )
        names[n] = lr.path
    return loaded


def _select(loaded: list[LoadedRecipe], pattern: str) -> list[LoadedRecipe]:
    import fnmatch

    patterns = [p.strip() for p in pattern.split(",") if p.strip()]  # names or globs, comma-separated
    chosen = [lr for lr in loaded if any(fnmatch.fnmatchcase(lr.recipe.name, p) for p in patterns)]
    if not chosen:
        raise RunnerError(
            f"--only {pattern!r} matches no recipe; recipes: "
            + ", ".join(lr.recipe.name for lr in loaded[:20])
            + (" ..." if len(loaded) > 20 else ""),
            field="--only",
        )
    return chosen
