"""Dotted keys (`engine.engine_args.max_num_seqs`) checked against the recipe models, and set in data.

Pure: looks only at the Pydantic models and the data it is given."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel


class KeyProblem(ValueError):
    """A dotted key that names no recipe field; the message says what is allowed."""


class DictOf:
    """A free-form mapping field (`engine_args`, `env`): any subkey, values of `value`."""

    def __init__(self, value: Any):
        self.value = value


def engine_specs() -> tuple[type[BaseModel], ...]:
    """The engine spec classes of the recipe's `engine` union, in registry order."""
    from runner.config.recipe import Recipe

    return tuple(_models(Recipe.model_fields["engine"].annotation))


def spec_for_kind(kind: Any) -> type[BaseModel] | None:
    for cls in engine_specs():
        ann = cls.model_fields["kind"].annotation
        if kind in typing.get_args(ann):
            return cls
    return None


def _unwrap(ann: Any) -> Any:
    while typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    return ann


def _union_args(ann: Any) -> tuple | None:
    origin = typing.get_origin(ann)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(ann)
    return None


def _models(ann: Any) -> list[type[BaseModel]]:
    ann = _unwrap(ann)
    args = _union_args(ann)
    if args is not None:
        return [m for a in args for m in _models(a)]
    return [ann] if isinstance(ann, type) and issubclass(ann, BaseModel) else []


def _step(ann: Any, kind: Any, is_engine: bool) -> Any:
    """What lies below a field of annotation `ann`: model classes, a DictOf, or the plain annotation."""
    models = _models(ann)
    if models:
        if is_engine and spec_for_kind(kind) is not None:
            return [spec_for_kind(kind)]
        return models
    bare = inner = _unwrap(ann)
    args = _union_args(bare)
    if args is not None:  # `dict[str, str] | None` and the like
        rest = [a for a in args if a is not type(None)]
        inner = _unwrap(rest[0]) if len(rest) == 1 else bare
    if typing.get_origin(inner) is dict:
        args = typing.get_args(inner)
        return DictOf(args[1] if len(args) == 2 else Any)
    return bare


def key_target(key: str, kind: Any = None) -> Any:
    """The annotation a dotted key sets (a list of model classes for a section, DictOf for a free-form
    mapping, `Any` below one). `kind` picks the engine spec for `engine.*` keys; without it, a key
    is valid when any engine has it. Raises KeyProblem for a key that is not a recipe field."""
    from runner.config.recipe import Recipe

    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise KeyProblem(f"{key!r} is not a dotted key (empty part)")
    cur: Any = [Recipe]
    for i, part in enumerate(parts):
        done = ".".join(parts[:i])
        if isinstance(cur, list):
            fields = [n for m in cur for n in m.model_fields]
            if part not in fields:
                raise KeyProblem(_unknown(key, done, part, fields))
            holder = next(m for m in cur if part in m.model_fields)
            cur = _step(holder.model_fields[part].annotation, kind, is_engine=(i == 0 and part == "engine"))
        elif isinstance(cur, DictOf):
            cur = _step(cur.value, kind, False) if cur.value is not Any else Any
        elif cur is Any:
            continue
        else:
            raise KeyProblem(f"{key!r}: {done!r} is a single value, not a mapping with keys")
    return cur


def _unknown(key: str, done: str, part: str, fields: list[str]) -> str:
    allowed = sorted(set(fields))
    close = difflib.get_close_matches(part, allowed, n=1)
    where = f"{done!r} has" if done else "a recipe has"
    msg = f"{key!r} is not a recipe field ({where} no key {part!r})"
    if close:
        msg += f"; did you mean {'.'.join([*filter(None, [done]), close[0]])!r}?"
    return msg + " Allowed here: " + ", ".join(allowed)


def text_field(target: Any) -> tuple[bool, bool]:
    """(takes text, also takes null) for a key_target result: str, `str | None`, Literal of strings."""
    ann = _unwrap(target)
    if ann is str:
        return True, False
    if typing.get_origin(ann) is Literal:
        return all(isinstance(a, str) for a in typing.get_args(ann)), False
    args = _union_args(ann)
    if args:
        rest = [a for a in args if a is not type(None)]
        return bool(rest) and all(text_field(a)[0] for a in rest), len(rest) < len(args)
    return False, False


def overlaps(a: str, b: str) -> bool:
    """The same key, or one inside the other (`engine` and `engine.quantization`)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def set_dotted(data: dict, key: str, value: Any) -> None:
    """Set `value` at a dotted key (replacing what is there), making missing mappings on the way.
    TypeError when a part of the way holds a value that is not a mapping."""
    parts = key.split(".")
    cur = data
    for p in parts[:-1]:
        nxt = cur.get(p)
        if nxt is None:
            nxt = cur[p] = {}
        if not isinstance(nxt, dict):
            raise TypeError(f"{p!r} is not a mapping")
        cur = nxt
    cur[parts[-1]] = value


def get_dotted(data: Any, key: str, default: Any = None) -> Any:
    cur = data
    for p in key.split("."):
        if not isinstance(cur, dict) or p not in cur:
            return default
        cur = cur[p]
    return cur


def flat_dotted(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys to their leaf values (`{"a": {"b": 1}}` -> `{"a.b": 1}`); an empty
    mapping has no leaves, so it names no key."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flat_dotted(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = data
    return out
