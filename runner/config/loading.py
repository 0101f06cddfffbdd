"""Recipe files -> validated LoadedRecipe(s), with errors a person can act on.

- `load_recipes(path, overrides)`: every experiment a file holds: one for a plain recipe, one per cell
  for a study (`matrix`/`variants`, see runner/config/study.py), none for a base-only file
  (`abstract: true`). `load_study` returns the same with the study's axes and report axes.
- `load_recipe(path, overrides)`: a file that holds exactly one experiment (a study is an error).
- `base:` chains are merged first (runner/config/merge.py); a study's cells are expanded and every cell is
  validated before anything runs; an invalid cell's error names the cell and its field.
- `--set KEY=VALUE` and `--model-path` apply to every cell, after expansion (runner/config/overrides.py).
- YAML is read with the safe loader, bounded in size, depth and alias expansion (yamlfile.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from runner.config.cells import Cell, check_report, describe, expand, parse_excludes
from runner.config.keys import overlaps
from runner.config.merge import Source, with_bases
from runner.config.overrides import apply_overrides, parse_set
from runner.config.recipe import NAME_PATTERN, LoadedRecipe, Recipe
from runner.config.study import STUDY_KEYS, Axis, ReportAxes, parse_axes, parse_variants
from runner.config.validation import error_lines
from runner.config.yamlfile import line_of as _line_of
from runner.config.yamlfile import read_yaml
from runner.errors import RecipeError


@dataclass(frozen=True)
class Study:
    """What one file holds. `kind`: "recipe" (one experiment), "study" (cells) or "abstract" (none)."""

    path: str
    kind: Literal["recipe", "study", "abstract"]
    name: str | None
    axes: tuple[Axis, ...]  # matrix axes in file order, then `variant` when there are variants
    report: ReportAxes | None
    cells: tuple[LoadedRecipe, ...]

    def describe(self, lr: LoadedRecipe) -> str:
        """A cell's varying settings: `variant=vllm-oneshot, engine.enable_prefix_caching=true (cache)`."""
        return describe(lr.cell, list(self.axes))


def _locator(sources: list[Source], sets: dict, cell: Cell | None):
    """locate(loc, dotted) -> `line N, ` / `base.yaml line N, ` / "" for an error at loc."""
    plain = len(sources) == 1 and cell is None

    def at(src_loc: tuple) -> str | None:
        for i, src in enumerate(sources):
            line = _line_of(src.node, src_loc, exact=True)
            if line is not None:
                return f"line {line}, " if i == 0 else f"{src.path.name} line {line}, "
        return None

    def locate(loc: tuple, dotted: str) -> str:
        if dotted in sets:
            return ""
        if plain:
            line = _line_of(sources[0].node, loc)
            return f"line {line}, " if line else ""
        for origin in cell.origins if cell else ():
            if overlaps(str(origin[-1]), dotted):
                return at(origin) or ""
        found = at(loc)
        if found is None:
            line = _line_of(sources[0].node, loc)
            found = f"line {line}, " if line else ""
        return found

    return locate


def _validate(
    data: dict, where: str, sets: dict, locate, title: str = "invalid recipe", hint: str | None = None
) -> Recipe:
    try:
        return Recipe.model_validate(data)
    except ValidationError as e:
        raise RecipeError(
            title + "\n" + "\n".join(error_lines(e.errors(), data, sets, locate)), file=where, hint=hint
        ) from None


def _finish(
    data: dict,
    path: Path,
    where: str,
    overrides: list[str],
    mp: Mapping[str, str],
    locate,
    study: str | None = None,
    cell: Cell | None = None,
    title: str = "invalid recipe",
    hint: str | None = None,
) -> LoadedRecipe:
    sets, extra = apply_overrides(data, overrides, mp, where)
    recipe = _validate(data, where, sets, locate, title, hint)
    base_dir = path.resolve().parent
    named = (("id", recipe.model.id), ("tokenizer", recipe.model.tokenizer))
    local = {k: str((base_dir / v).resolve()) for k, v in named if v and v.startswith(("./", "../"))}
    if local:  # a model folder named relative to the recipe file, like every other path in it
        recipe = recipe.model_copy(update={"model": recipe.model.model_copy(update=local)})
    return LoadedRecipe(
        recipe=recipe,
        path=str(path.resolve()),
        base_dir=str(base_dir),
        overrides=[*overrides, *extra],
        study=study,
        cell=dict(cell.cell) if cell else {},
    )


def _check_abstract(data: dict, where: str, locate) -> None:
    """A base-only file may leave fields out; anything it does say must still be right."""
    try:
        Recipe.model_validate(data)
    except ValidationError as e:
        errs = [x for x in e.errors() if x["type"] not in ("missing", "union_tag_not_found")]
        if errs:
            raise RecipeError(
                "invalid base file (abstract: true)\n" + "\n".join(error_lines(errs, data, {}, locate)), file=where
            ) from None


def _check_sets(sets: dict, axes: tuple[Axis, ...], where: str) -> None:
    """--set applies to every cell: it may not rename the study or pin a setting the study varies."""
    for k in sets:
        if k == "name":
            raise RecipeError(
                "--set name: a study's cells are named from its `name`; rename the study in the file",
                field="--set",
                file=where,
            )
        clash = next((a.key for a in axes if overlaps(k, a.key)), None)
        if clash:
            raise RecipeError(
                f"--set {k}: the study varies {clash!r} across its cells; setting it for every cell "
                "would make cells the same",
                field="--set",
                file=where,
                hint="pick cells by name, or change the study's matrix",
            )


@dataclass(frozen=True)
class _Layout:
    """A file's study keys, parsed and checked: its axes, variants, excludes and report axes."""

    abstract: bool
    axes: list[Axis]
    variants: dict[str, dict]
    excludes: list[dict]
    report: ReportAxes | None

    @property
    def is_study(self) -> bool:
        return bool(self.axes or self.variants)

    @property
    def all_axes(self) -> tuple[Axis, ...]:
        """The matrix axes in file order, then `variant` when there are variants."""
        variants = tuple(self.variants)
        return tuple(self.axes) + ((Axis("variant", variants, variants),) if self.variants else ())


def _layout(keys: dict[str, Any], where: str) -> _Layout:
    abstract = keys.get("abstract", False)
    if not isinstance(abstract, bool):
        raise RecipeError(f"expected true or false, got {abstract!r}", file=where, field="abstract")
    axes = parse_axes(keys.get("matrix"), where)
    variants = parse_variants(keys.get("variants"), where)
    if not axes and not variants:
        for k in ("exclude", "report"):
            if keys.get(k):
                raise RecipeError(
                    "only a study (a file with `matrix` or `variants`) has cells to "
                    + ("exclude" if k == "exclude" else "arrange in a report"),
                    file=where,
                    field=k,
                )
    excludes = parse_excludes(keys.get("exclude"), axes, variants, where)
    report = check_report(keys.get("report"), axes, variants, where)
    return _Layout(abstract, axes, variants, excludes, report)


def _check_study_name(name: str | None, where: str, hint: str | None) -> None:
    if name is None or not re.match(NAME_PATTERN, name):
        raise RecipeError(
            "a study needs a `name` (letters, digits, ._-): its cells are named from it",
            file=where,
            field="name",
            hint=hint,
        )


def load_study(
    path: str | Path, overrides: list[str] | None = None, *, model_paths: Mapping[str, str] | None = None
) -> Study:
    """Everything one recipe file holds, validated. `model_paths`: hub id -> local folder (--model-path),
    applied to each cell's model.id / model.tokenizer after the overrides."""
    path = Path(path)
    where = str(path)
    overrides, mp = list(overrides or []), dict(model_paths or {})
    sets = parse_set(overrides)
    data, node = read_yaml(path)
    merged, sources = with_bases(path, data, node) if "base" in data else (data, [Source(path, node)])
    layout = _layout({k: merged.pop(k) for k in STUDY_KEYS if k in merged}, where)
    name = merged.get("name") if isinstance(merged.get("name"), str) else None
    if layout.abstract:
        _check_abstract(merged, where, _locator(sources, {}, None))
        return Study(str(path.resolve()), "abstract", name, layout.all_axes, layout.report, ())
    hint = (
        None
        if "name" in merged
        else "a file that only holds shared settings for other files' `base:` needs `abstract: true`"
    )
    if not layout.is_study:
        lr = _finish(merged, path, where, overrides, mp, _locator(sources, sets, None), hint=hint)
        return Study(lr.path, "recipe", lr.recipe.name, (), None, (lr,))
    _check_study_name(name, where, hint)
    _check_sets(sets, layout.all_axes, where)
    cells = expand(name, merged, layout.axes, layout.variants, layout.excludes, where)
    loaded = tuple(
        _finish(
            c.data,
            path,
            where,
            overrides,
            mp,
            _locator(sources, sets, c),
            study=name,
            cell=c,
            title=f"cell {c.name!r} ({describe(c.cell, layout.axes)}): invalid recipe",
        )
        for c in cells
    )
    return Study(str(path.resolve()), "study", name, layout.all_axes, layout.report, _with_labels(loaded, layout))


def _with_labels(loaded: tuple[LoadedRecipe, ...], layout: _Layout) -> tuple[LoadedRecipe, ...]:
    """Each cell with the study's report axes and the labels of its values (what reports show)."""
    axes_doc = layout.report.model_dump() if layout.report is not None else None
    return tuple(
        lr.model_copy(update={"study_axes": axes_doc, "cell_labels": _labels(lr.cell, layout.all_axes)})
        for lr in loaded
    )


def _labels(cell: dict[str, Any], axes: tuple[Axis, ...]) -> dict[str, str]:
    """The study file's short label of each varying value (what reports show), where it has one."""
    by_key = {a.key: a for a in axes}
    out = {}
    for k, v in cell.items():
        lab = by_key[k].label(v) if k in by_key else None
        if lab:
            out[k] = lab
    return out


def load_recipes(
    path: str | Path, overrides: list[str] | None = None, *, model_paths: Mapping[str, str] | None = None
) -> list[LoadedRecipe]:
    """One LoadedRecipe per experiment in the file: 1 (recipe), one per cell (study), 0 (abstract)."""
    return list(load_study(path, overrides, model_paths=model_paths).cells)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> LoadedRecipe:
    """The one experiment a recipe file holds; a study or a base-only file is a RecipeError."""
    s = load_study(path, overrides)
    if s.kind == "abstract":
        raise RecipeError(
            "holds shared settings for other files' `base:` (abstract: true); it is not an experiment", file=str(path)
        )
    if s.kind == "study":
        raise RecipeError(
            f"is a study of {len(s.cells)} experiments ({', '.join(c.recipe.name for c in s.cells)}); "
            "load it with load_recipes",
            file=str(path),
        )
    return s.cells[0]
