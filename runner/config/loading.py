"""Recipe files -> validated LoadedRecipe, with errors a person can act on.

YAML is read with the safe loader only. Validation errors name the file, the
line, the dotted field, and what is allowed (with a did-you-mean for typos)."""
from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from runner.engines import ENGINE_KINDS
from runner.errors import RecipeError
from runner.config.recipe import LoadedRecipe, Recipe

MAX_ERRORS = 8


def _line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the deepest node of `loc` present in the YAML tree."""
    node, line = root, None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(part):
                    line, nxt = k.start_mark.line + 1, v
                    break
            if nxt is None:
                break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line if line is not None else (root.start_mark.line + 1 if root is not None else None)


def _submodel(cls: type[BaseModel], loc: tuple, data: Any) -> type[BaseModel] | None:
    """The model class that holds the field at loc[-1] (for listing allowed keys)."""
    from runner.engines import TransformersSpec, VLLMSpec
    cur: Any = cls
    d = data
    for part in loc[:-1]:
        if isinstance(part, int):      # a list index: `cur` is already the item type
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
            cur = {"transformers": TransformersSpec, "vllm": VLLMSpec}.get(kind)
            continue
        cands = [a for a in typing.get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)] \
            if typing.get_args(ann) else [ann]
        cur = cands[0] if cands else None
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _clean_loc(loc: tuple) -> tuple:
    # discriminated unions insert the tag into the location: engine.vllm.x -> engine.x
    return tuple(p for i, p in enumerate(loc) if not (i > 0 and loc[i - 1] == "engine" and p in ENGINE_KINDS))


def _describe(err: dict, data: Any, sets: dict[str, str]) -> tuple[tuple, str]:
    loc = _clean_loc(tuple(err["loc"]))
    dotted = ".".join(str(p) for p in loc)
    typ = err["type"]
    if typ == "extra_forbidden":
        holder = _submodel(Recipe, loc, data)
        allowed = sorted(holder.model_fields) if holder else []
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
        return loc + ("kind",), f"unknown engine kind {err['input'].get('kind')!r}; allowed: " + \
            ", ".join(repr(k) for k in ENGINE_KINDS) if isinstance(err.get("input"), dict) else err["msg"]
    if typ == "union_tag_not_found":
        return loc + ("kind",), "missing `kind`; allowed: " + ", ".join(repr(k) for k in ENGINE_KINDS)
    if typ == "literal_error" and loc and loc[0] == "metrics":
        from runner.metrics import METRICS
        val = err.get("input")
        close = difflib.get_close_matches(str(val), list(METRICS), n=1)
        return loc, f"unknown metric {val!r}" + (f"; did you mean {close[0]!r}?" if close else ".") + \
            " Allowed: " + ", ".join(METRICS)
    if loc == ("engine",) and isinstance(err.get("input"), str):
        return loc, (f"expected a mapping with a `kind`, e.g. `engine: {{kind: {err['input']}}}`; allowed kinds: "
                     + ", ".join(ENGINE_KINDS))
    if loc == ("metrics",) and isinstance(err.get("input"), str):
        return loc, f"expected a list, e.g. `metrics: [{err['input']}]`"
    msg = err["msg"]
    if "input" in err and typ not in ("model_type", "dict_type"):
        shown = repr(err["input"])
        msg += f" (got {shown[:60]})"
    return loc, msg


def _parse_set(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise RecipeError(f"--set {it!r}: expected dotted.key=value", field="--set")
        k, v = it.split("=", 1)
        out[k.strip()] = v
    return out


PATH_KEYS = {"model.id", "model.tokenizer", "dataset.path", "prompt.template", "prompt.system_template"}


def _cli_path(key: str, value):
    """Paths typed on the command line are relative to the current directory (in a file, to the file)."""
    if key not in PATH_KEYS or not isinstance(value, str) or not value or Path(value).is_absolute():
        return value
    if key.startswith("model.") and not value.startswith(("./", "../", "~")):
        return value                                   # a hub id
    p = Path(value).expanduser()
    return str(p.resolve()) if (p.exists() or key.startswith("model.")) else value


def _apply_set(data: dict, key: str, raw: str, where: str) -> None:
    parts = key.split(".")
    cur = data
    for p in parts[:-1]:
        nxt = cur.get(p)
        if nxt is None:
            nxt = cur[p] = {}
        if not isinstance(nxt, dict):
            raise RecipeError(f"--set {key}: {p!r} is not a mapping", file=where, field=key)
        cur = nxt
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    cur[parts[-1]] = _cli_path(key, value)


def _no_duplicate_keys(node: yaml.Node | None, where: str) -> None:
    """YAML lets a second `sampling:` silently replace the first; a recipe may not."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value)
            if key in seen:
                raise RecipeError(f"key {key!r} appears twice (first on line {seen[key]}); the second would "
                                  "silently replace the first", file=where, line=k.start_mark.line + 1)
            seen[key] = k.start_mark.line + 1
            _no_duplicate_keys(v, where)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _no_duplicate_keys(v, where)


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    where = str(path)
    if not path.exists():
        raise RecipeError("file not found", file=where)
    if path.is_dir():
        raise RecipeError("is a folder, not a recipe file", file=where)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecipeError(f"not UTF-8 text (bad byte at offset {e.start})", file=where,
                          hint="save the recipe as UTF-8")
    if not text.strip():
        raise RecipeError("file is empty; a recipe needs at least name, model, engine, dataset, prompt", file=where)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        _no_duplicate_keys(node, where)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        line = mark.line + 1 if mark else None
        raise RecipeError(f"YAML syntax error: {e.problem}" + (f" ({e.context})" if e.context else ""),
                          file=where, line=line)
    except yaml.YAMLError as e:
        raise RecipeError(f"YAML error: {e}", file=where)
    if not isinstance(data, dict):
        raise RecipeError(f"a recipe must be a mapping of keys, got {type(data).__name__}", file=where)
    return data, node


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> LoadedRecipe:
    path = Path(path)
    where = str(path)
    data, node = read_yaml(path)
    sets = _parse_set(overrides or [])
    for k, v in sets.items():
        _apply_set(data, k, v, where)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        lines = []
        errs = e.errors()
        for err in errs[:MAX_ERRORS]:
            loc, msg = _describe(err, data, sets)
            dotted = ".".join(str(p) for p in loc) or "(top level)"
            line = None if dotted in sets else _line_of(node, loc)
            lines.append(f"  {'line ' + str(line) + ', ' if line else ''}{dotted}: {msg}")
        if len(errs) > MAX_ERRORS:
            lines.append(f"  ... and {len(errs) - MAX_ERRORS} more")
        raise RecipeError("invalid recipe\n" + "\n".join(lines), file=where)
    base_dir = path.resolve().parent
    local = {k: str((base_dir / v).resolve()) for k, v in (("id", recipe.model.id), ("tokenizer", recipe.model.tokenizer))
             if v and v.startswith(("./", "../"))}
    if local:      # a model folder named relative to the recipe file, like every other path in it
        recipe = recipe.model_copy(update={"model": recipe.model.model_copy(update=local)})
    return LoadedRecipe(recipe=recipe, path=str(path.resolve()), base_dir=str(base_dir),
                        overrides=list(overrides or []))
