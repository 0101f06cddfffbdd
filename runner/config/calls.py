"""The recipe files one call names (the command line's paths, globs and folders) -> validated
recipes, with the call's overrides and --model-path mappings, checked for unique names."""

from __future__ import annotations

import difflib
import fnmatch
import glob
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import RunnerError
from runner.config.loading import Studies, load_recipes
from runner.config.overrides import parse_set
from runner.engines.hf import looks_local
from runner.folder import check_name
from runner.recipe import LoadedRecipe


def expand_paths(paths: tuple[str, ...]) -> list[Path]:
    """Files, folders (their *.yaml / *.yml) and globs the shell did not expand."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found, why = (
                sorted([*path.glob("*.yaml"), *path.glob("*.yml")]),
                "folder has no .yaml/.yml recipes",
            )
        elif path.exists():
            found, why = [path], ""
        elif glob.has_magic(p):
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


@dataclass(frozen=True)
class Asked:
    """What one call asks of every recipe it loads: its --set items, --model-path mappings
    (HUB_ID=PATH, as typed) and --only pattern (None: every recipe)."""

    sets: tuple[str, ...]
    model_paths: tuple[str, ...]
    only: str | None

    def __post_init__(self) -> None:
        parse_set(list(self.sets))  # `--set key value` (no '='): said so before `value` is a path


def load_all(
    paths: tuple[str, ...],
    asked: Asked,
    none_ok: bool = False,
    unused_ok: bool = False,
    *,
    studies: Studies | None = None,
) -> list[LoadedRecipe]:
    """Every recipe (or study cell) of the named files, checked for unique, safe names (`none_ok`:
    --only may match none of these files' recipes) and for --model-path mappings that map nothing
    (`unused_ok`: the caller checks them over several calls, see `check_model_paths`); `studies`
    expands a study file's cells (runner/wings.py's)."""
    only, mp = asked.only, parse_model_paths(asked.model_paths)
    keep = (
        None
        if only is None
        else lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns(only))
    )
    files = expand_paths(paths)
    # with --only, the recipes it leaves out are not validated (nor checked against --set)
    loaded = [
        lr
        for p in files
        for lr in load_recipes(p, list(asked.sets), model_paths=mp, keep=keep, studies=studies)
    ]
    if (
        only is not None
        and not none_ok
        and (bad := unmatched(only, [lr.recipe.name for lr in loaded]))
    ):
        every = [
            lr.recipe.name
            for p in files
            for lr in load_recipes(p, [], model_paths=mp, studies=studies)
        ]
        names = ", ".join(every[:20]) + (" ..." if len(every) > 20 else "")
        what = "" if not loaded else f": {', '.join(map(repr, bad))}"
        raise RunnerError(
            f"--only {only!r}{what} matches no recipe; recipes: {names}", field="--only"
        )
    if only is None and not loaded and not none_ok:
        raise RunnerError(
            f"no recipe to run: {', '.join(map(str, files))} "
            f"{'holds' if len(files) == 1 else 'hold'} shared settings only (abstract: true)",
            field="abstract",
            hint="run a recipe file that names it in `base:`",
        )
    names: dict[str, str] = {}
    for lr in loaded:
        n = check_name(lr.recipe.name, lr.path)
        if n in names:
            why = f"two recipes are named {n!r}: {names[n]} and {lr.path}; names must be unique in"
            raise RunnerError(why + " one call (they name the report folders)", field="name")
        names[n] = lr.path
    if not unused_ok and (only is None or loaded):
        # a mapping for a recipe --only leaves out is no typo: one command line serves every cell
        every = None if only is None else every_recipe(paths, asked, studies)
        check_model_paths(asked.model_paths, loaded, every)
    return loaded


def unmatched(only: str, names: list[str]) -> list[str]:
    """The patterns of `--only` (comma-separated) that match none of `names`."""
    return [p for p in patterns(only) if not any(fnmatch.fnmatchcase(n, p) for n in names)]


def patterns(only: str) -> list[str]:
    """The patterns of `--only`: comma-separated, blanks left out (`a,` is `a`)."""
    return [p for p in (x.strip() for x in only.split(",")) if p]


def every_recipe(
    paths: tuple[str, ...], asked: Asked, studies: Studies | None
) -> Callable[[], list[LoadedRecipe]]:
    """What loads every recipe of the files, --only's left-out ones too (for their model ids): each
    file with the call's --set items, else without them, else left out."""
    mp = parse_model_paths(asked.model_paths)

    def load() -> list[LoadedRecipe]:
        out: list[LoadedRecipe] = []
        for f in expand_paths(paths):
            for sets in (list(asked.sets), []):
                try:
                    out += load_recipes(f, sets, model_paths=mp, studies=studies)
                    break
                except RunnerError:
                    continue
        return out

    return load


def check_model_paths(
    model_paths: tuple[str, ...],
    loaded: list[LoadedRecipe],
    every: Callable[[], list[LoadedRecipe]] | None = None,
) -> None:
    """A --model-path whose hub id is no recipe's model.id or model.tokenizer (a typo, a case slip)
    would leave the recipe on the hub id, sending a download to the hub: refused, with the ids the
    recipes do name. `every`: the files' recipes, --only's left-out ones too (read only when a
    mapping maps none of `loaded`)."""

    def named(recipes: list[LoadedRecipe]) -> set[str | None]:
        return {v for lr in recipes for v in (lr.recipe.model.id, lr.recipe.model.tokenizer)}

    used, seen = named(loaded), list(loaded)
    for hub_id, path in parse_model_paths(model_paths).items():
        if path not in used and every is not None:
            seen += every()
            used, every = named(seen), None
        if path in used:
            continue
        ids = sorted({lr.recipe.model.id for lr in seen if not looks_local(lr.recipe.model.id)})
        near = [i for i in ids if i.lower() == hub_id.lower()] or difflib.get_close_matches(
            hub_id, ids, 1, 0.6
        )
        why = f"{hub_id}=...: no recipe here names {hub_id!r} (model.id or model.tokenizer)"
        if near:
            hint = f"did you mean {near[0]!r}? (hub ids match exactly, case included)"
        elif ids:
            hint = "hub ids of these recipes: " + ", ".join(ids)
        else:
            hint = "no recipe here names a hub id"
        raise RunnerError(why, field="--model-path", hint=hint)
