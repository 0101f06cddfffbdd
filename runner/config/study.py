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
- Keys of `matrix`, of a variant and of `exclude` are dotted recipe keys (`engine.engine_args.max_num_seqs`;
  below a free-form mapping any subkey). A matrix or variant value is *set* at its key, replacing what is
  there (a mapping value replaces the whole section; use dotted keys to change one field).
- An axis is a list of values or a mapping label -> value. A label names the value in cell names;
  an empty label ("") leaves the value out of names (use it for the default). Without labels a value
  is labelled by itself: text by its last path part without a file extension (`jsquad-context-first`),
  numbers, booleans and null by the key's last part and the value (`max_num_seqs-32`,
  `enable_prefix_caching-on`); lists and mappings need labels.
- A variant that sets an axis's key (or a key inside it, or a section holding it) fixes that axis for its
  cells: they do not vary along it. This is how a transformers variant (`engine: {kind: transformers}`)
  escapes vLLM axes.
- Cell name: the study's `name`, the variant's name (when there is more than one variant), then the labels
  of the axes with more than one value that the cell varies along, in matrix order, joined with `-`.
  Names must fit the recipe name rules (letters, digits, `._-`, at most 100 characters) and be unique.
- `exclude` entries: mappings of axis key (or `variant`) -> value or label. Every entry must name axes
  and values the study has.
- `abstract: true` marks a file that only holds shared settings for other files' `base:`: it is never
  run, and `runner go recipes/*.yaml` passes over it. Its recipe fields may be incomplete.
- `report: {rows: AXIS, columns: AXIS}` picks the summary's pivot axes (a matrix key or `variant`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from runner.config.keys import KeyProblem, key_target, overlaps
from runner.errors import RecipeError
from runner.strict import StrictModel

STUDY_KEYS = ("base", "abstract", "matrix", "variants", "exclude", "report")
LABEL_PATTERN = re.compile(r"^[A-Za-z0-9._-]*$")
VARIANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
FILE_SUFFIXES = {"j2", "jinja", "jinja2", "txt", "json", "jsonl", "csv", "parquet", "yaml", "yml"}


class ReportAxes(StrictModel):
    """Which study axes the summary's pivot table puts on rows and columns."""

    rows: str | None = Field(None, description="Axis whose values label the rows: a `matrix` key or `variant`.")
    columns: str | None = Field(None, description="Axis whose values label the columns: a `matrix` key or `variant`.")


class StudyKeys(StrictModel):
    """Top-level keys that let one file share settings (`base`) or describe many experiments (a study)."""

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
        "(labels name the cells; an empty label leaves a value out of names). Every combination is a cell.",
    )
    variants: dict[str, dict[str, Any] | None] = Field(
        default_factory=dict,
        description="Named overlays (dotted recipe key -> value), each combined with the "
        "grid. A variant that sets an axis's key fixes that axis for its cells.",
    )
    exclude: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Drop the cells that have every setting of an entry (axis key or `variant` -> value or label).",
    )
    report: ReportAxes | None = Field(None, description="The summary's pivot axes.")


@dataclass(frozen=True)
class Axis:
    """One varying setting: a matrix key (or `variant`), its values and their labels."""

    key: str
    values: tuple
    labels: tuple[str, ...]

    def label(self, value: Any) -> str | None:
        for v, lab in zip(self.values, self.labels, strict=True):
            if same(v, value):
                return lab
        return None


def same(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _label_key(k: Any, what: str, where: str) -> str:
    if isinstance(k, bool) or k is None:
        raise RecipeError(
            f"label {k!r}: YAML reads an unquoted on/off/yes/no/true/false/null as a boolean or null; quote it",
            file=where,
            field=what,
        )
    return str(k)


def default_label(key: str, value: Any) -> str | None:
    last = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):
        return f"{last}-{'on' if value else 'off'}"
    if value is None:
        return f"{last}-none"
    if isinstance(value, (int, float)):
        return f"{last}-{value}"
    if isinstance(value, str):
        s = value.rstrip("/").rsplit("/", 1)[-1]
        stem, dot, ext = s.rpartition(".")
        if dot and stem and ext.lower() in FILE_SUFFIXES:
            s = stem
        return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("._-") or None
    return None


def _check_key(key: Any, what: str, where: str) -> str:
    if not isinstance(key, str):
        raise RecipeError(f"key {key!r} is not a dotted recipe key", file=where, field=what)
    try:
        key_target(key)
    except KeyProblem as e:
        raise RecipeError(str(e), file=where, field=what) from None
    return key


def _axis_key(key: Any, where: str) -> str:
    if key in ("variant", "name"):
        raise RecipeError(
            f"{key!r} cannot be an axis ("
            + ("list variants under `variants`" if key == "variant" else "cell names are made from the study's name")
            + ")",
            file=where,
            field="matrix",
        )
    return _check_key(key, "matrix", where)


def _values_and_labels(key: str, spec: Any, where: str) -> tuple[list, list[str]]:
    """An axis written as a list of values (labelled by `default_label`) or as a mapping label -> value."""
    what = f"matrix.{key}"
    if isinstance(spec, list):
        labels = [default_label(key, v) for v in spec]
        if any(lab is None for lab in labels):
            raise RecipeError(
                "these values need labels to name the cells",
                file=where,
                field=what,
                hint=f"write the axis as label -> value: `{key}: {{small: ..., big: ...}}`",
            )
        return list(spec), labels
    if isinstance(spec, dict):
        labels = [_label_key(k, what, where) for k in spec]
        bad = [lab for lab in labels if not LABEL_PATTERN.match(lab)]
        if bad:
            raise RecipeError(f"label {bad[0]!r}: labels may hold letters, digits and ._- only", file=where, field=what)
        return list(spec.values()), labels
    raise RecipeError(
        f"expected a list of values or a mapping label -> value, got {spec!r}",
        file=where,
        field=what,
        hint="a setting with one value belongs at its own key",
    )


def _check_distinct(values: list, labels: list[str], what: str, where: str) -> None:
    if not values:
        raise RecipeError("the axis has no values", file=where, field=what)
    for i, v in enumerate(values):
        if any(same(v, w) for w in values[:i]):
            raise RecipeError(f"value {v!r} is listed twice", file=where, field=what)
        if labels[i] in labels[:i]:
            raise RecipeError(
                f"two values have the label {labels[i]!r}",
                file=where,
                field=what,
                hint="give the values distinct labels: `{label: value, ...}`",
            )


def parse_axes(matrix: Any, where: str) -> list[Axis]:
    if matrix is None:
        return []
    if not isinstance(matrix, dict):
        raise RecipeError("expected a mapping of dotted recipe key -> list of values", file=where, field="matrix")
    axes: list[Axis] = []
    for key, spec in matrix.items():
        key = _axis_key(key, where)
        values, labels = _values_and_labels(key, spec, where)
        _check_distinct(values, labels, f"matrix.{key}", where)
        clash = next((a.key for a in axes if overlaps(a.key, key)), None)
        if clash:
            raise RecipeError(
                f"axes {clash!r} and {key!r} overlap (one is inside the other)", file=where, field="matrix"
            )
        axes.append(Axis(key, tuple(values), tuple(labels)))
    return axes


def parse_variants(variants: Any, where: str) -> dict[str, dict]:
    if variants is None:
        return {}
    if not isinstance(variants, dict):
        raise RecipeError("expected a mapping of variant name -> settings", file=where, field="variants")
    out: dict[str, dict] = {}
    for name, overlay in variants.items():
        name = _label_key(name, "variants", where)
        if not VARIANT_PATTERN.match(name):
            raise RecipeError(
                f"variant name {name!r}: letters, digits and ._- only, starting with a letter or digit",
                file=where,
                field="variants",
            )
        overlay = {} if overlay is None else overlay
        if not isinstance(overlay, dict):
            raise RecipeError(
                f"expected a mapping of dotted recipe key -> value, got {overlay!r}",
                file=where,
                field=f"variants.{name}",
            )
        keys = [_check_key(k, f"variants.{name}", where) for k in overlay]
        for i, k in enumerate(keys):
            clash = next((j for j in keys[:i] if overlaps(j, k)), None)
            if clash:
                raise RecipeError(
                    f"{clash!r} and {k!r} overlap (one is inside the other)", file=where, field=f"variants.{name}"
                )
            if k == "name":
                raise RecipeError(
                    "a variant cannot set `name` (cell names are made from the study's name)",
                    file=where,
                    field=f"variants.{name}",
                )
        out[name] = overlay
    return out


def _relax(node: Any) -> Any:
    """A JSON Schema fragment with nothing required (a file with a base may leave anything to it); refs point
    at the relaxed copies; a discriminated `oneOf` becomes `anyOf` (a section without `kind` may fit several)."""
    if isinstance(node, list):
        return [_relax(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in ("required", "discriminator"):
            continue
        if k in ("default", "const", "enum", "examples"):
            out[k] = v
        elif k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
            out[k] = v + "Partial"
        elif k in ("properties", "$defs"):
            out[k] = {name: _relax(sub) for name, sub in v.items()}
        else:
            out["anyOf" if k == "oneOf" else k] = _relax(v)
    return out


def add_study_keys(schema: dict) -> dict:
    """The recipe JSON Schema (`Recipe.model_json_schema()`) with the study keys added. A file with `base`,
    `matrix`, `variants` or `abstract: true` is checked with nothing required (its fields may come from a
    base or a variant); any other file is checked in full, required fields included."""
    keys = StudyKeys.model_json_schema(ref_template="#/$defs/{model}")
    defs = schema.get("$defs", {})
    out = {k: v for k, v in schema.items() if k not in ("properties", "required", "$defs")}
    out["properties"] = {**_relax(schema.get("properties", {})), **keys["properties"]}
    out["$defs"] = {**defs, **{f"{k}Partial": _relax(v) for k, v in defs.items()}, **keys.get("$defs", {})}
    partial = [
        {"required": ["base"]},
        {"required": ["matrix"]},
        {"required": ["variants"]},
        {"required": ["abstract"], "properties": {"abstract": {"const": True}}},
    ]
    out["if"] = {"anyOf": partial}
    out["else"] = {"required": schema.get("required", []), "properties": schema.get("properties", {})}
    return out
