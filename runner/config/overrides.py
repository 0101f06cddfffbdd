"""`--set KEY=VALUE` and `--model-path HUB_ID=PATH`: changes to a recipe's data before it is validated.

A value for a text field (str, `str | None`, a Literal of strings, a value of a `dict[str, str]` such as
`engine.env`) is taken as written (`--set name=2024`, `--set "prompt.system=#1 rule: be brief"`); `null` or
`~` still clears a field that may be null. Other fields parse the value as YAML (`5`, `true`, `[a, b]`,
`{k: v}`). Paths typed on the command line are relative to the current directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from runner.config.keys import DictOf, KeyProblem, key_target, set_dotted, text_field
from runner.errors import RecipeError

PATH_KEYS = {"model.id", "model.tokenizer", "dataset.path", "prompt.template", "prompt.system_template"}


def parse_set(items: list[str]) -> dict[str, str]:
    """The --set items as dotted key -> the value as typed."""
    out = {}
    for it in items:
        if "=" not in it:
            raise RecipeError(f"--set {it!r}: expected dotted.key=value", field="--set")
        k, v = it.split("=", 1)
        k = k.strip()
        if not k:
            raise RecipeError(f"--set {it!r}: the key before '=' is empty; expected dotted.key=value", field="--set")
        if any(not p.strip() for p in k.split(".")):
            raise RecipeError(f"--set {it!r}: {k!r} is not a dotted key (empty part)", field="--set")
        out[k] = v
    return out


def _cli_path(key: str, value):
    """Paths typed on the command line are relative to the current directory (in a file, to the file)."""
    if key not in PATH_KEYS or not isinstance(value, str) or not value or Path(value).is_absolute():
        return value
    if key.startswith("model.") and not value.startswith(("./", "../", "~")):
        return value  # a hub id
    p = Path(value).expanduser()
    return str(p.resolve()) if (p.exists() or key.startswith("model.")) else value


def _set_value(data: dict, key: str, raw: str) -> Any:
    """The value `--set key=raw` means for this recipe: text as written for text fields, else YAML."""
    engine = data.get("engine")
    kind = engine.get("kind") if isinstance(engine, dict) else None
    try:
        target = key_target(key, kind)
    except KeyProblem:
        target = None
    if target is not None and not isinstance(target, (list, DictOf)):
        text, nullable = text_field(target)
        if text:
            return None if nullable and raw.strip() in ("null", "~") else raw
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def _apply_set(data: dict, key: str, raw: str, where: str) -> None:
    try:
        set_dotted(data, key, _cli_path(key, _set_value(data, key, raw)))
    except TypeError as e:
        raise RecipeError(f"--set {key}: {e}", file=where, field=key) from None


def _model_paths(data: dict, mp: Mapping[str, str]) -> list[str]:
    """`--model-path HUB_ID=PATH` as the --set items it stands for in this recipe."""
    model = data.get("model")
    if not mp or not isinstance(model, dict):
        return []
    mid, tok = model.get("id"), model.get("tokenizer")
    extra = [f"model.{k}={mp[v]}" for k, v in (("id", mid), ("tokenizer", tok)) if isinstance(v, str) and v in mp]
    if tok is None and isinstance(mid, str) and mid in mp:
        extra.append(f"model.tokenizer={mp[mid]}")
    return extra


def apply_overrides(data: dict, overrides: list[str], mp: Mapping[str, str], where: str) -> tuple[dict, list[str]]:
    """Apply the --set items, then the --model-path ones, to `data`; (the --set items parsed, the --set items
    --model-path stood for)."""
    sets = parse_set(overrides)
    for k, v in sets.items():
        _apply_set(data, k, v, where)
    extra = _model_paths(data, mp)
    for k, v in parse_set(extra).items():
        _apply_set(data, k, v, where)
    return sets, extra
