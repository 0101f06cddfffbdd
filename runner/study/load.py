"""Study files: one file, many experiments (cells).

    base: jsquad-base.yaml          # start from another file (see runner/config/merge.py)
    name: jsquad
    matrix:                         # every combination of these values
      engine.enable_prefix_caching: {nocache: false, cache: true}    # label -> value
      prompt.template: {"": jsquad.j2, ctxfirst: jsquad-context-first.j2}
    variants:                       # named overlays, each combined with the grid
      vllm: {}
      fp8: {engine.quantization: fp8}
    exclude:                        # drop the cells that have every setting of an entry
      - {variant: fp8, engine.enable_prefix_caching: nocache}

Rules:
- Keys of `matrix`, of a variant and of `exclude` are dotted recipe keys
  (`engine.engine_args.max_num_seqs`; below a free-form mapping any subkey). A matrix or variant
  value is *set* at its key, replacing what is there (a mapping value replaces the whole section;
  use dotted keys to change one field).
- An axis is a list of values or a mapping label -> value. A label names the value in cell names; an
  empty label ("") leaves the value out of names (use it for the default). Without labels a value is
  labelled by itself: text by its last path part without a file extension (`jsquad-context-first`),
  numbers, booleans and null by the key's last part and the value (`max_num_seqs-32`,
  `enable_prefix_caching-on`); lists and mappings need labels.
- A variant that sets an axis's key (or a key inside it, or a section holding it) fixes that axis
  for its cells: they do not vary along it. This is how a transformers variant (`engine: {kind:
  transformers}`) escapes vLLM axes.
- Cell name: the study's `name`, the variant's name (when there is more than one variant), then the
  labels of the axes with more than one value that the cell varies along, in matrix order, joined
  with `-`. Names must fit the recipe name rules (letters, digits, `._-`, at most 100 characters)
  and be unique.
- `exclude` entries: mappings of axis key (or `variant`) -> value or label. Every entry must name
  axes and values the study has.
- `abstract: true` marks a file that only holds shared settings for other files' `base:`: it is
  never run, and `runner go recipes/*.yaml` passes over it. Its recipe fields may be incomplete.
- `report: {rows: AXIS, columns: AXIS}` picks the summary's pivot axes (a matrix key or `variant`).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import Field

from runner.base.dotted import overlaps
from runner.base.errors import RecipeError
from runner.base.types import StrictModel
from runner.config.loading import (
    RecipeFile,
    check_abstract,
    finish,
    read_recipe_file,
    with_settings,
)
from runner.config.overrides import KeyProblem, key_target, parse_set
from runner.recipe import NAME_PATTERN, LoadedRecipe, StudyCell

LABEL_PATTERN = re.compile(r"^[A-Za-z0-9._-]*$")
VARIANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
FILE_SUFFIXES = {"j2", "jinja", "jinja2", "txt", "json", "jsonl", "csv", "parquet", "yaml", "yml"}
MAX_CELLS, MAX_NAME = 1000, 100  # cells of a study (before `exclude`), characters of a cell name


class ReportAxes(StrictModel):
    """Which study axes the summary's pivot table puts on rows and columns."""

    rows: str | None = Field(
        None, description="Axis whose values label the rows: a `matrix` key or `variant`."
    )
    columns: str | None = Field(
        None, description="Axis whose values label the columns: a `matrix` key or `variant`."
    )


class StudyKeys(StrictModel):
    """Top-level keys that let one file share settings (`base`) or describe many experiments (a
    study)."""

    base: str | None = Field(
        None,
        description="Another recipe file (relative to this one) to start from; this file "
        "overrides it: mappings merge, lists and other values are replaced.",
    )
    abstract: bool = Field(
        False,
        description="This file only holds shared settings for other files' `base:`; "
        "it is never run (and may leave out required fields). Not inherited.",
    )
    matrix: dict[str, list[Any] | dict[str, Any]] = Field(
        default_factory=dict,
        description="Grid axes: dotted recipe key -> list of values, or label -> value "
        "(labels name the cells; an empty label leaves a value out of names). Every combination is "
        "a cell.",
    )
    variants: dict[str, dict[str, Any] | None] = Field(
        default_factory=dict,
        description="Named overlays (dotted recipe key -> value), each combined with the "
        "grid. A variant that sets an axis's key fixes that axis for its cells.",
    )
    exclude: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Drop the cells that have every setting of an entry (axis key or `variant` -> "
        "value or label).",
    )
    report: ReportAxes | None = Field(None, description="The summary's pivot axes.")


def _relax(node: Any) -> Any:
    """A JSON Schema fragment with nothing required (a file with a base may leave anything to it);
    refs point at the relaxed copies; a discriminated `oneOf` becomes `anyOf` (a section without
    `kind` may fit several)."""
    if isinstance(node, list):
        return [_relax(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in ("default", "const", "enum", "examples"):
            out[k] = v
        elif k == "$ref" and v.startswith("#/$defs/"):
            out[k] = v + "Partial"
        elif k in ("properties", "$defs"):
            out[k] = {name: _relax(sub) for name, sub in v.items()}
        elif k not in ("required", "discriminator"):
            out["anyOf" if k == "oneOf" else k] = _relax(v)
    return out


def add_study_keys(schema: dict) -> dict:
    """The recipe JSON Schema (`Recipe.model_json_schema()`) with the study keys added. A file with
    `base`, `matrix`, `variants` or `abstract: true` is checked with nothing required (its fields
    may come from a base or a variant); any other file is checked in full, required fields
    included."""
    keys = StudyKeys.model_json_schema(ref_template="#/$defs/{model}")
    defs, props = schema["$defs"], schema["properties"]
    relaxed = {**_relax(props), **keys["properties"]}
    cell = {  # a study may name its baseline cell
        "type": "string",
        "description": "In a study: the name of the one cell that is the baseline.",
    }
    partial = [{"required": [k]} for k in ("base", "matrix", "variants")]
    abstract = {"required": ["abstract"], "properties": {"abstract": {"const": True}}}
    return {
        **{k: v for k, v in schema.items() if k not in ("properties", "required", "$defs")},
        "properties": {**relaxed, "baseline": {"anyOf": [relaxed["baseline"], cell]}},
        "$defs": {**defs, **{f"{k}Partial": _relax(v) for k, v in defs.items()}, **keys["$defs"]},
        "if": {"anyOf": [*partial, abstract]},
        "else": {"required": schema["required"], "properties": props},
    }


class _Unnamed(RecipeError):
    """A study key's error before `_named` names the file."""


def _err(field: str, message: str, hint: str | None = None) -> RecipeError:
    return _Unnamed(message, field=field, hint=hint)


@contextmanager
def _named(f: RecipeFile) -> Iterator[None]:
    """The study's key errors raised inside name the file."""
    try:
        yield
    except _Unnamed as e:
        raise RecipeError(e.message, file=str(f.path), field=e.field, hint=e.hint) from None


# the first of `keys` that is `key` or one inside the other
def _clash(keys: Any, key: str) -> str | None:
    return next((k for k in keys if overlaps(k, key)), None)


def same(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


@dataclass(frozen=True)
class Axis:
    """One varying setting: a matrix key (or `variant`), its values and their labels."""

    key: str
    values: tuple
    labels: tuple[str, ...]

    def label(self, value: Any) -> str | None:
        return next(
            (lab for v, lab in zip(self.values, self.labels, strict=True) if same(v, value)), None
        )


def default_label(key: str, value: Any) -> str | None:
    if value is None or isinstance(value, (bool, int, float)):
        shown = (
            "none"
            if value is None
            else ("on" if value else "off")
            if isinstance(value, bool)
            else value
        )
        return f"{key.rsplit('.', 1)[-1]}-{shown}"
    if isinstance(value, str):
        s = value.rstrip("/").rsplit("/", 1)[-1]
        stem, dot, ext = s.rpartition(".")
        if dot and stem and ext.lower() in FILE_SUFFIXES:
            s = stem
        return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("._-") or None
    return None


def _label_key(k: Any, what: str) -> str:
    if isinstance(k, bool) or k is None:
        msg = (
            f"label {k!r}: YAML reads an unquoted on/off/yes/no/true/false/null as a boolean or "
            "null; quote it"
        )
        raise _err(what, msg)
    return str(k)


def _check_key(key: Any, what: str) -> str:
    if not isinstance(key, str):
        raise _err(what, f"key {key!r} is not a dotted recipe key")
    try:
        key_target(key)
    except KeyProblem as e:
        raise _err(what, str(e)) from None
    return key


def parse_axes(matrix: Any) -> list[Axis]:
    """Each axis written as a list of values (labelled by `default_label`) or as a mapping label ->
    value."""
    if matrix is None:
        return []
    if not isinstance(matrix, dict):
        raise _err("matrix", "expected a mapping of dotted recipe key -> list of values")
    axes: list[Axis] = []
    for key, spec in matrix.items():
        if key in ("variant", "name"):
            why = (
                "list variants under `variants`"
                if key == "variant"
                else "cell names are made from the study's name"
            )
            raise _err("matrix", f"{key!r} cannot be an axis ({why})")
        axis = _axis(key, spec, "matrix." + _check_key(key, "matrix"))
        if clash := _clash([a.key for a in axes], key):
            raise _err("matrix", f"axes {clash!r} and {key!r} overlap (one is inside the other)")
        axes.append(axis)
    return axes


def _axis(key: str, spec: Any, what: str) -> Axis:
    if isinstance(spec, list):
        values, labels = list(spec), [default_label(key, v) for v in spec]
        if None in labels:
            hint = f"write the axis as label -> value: `{key}: {{small: ..., big: ...}}`"
            raise _err(what, "these values need labels to name the cells", hint)
    elif isinstance(spec, dict):
        values, labels = list(spec.values()), [_label_key(k, what) for k in spec]
        if bad := [lab for lab in labels if not LABEL_PATTERN.match(lab)]:
            msg = f"label {bad[0]!r}: labels may hold letters, digits and ._- only"
            raise _err(what, msg)
    else:
        msg = f"expected a list of values or a mapping label -> value, got {spec!r}"
        raise _err(what, msg, "a setting with one value belongs at its own key")
    if not values:
        raise _err(what, "the axis has no values")
    if len(values) > MAX_CELLS:  # before the pairwise check of repeated values
        msg = f"the axis has {len(values):,} values; a study makes at most {MAX_CELLS:,} cells"
        raise _err(what, msg, "fewer values, or split the study into files")
    for i, v in enumerate(values):
        if any(same(v, w) for w in values[:i]):
            raise _err(what, f"value {v!r} is listed twice")
        if labels[i] in labels[:i]:
            hint = "give the values distinct labels: `{label: value, ...}`"
            raise _err(what, f"two values have the label {labels[i]!r}", hint)
    return Axis(key, tuple(values), tuple(labels))


def parse_variants(variants: Any) -> dict[str, dict]:
    if variants is None:
        return {}
    if not isinstance(variants, dict):
        raise _err("variants", "expected a mapping of variant name -> settings")
    out: dict[str, dict] = {}
    for name, overlay in variants.items():
        name = _label_key(name, "variants")
        if not VARIANT_PATTERN.match(name):
            msg = f"variant name {name!r}: letters, digits and ._- only, starting with a letter"
            raise _err("variants", msg + " or digit")
        what, overlay = f"variants.{name}", {} if overlay is None else overlay
        if not isinstance(overlay, dict):
            raise _err(what, f"expected a mapping of dotted recipe key -> value, got {overlay!r}")
        keys = [_check_key(k, what) for k in overlay]
        for i, k in enumerate(keys):
            if clash := _clash(keys[:i], k):
                raise _err(what, f"{clash!r} and {k!r} overlap (one is inside the other)")
            if k == "name":
                raise _err(
                    what,
                    "a variant cannot set `name` (cell names are made from the study's name)",
                )
        out[name] = overlay
    return out


def _not_an_axis(v: Any, names: list[str]) -> str:
    close = difflib.get_close_matches(str(v), names, n=1)
    mean = f"; did you mean {close[0]!r}?" if close else "."
    return f"{v!r} is not an axis of this study{mean} Axes: {', '.join(names)}"


def parse_excludes(exclude: Any, all_axes: tuple[Axis, ...]) -> list[dict]:
    """Each entry with its values resolved (a label stands for its value)."""
    if exclude is None:
        return []
    if not isinstance(exclude, list):
        raise _err("exclude", "expected a list of mappings (axis key or `variant` -> value)")
    by_key = {a.key: a for a in all_axes}
    out = []
    for i, entry in enumerate(exclude):
        what = f"exclude[{i}]"
        if not isinstance(entry, dict) or not entry:
            raise _err(what, f"expected a mapping of axis key -> value, got {entry!r}")
        norm = {}
        for k, v in entry.items():
            if (axis := by_key.get(k)) is None:
                raise _err(what, _not_an_axis(k, list(by_key)))
            pairs = list(zip(axis.values, axis.labels, strict=True))
            found = [w for w in axis.values if same(w, v)] or [
                w for w, lab in pairs if lab and lab == v
            ]
            if not found:
                shown = ", ".join(
                    repr(w) + (f" ({lab})" if lab and lab != w else "") for w, lab in pairs
                )
                raise _err(what, f"{k}: {v!r} is none of the axis's values: {shown}")
            norm[k] = found[0]
        out.append(norm)
    return out


def check_report(report: Any, all_axes: tuple[Axis, ...]) -> dict | None:
    if report is None:
        return None
    if not isinstance(report, dict) or set(report) - {"rows", "columns"}:
        raise _err("report", "expected `{rows: AXIS, columns: AXIS}`")
    names = [a.key for a in all_axes]
    for k, v in report.items():
        if v is not None and v not in names:
            raise _err(f"report.{k}", _not_an_axis(v, names))
    if (rows := report.get("rows")) is not None and rows == report.get("columns"):
        why = f"rows and columns are both {rows!r}: a pivot needs two different axes"
        raise _err("report", why)
    return {"rows": rows, "columns": report.get("columns")}


class Cell(NamedTuple):
    name: str
    cell: dict[str, Any]  # the settings that vary (StudyCell.settings)
    data: dict  # the cell's recipe data (before --set)
    origins: tuple[tuple, ...]  # YAML locations of the settings the cell's overlays set


def describe(cell: dict[str, Any], axes: Iterable[Axis]) -> str:
    """`variant=vllm-oneshot, engine.enable_prefix_caching=true (cache)` for listings and errors."""
    by_key = {a.key: a for a in axes}
    out = []
    for k, v in cell.items():
        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        text = text if len(text) <= 80 else text[:79] + "…"  # a long value, cut: one screen
        lab = by_key[k].label(v) if k in by_key else None
        shown = lab and lab != text and lab != default_label(k, v)
        out.append(f"{k}={text}" + (f" ({lab})" if shown else ""))
    return ", ".join(out)


@dataclass(frozen=True)
class Grid:
    """A study file's `matrix` axes, `variants` and `exclude` entries (values resolved), parsed;
    `all_axes`: the matrix axes, then `variant` when there are variants."""

    axes: list[Axis]
    variants: dict[str, dict]
    excludes: list[dict]
    all_axes: tuple[Axis, ...]


def parse_grid(f: RecipeFile) -> Grid:
    axes = parse_axes(f.keys.get("matrix"))
    variants = parse_variants(f.keys.get("variants"))
    all_axes = (*axes, *([Axis("variant", tuple(variants), tuple(variants))] if variants else []))
    return Grid(axes, variants, parse_excludes(f.keys.get("exclude"), all_axes), all_axes)


def expand(f: RecipeFile, name: str, g: Grid) -> list[Cell]:
    """The cells of study `f` named `name`: each variant with each combination of the axes it leaves
    free."""
    vnames = [*g.variants] or [None]
    if (total := len(vnames) * math.prod(len(a.values) for a in g.axes)) > MAX_CELLS:
        msg = f"the study makes {total:,} cells before `exclude`; at most {MAX_CELLS:,}"
        raise _err("matrix", msg, "fewer axes or values, or split the study into files")
    varying, cells = {"variant", *(a.key for a in g.axes if len(a.values) > 1)}, []
    for v in vnames:
        overlay = g.variants.get(v, {})  # type: ignore[arg-type]
        free = [a for a in g.axes if _clash(overlay, a.key) is None]
        origins = (*(("variants", v, k) for k in overlay), *(("matrix", a.key) for a in free))
        for combo in product(*(a.values for a in free)):
            chosen = dict(zip((a.key for a in free), combo, strict=True))
            # a variant that sets an axis's own key fixes it at that value
            setting = {**overlay, **chosen}
            # what `exclude` entries are matched against
            match = {"variant": v} if v is not None else {}
            match |= {a.key: setting[a.key] for a in g.axes if a.key in setting}
            if any(all(k in match and same(match[k], x) for k, x in e.items()) for e in g.excludes):
                continue
            labels = [lab for a in free if len(a.values) > 1 and (lab := a.label(chosen[a.key]))]
            named = [v] if v is not None and len(g.variants) > 1 else []  # the variant, of several
            cell_name = "-".join([name, *named, *labels])
            cell = {k: x for k, x in match.items() if k in varying}
            data = with_settings(f, setting, f"cell {cell_name!r}: ") | {"name": cell_name}
            cells.append(Cell(cell_name, cell, data, origins))
    if not cells:
        raise _err("exclude", "`exclude` drops every cell of the study")
    _check_names(cells, g.axes)
    return cells


def _check_names(cells: list[Cell], axes: list[Axis]) -> None:
    seen: dict[str, Cell] = {}
    for c in cells:
        if len(c.name) > MAX_NAME or not re.match(NAME_PATTERN, c.name):
            msg = f"cell name {c.name!r} ({describe(c.cell, axes)}) is not a valid recipe name "
            msg += f"(letters, digits, ._-, at most {MAX_NAME} characters)"
            hint = (
                "shorten the study's name, or give the axis values short labels: `matrix: "
                "{key: {label: value}}`"
            )
            raise _err("name", msg, hint)
        if c.name in seen:
            msg = f"two cells are named {c.name!r}: ({describe(seen[c.name].cell, axes)}) and "
            msg += f"({describe(c.cell, axes)})"
            hint = (
                "give the axis values distinct labels: `matrix: {key: {label: value}}` (an "
                "empty label leaves a value out of names)"
            )
            raise _err("matrix", msg, hint)
        seen[c.name] = c


def _entry(data: Any, key: str) -> list:
    """What a cell holds at a dotted key: its value, or where the path stops (a missing key, a
    value that is not a mapping) and at what depth: `--set` fills each of these in the same way,
    so cells apart in any of them would become one (a `null` is not a missing key)."""
    for depth, part in enumerate(key.split(".")):
        if not isinstance(data, dict):
            return ["not a mapping", depth, data]
        if part not in data:
            return ["missing", depth]
        data = data[part]
    return ["value", data]


def _pinned_apart(sets: Mapping[str, str], by_key: Mapping[str, Axis], runs: list[Cell]) -> None:
    """A --set on what the cells this call runs differ in is refused: it would make them the
    same."""
    for k in sets:
        # only where the cells this call runs differ in it (`--only` one cell may pin it): by
        # an axis, or by what variants set (found by a tester: `--set` made two variants one)
        differ = lambda values: len({json.dumps(v, default=str) for v in values}) > 1
        clash = _clash(by_key, k)
        if clash and k.startswith(f"{clash}."):  # one entry of a mapping the study varies:
            clash = None  # the cells stay apart unless they differ in that entry itself
        if not (clash and differ(c.cell.get(clash) for c in runs)):
            if not differ(_entry(c.data, k) for c in runs):
                continue
            clash = k
        msg = (
            f"--set {k}: the study varies {clash!r} across its cells; setting it for every "
            "cell would make cells the same"
        )
        raise _err("--set", msg, "pick cells by name, or change the study's matrix or variants")


def study_cells(
    f: RecipeFile, overrides: list[str], mp: Mapping[str, str], keep: Callable[[str], bool] | None
) -> list[LoadedRecipe]:
    """A study file's cells (runner.config's `load_recipes` hands a study file here, through
    runner/wings.py), each validated as a full recipe before anything runs (an invalid cell's error
    names the cell and its field); none for an abstract file. `keep`: only the cells whose name it
    keeps are validated and returned (`--only`: a `--set` is not checked against cells the call does
    not run)."""
    with _named(f):
        name, g = f.data.get("name"), parse_grid(f)
        report = check_report(f.keys.get("report"), g.all_axes)
        if f.keys.get("abstract"):
            check_abstract(f)
            return []
        if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
            hint = (
                "a file that only holds shared settings for other files' `base:` needs "
                "`abstract: true`"
            )
            msg = "a study needs a `name` (letters, digits, ._-): its cells are named from it"
            raise _err("name", msg, None if "name" in f.data else hint)
        # applies to every cell: it may not rename the study or pin a setting it varies
        by_key = {a.key: a for a in g.all_axes}
        sets = parse_set(overrides)
        if "name" in sets:
            msg = (
                "--set name: a study's cells are named from its `name`; rename the study in the "
                "file"
            )
            raise _err("--set", msg)
        cells, loaded = expand(f, name, g), []
        runs = [c for c in cells if keep is None or keep(c.name)]
        _pinned_apart(sets, by_key, runs)
        # `baseline: CELL`: that cell alone is the baseline
        if isinstance(base := f.data.get("baseline"), str):
            if base not in (names := [c.name for c in cells]):
                raise _err(
                    "baseline",
                    f"{base!r} names no cell of the study; its cells: {', '.join(names)}",
                )
            cells = [c._replace(data={**c.data, "baseline": c.name == base}) for c in cells]
    for index, c in enumerate(cells):
        if keep is not None and not keep(c.name):
            continue
        title = f"cell {c.name!r} ({describe(c.cell, g.axes)}): invalid recipe"
        # the study file's short label of each varying value (what reports show), where it has one
        labels = {k: lab for k, v in c.cell.items() if k in by_key and (lab := by_key[k].label(v))}
        cell = StudyCell(
            study=name,
            settings=c.cell,
            labels=labels,
            axes=report,
            index=index,
        )
        lr = finish(replace(f, data=c.data), overrides, mp, c.origins, title)
        loaded.append(lr.model_copy(update={"cell": cell}))
    return loaded


def cell_file(path: str | Path, name: str, field: str) -> RecipeFile:
    """One cell of a study as a plain recipe file: the cell's data (the study's `baseline` mark
    dropped), the study file's sources; `field` names what asked for it in an error."""
    f = read_recipe_file(path)
    with _named(f):
        if not f.is_study:
            msg = "names a cell, but the file is not a study (no `matrix` or `variants`)"
            raise _err(field, msg)
        cells = {c.name: c for c in expand(f, str(f.data.get("name")), parse_grid(f))}
        if name not in cells:
            close = difflib.get_close_matches(name, list(cells), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "runner check FILE lists the cells"
            raise _err(field, f"{name!r} names no cell of the study", hint)
    data = {k: v for k, v in cells[name].data.items() if k != "baseline"}
    return RecipeFile(f.path, data, {}, f.sources)
