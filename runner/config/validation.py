"""Pydantic validation errors -> lines a person can act on: the file's line, the dotted field, what is
allowed (with a did-you-mean for typos)."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from runner.config.keys import spec_for_kind
from runner.config.recipe import Recipe
from runner.config.study import STUDY_KEYS
from runner.engines import ENGINE_KINDS

MAX_ERRORS = 8


def _submodel(cls: type[BaseModel], loc: tuple, data: Any) -> type[BaseModel] | None:
    """The model class that holds the field at loc[-1] (for listing allowed keys)."""
    cur: Any = cls
    d = data
    for part in loc[:-1]:
        if isinstance(part, int):  # a list index: `cur` is already the item type
            d = d[part] if isinstance(d, list) and 0 <= part < len(d) else None
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)) or part not in cur.model_fields:
            return None
        ann = cur.model_fields[part].annotation
        d = d.get(part) if isinstance(d, dict) else None
        if typing.get_origin(ann) is list:
            ann = typing.get_args(ann)[0]
        if part == "engine":
            kind = d.get("kind") if isinstance(d, dict) else None
            cur = spec_for_kind(kind)
            continue
        cands = (
            [a for a in typing.get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)]
            if typing.get_args(ann)
            else [ann]
        )
        cur = cands[0] if cands else None
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _clean_loc(loc: tuple) -> tuple:
    # discriminated unions insert the tag into the location: engine.vllm.x -> engine.x
    return tuple(p for i, p in enumerate(loc) if not (i > 0 and loc[i - 1] == "engine" and p in ENGINE_KINDS))


def describe_error(err: dict, data: Any, sets: dict[str, str]) -> tuple[tuple, str]:
    loc = _clean_loc(tuple(err["loc"]))
    dotted = ".".join(str(p) for p in loc)
    typ = err["type"]
    if typ == "extra_forbidden":
        holder = _submodel(Recipe, loc, data)
        allowed = sorted(holder.model_fields) if holder else []
        if len(loc) == 1:  # a file's top level also takes the study keys
            allowed = sorted([*allowed, *STUDY_KEYS])
        if dotted in sets:
            msg = f"--set {dotted}: no such key"
        else:
            msg = f"unknown key {str(loc[-1])!r}"
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        msg += f"; did you mean {close[0]!r}?" if close else "."
        if allowed:
            msg += " Allowed here: " + ", ".join(allowed)
        return loc, msg
    if typ == "missing":
        return loc, "required field is missing"
    if typ == "union_tag_invalid":
        return loc + ("kind",), f"unknown engine kind {err['input'].get('kind')!r}; allowed: " + ", ".join(
            repr(k) for k in ENGINE_KINDS
        ) if isinstance(err.get("input"), dict) else err["msg"]
    if typ == "union_tag_not_found":
        return loc + ("kind",), "missing `kind`; allowed: " + ", ".join(repr(k) for k in ENGINE_KINDS)
    if typ == "literal_error" and loc and loc[0] == "metrics":
        from runner.scoring import METRICS

        val = err.get("input")
        close = difflib.get_close_matches(str(val), list(METRICS), n=1)
        return loc, f"unknown metric {val!r}" + (
            f"; did you mean {close[0]!r}?" if close else "."
        ) + " Allowed: " + ", ".join(METRICS)
    if loc == ("engine",) and isinstance(err.get("input"), str):
        return loc, (
            f"expected a mapping with a `kind`, e.g. `engine: {{kind: {err['input']}}}`; allowed kinds: "
            + ", ".join(ENGINE_KINDS)
        )
    if loc == ("metrics",) and isinstance(err.get("input"), str):
        return loc, f"expected a list, e.g. `metrics: [{err['input']}]`"
    msg = err["msg"]
    if "input" in err and typ not in ("model_type", "dict_type"):
        shown = repr(err["input"])
        msg += f" (got {shown[:60]})"
    return loc, msg


def error_lines(errs: list, data: Any, sets: dict[str, str], locate: Callable[[tuple, str], str]) -> list[str]:
    """One line per error of `ValidationError.errors()` (at most MAX_ERRORS):
    `  line 6, engine.quantizaton: unknown key ...`; `locate(loc, dotted)` gives the `line 6, ` part."""
    lines = []
    for err in errs[:MAX_ERRORS]:
        loc, msg = describe_error(err, data, sets)
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        lines.append(f"  {locate(loc, dotted)}{dotted}: {msg}")
    if len(errs) > MAX_ERRORS:
        lines.append(f"  ... and {len(errs) - MAX_ERRORS} more")
    return lines
