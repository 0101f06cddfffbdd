"""`--set KEY=VALUE` and `--model-path HUB_ID=PATH`: changes to a recipe's data before it is
validated, at dotted keys (`engine.engine_args.max_num_seqs`) checked against the recipe models
(`key_target`).

A value for a text field (str, `str | None`, a Literal of strings, a value of a `dict[str, str]`
such as `engine.env`) is taken as written (`--set name=2024`, `--set "prompt.system=#1 rule: be
brief"`); `null` or `~` still clears a field that may be null. Other fields parse the value as YAML
(`5`, `true`, `[a, b]`, `{k: v}`). Paths typed on the command line are relative to the current
directory."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from runner.base.dotted import get_dotted, set_dotted
from runner.base.errors import RecipeError
from runner.base.types import union_args, unwrap
from runner.engines import ENGINES, spec_class
from runner.recipe import Recipe

PATH_KEYS = {
    "model.id",
    "model.tokenizer",
    "dataset.path",
    "prompt.template",
    "prompt.system_template",
    "engine.compile_cache",  # a folder that may not exist yet: resolved as given, like a model's
}


class KeyProblem(ValueError):
    """A dotted key that names no recipe field; the message says what is allowed."""


def model_classes(ann: Any) -> list[type[BaseModel]]:
    ann = unwrap(ann)
    if (args := union_args(ann)) is not None:
        return [m for a in args for m in model_classes(a)]
    return [ann] if isinstance(ann, type) and issubclass(ann, BaseModel) else []


def _step(ann: Any, kind: Any, is_engine: bool) -> Any:
    """What lies below a field of annotation `ann`: model classes, a free-form mapping's
    `dict[str, X]` (`dict[str, str] | None` too), or the plain annotation."""
    if models := model_classes(ann):
        return [spec_class(kind)] if is_engine and spec_class(kind) is not None else models
    bare = unwrap(ann)
    rest = [unwrap(a) for a in union_args(bare) or () if a is not type(None)]
    return rest[0] if len(rest) == 1 and typing.get_origin(rest[0]) is dict else bare


def sections_with(key: str) -> list[str]:
    """The recipe's sections that have the key, dotted (`max_tokens` -> `sampling.max_tokens`)."""
    return [
        f"{name}.{key}"
        for name, f in Recipe.model_fields.items()
        if any(
            key in m.model_fields
            for m in (ENGINES if name == "engine" else model_classes(f.annotation))
        )
    ]


def key_target(key: str, kind: Any = None) -> Any:
    """The annotation a dotted key sets (a list of model classes for a section, `dict[str, X]`
    for a free-form mapping such as `engine_args` or `env`, `Any` below one). `kind` picks the
    engine spec for `engine.*` keys; without it, a key is valid when any engine has it. Raises
    KeyProblem for a key that is not a recipe field."""
    parts = key.split(".")
    if any(not p for p in parts):  # "" too
        raise KeyProblem(f"{key!r} is not a dotted key (empty part)")
    cur: Any = [Recipe]
    for i, part in enumerate(parts):
        done = ".".join(parts[:i])
        if isinstance(cur, list):
            fields = sorted({n for m in cur for n in m.model_fields})
            if part not in fields:
                close = difflib.get_close_matches(part, fields, n=1)
                msg = (
                    f"{key!r} is not a recipe field "
                    f"({f'{done!r} has' if done else 'a recipe has'} no key {part!r})"
                )
                homes = [] if done else sections_with(part)  # max_tokens -> sampling.max_tokens
                if close or homes:
                    said = homes or [".".join([*filter(None, [done]), close[0]])]
                    msg += f"; did you mean {' or '.join(map(repr, said))}?"
                end = "" if msg.endswith("?") else "."
                raise KeyProblem(f"{msg}{end} Allowed here: " + ", ".join(fields))
            holder = next(m for m in cur if part in m.model_fields)
            cur = _step(
                holder.model_fields[part].annotation, kind, is_engine=(i == 0 and part == "engine")
            )
        elif typing.get_origin(cur) is dict:  # any subkey
            cur = _step(typing.get_args(cur)[1], kind, False)
        elif cur is not Any:
            raise KeyProblem(f"{key!r}: {done!r} is a single value, not a mapping with keys")
    return cur


def text_field(target: Any) -> tuple[bool, bool]:
    """(takes text, also takes null) for a key_target result: str, `str | None`, Literal of
    strings."""
    ann = unwrap(target)
    if ann is str:
        return True, False
    if typing.get_origin(ann) is Literal:
        return all(isinstance(a, str) for a in typing.get_args(ann)), False
    if args := union_args(ann):
        rest = [a for a in args if a is not type(None)]
        return all(text_field(a)[0] for a in rest), len(rest) < len(args)
    return False, False


# a file's own keys, read before --set applies (runner/config/loading.py)
FILE_KEYS = ("base", "abstract", "matrix", "variants", "exclude", "report", "tune")


def parse_set(items: list[str]) -> dict[str, str]:
    """The --set items as dotted key -> the value as typed."""
    out = {}
    hint = "write --set key.path=value, e.g. --set sampling.max_tokens=64"
    err = partial(RecipeError, field="--set", hint=hint)
    for it in items:
        k, eq, v = it.partition("=")
        k = k.strip()
        if not eq:
            raise err(f"{it!r}: expected dotted.key=value")
        if not k:
            raise err(f"{it!r}: the key before '=' is empty; expected dotted.key=value")
        if any(not p.strip() for p in k.split(".")):
            raise err(f"{it!r}: {k!r} is not a dotted key (empty part)")
        if (top := k.split(".")[0]) in FILE_KEYS:
            raise err(
                f"{it!r}: `{top}` is the file's own key, read before --set applies",
                hint="edit the file, or write one that builds on it with `base:`; --only picks a "
                "study's cells",
            )
        out[k] = v
    return out


def _cli_path(key: str, value):
    if key not in PATH_KEYS or not isinstance(value, str) or not value or Path(value).is_absolute():
        return value
    if key.startswith("model.") and not value.startswith(("./", "../", "~")):
        return value  # a hub id
    p = Path(value).expanduser()
    return (
        str(p.resolve())
        if (p.exists() or key.startswith(("model.", "engine.compile_cache")))
        else value
    )


def _set_value(data: dict, key: str, raw: str) -> Any:
    """The value `--set key=raw` means for this recipe: text as written for text fields, else
    YAML."""
    engine = data.get("engine")
    try:
        target = key_target(key, engine.get("kind") if isinstance(engine, dict) else None)
    except KeyProblem:
        target = None
    text, nullable = text_field(target)  # (False, False) for None, a section or a free-form mapping
    if text:
        return None if nullable and raw.strip() in ("null", "~") else raw
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = None if "#" in raw else raw
    if "#" in raw and "#" not in str(value):  # YAML took it for a comment
        bracketed = raw.startswith("[") and raw.endswith("]")
        inner = raw[1:-1].split(",") if bracketed else [raw] if _list_only(target) else None
        quoted = f"[{', '.join(map(_quoted, inner))}]" if inner else _quoted(raw)
        why = f"YAML reads the `#` in {raw!r} as the start of a comment, not as text"
        raise RecipeError(why, field=key, hint=f"quote it: --set '{key}={quoted}'")
    return value


def _list_only(target: Any) -> bool:
    """The field takes a list and no single text (`sampling.stop`)."""
    members = [unwrap(m) for m in union_args(unwrap(target)) or (target,) if m is not type(None)]
    return bool(members) and all(typing.get_origin(m) is list for m in members)


def _quoted(text: str) -> str:
    return '"' + text.strip().replace("\\", "\\\\").replace('"', '\\"') + '"'


def _apply(data: dict, items: dict[str, str], where: str) -> None:
    for key, raw in items.items():
        try:
            set_dotted(data, key, _cli_path(key, _set_value(data, key, raw)))
        except TypeError as e:
            raise RecipeError(f"--set {key}: {e}", file=where, field=key) from None
        except RecipeError as e:
            raise RecipeError(e.message, file=where, field=key, hint=e.hint) from None
    # a data file typed on the command line that is not there: named from here too (left as
    # typed, it would be looked for beside the recipe, and said missing there)
    for at in ("dataset", "prompt.shots.source"):
        path = get_dotted(data, f"{at}.path") if f"{at}.path" in items else None
        if isinstance(path, str) and path and get_dotted(data, f"{at}.format") != "hub":
            set_dotted(data, f"{at}.path", str(Path(path).expanduser().absolute()))


def apply_overrides(
    data: dict, overrides: list[str], mp: Mapping[str, str], where: str
) -> tuple[dict, list[str]]:
    """Apply the --set items, then the --model-path ones, to `data`; (the --set items parsed, the
    --set items --model-path stood for)."""
    sets, extra = parse_set(overrides), []
    _apply(data, sets, where)
    model = data.get("model")
    # each hub id --model-path names, as the --set items it stands for
    if mp and isinstance(model, dict):
        mid, tok = model.get("id"), model.get("tokenizer")
        extra = [
            f"model.{k}={mp[v]}"
            # no tokenizer: the model's id stands for it
            for k, v in (("id", mid), ("tokenizer", mid if tok is None else tok))
            if isinstance(v, str) and v in mp
        ]
    _apply(data, parse_set(extra), where)
    return sets, extra
