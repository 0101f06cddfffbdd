"""Recipe files -> validated LoadedRecipe(s), with errors a person can act on.

- A file is read with the safe loader, bounded in size, depth and alias expansion (yamlfile.py); its
  `base:` chain is merged first (merge.py).
- `--set KEY=VALUE` and `--model-path` apply after that (overrides.py); then the recipe is
  validated, and an error names the file's line (or the base file's), the dotted field and what is
  allowed (with a did-you-mean for typos).
- `load_recipes`: every experiment a file holds: one LoadedRecipe for a recipe, none for a base-only
  file (`abstract: true`), one per cell of a study file (`matrix`/`variants`), whose cells the
  caller's `studies` expands (runner/wings.py hands in the study wing's, which uses
  `read_recipe_file` and `finish` from here for each cell); without one, a study file is
  an error."""

from __future__ import annotations

import copy
import difflib
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from runner.base.dotted import get_dotted, overlaps, set_dotted
from runner.base.errors import RecipeError
from runner.config.merge import Source, with_bases
from runner.config.overrides import FILE_KEYS, apply_overrides, model_classes, sections_with
from runner.config.yamlfile import NOT_A_RECIPE, line_of, read_yaml
from runner.engines import ENGINE_KINDS, spec_class
from runner.recipe import LoadedRecipe, Recipe

Locate = Callable[[tuple, str], str]
Keep = Callable[[str], bool]  # --only: the names of the experiments to load
MAX_ERRORS = 8
# top-level keys of a recipe file besides the recipe's own: `base`, `abstract` (config/merge.py),
# the study keys (runner/study/load.py) and `tune` (runner/tune/spec.py)


@dataclass(frozen=True)
class RecipeFile:
    path: Path
    data: dict  # the recipe data, merged over its bases, without FILE_KEYS
    keys: dict[str, Any]  # the FILE_KEYS it sets (but `base`)
    sources: list[Source]  # the file, then its bases (for line numbers)

    @property
    def is_study(self) -> bool:
        return bool(self.keys.get("matrix") or self.keys.get("variants"))


def with_settings(f: RecipeFile, settings: dict[str, Any], what: str = "") -> dict:
    """A copy of the file's data with a copy of each value set at its dotted key (replacing what is
    there); a key whose way holds a value that is not a mapping is an error led by `what`."""
    data = copy.deepcopy(f.data)
    for k, v in settings.items():
        try:
            set_dotted(data, k, copy.deepcopy(v))
        except TypeError as e:
            raise RecipeError(f"{what}cannot set {k}: {e}", file=str(f.path), field=k) from None
    return data


def read_recipe_file(path: str | Path) -> RecipeFile:
    path = Path(path)
    data, node = read_yaml(path)
    merged, sources = with_bases(path, data, node)
    keys = {k: merged.pop(k) for k in FILE_KEYS if k in merged}  # with_bases drops `base`
    abstract = keys.get("abstract", False)
    if not isinstance(abstract, bool):
        raise RecipeError(
            f"expected true or false, got {abstract!r}", file=str(path), field="abstract"
        )
    return RecipeFile(path, merged, keys, sources)


def locator(sources: list[Source], sets: dict, origins: tuple = ()) -> Locate:
    """locate(loc, dotted) -> `line N, ` / `base.yaml line N, ` / "" for an error at loc. `origins`:
    the YAML locations of a study cell's settings (its own matrix value or variant key, found
    first)."""

    def at(src_loc: tuple) -> str | None:
        for i, src in enumerate(sources):
            line = line_of(src.node, src_loc, exact=True)
            if line is not None:
                return f"line {line}, " if i == 0 else f"{src.path.name} line {line}, "
        return None

    def locate(loc: tuple, dotted: str) -> str:
        # a value --set gave (or one inside it: `--set 'sampling.stop=[a, ""]'` fails at
        # sampling.stop.1): no line of the file, which did not say it
        if any(dotted == k or dotted.startswith(k + ".") for k in sets):
            return ""
        for origin in origins:
            if overlaps(str(origin[-1]), dotted):
                return at(origin) or ""
        line = line_of(sources[0].node, loc)  # where the file itself comes closest
        return at(loc) or (f"line {line}, " if line else "")

    return locate


def _submodel(loc: tuple, data: dict) -> type[BaseModel] | None:
    """The recipe model class that holds the field at loc[-1] (for listing allowed keys)."""
    cur: type[BaseModel] | None = Recipe
    for part in loc[:-1]:
        if isinstance(part, int):  # a list index: `cur` is already the item type
            continue
        if cur is None or part not in cur.model_fields:
            return None
        ann = cur.model_fields[part].annotation
        if typing.get_origin(ann) is list:
            ann = typing.get_args(ann)[0]
        cur = (model_classes(ann) or [None])[0]
        if part == "engine":  # its kind's spec (a key below it means pydantic read a valid kind)
            cur = spec_class(data["engine"]["kind"])
    return cur


def _did_you_mean(value: str, allowed: list[str]) -> str:
    """The closest allowed spelling, else the allowed names that end with it (`f1` -> `squad_f1`,
    `char_f1`)."""
    ends = sorted((a for a in allowed if a.endswith("_" + value)), key=len)[:3]
    close = difflib.get_close_matches(value, allowed, n=1) or ends
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."


def _unknown_key(loc: tuple, data: Any, set_by_call: bool) -> str:
    holder = _submodel(loc, data)
    allowed = sorted(holder.model_fields) if holder else []
    if len(loc) == 1:  # a file's top level also takes the study keys
        allowed = sorted([*allowed, *FILE_KEYS])
    key = str(loc[-1])
    msg = f"--set {'.'.join(map(str, loc))}: no such key" if set_by_call else f"unknown key {key!r}"
    # at the top level: the sections that have such a field (`max_tokens` -> `sampling.max_tokens`),
    # unless a top-level key is spelled nearly so (`metric` is `metrics`, not `gate.metric`)
    near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.8)
    homes = sections_with(key) if len(loc) == 1 and not near else []
    if homes:
        msg += f"; did you mean {' or '.join(map(repr, homes))}?"
    elif kinds := _kinds_with(loc, data):  # (the hint says what to do: see `kind_hint`)
        msg += f" (a setting of the {' and '.join(kinds)} engine; this one's kind is "
        msg += f"{data['engine']['kind']!r})."
    else:
        msg += _did_you_mean(key, allowed)
    return msg + (" Allowed here: " + ", ".join(allowed) if allowed else "")


def _kinds_with(loc: tuple, data: Any) -> list[str]:
    """The other engine kinds that have the setting at `loc` (where it is one of `engine`)."""
    engine = data.get("engine") if isinstance(data, dict) else None
    if len(loc) != 2 or loc[0] != "engine" or not isinstance(engine, dict):
        return []
    kind = engine.get("kind")
    return [k for k in ENGINE_KINDS if k != kind and loc[1] in spec_class(k).model_fields]


def kind_hint(errs: list[dict], data: Any) -> str | None:
    """Where settings of another engine kind are refused: a `kind` set over another kind's
    settings (by a base, a variant, an axis or --set) keeps them."""
    if not any(e["type"] == "extra_forbidden" and _kinds_with(_loc(e), data) for e in errs):
        return None
    kind = data["engine"]["kind"]
    return (
        "leave out the settings of other kinds; where a base, a variant, an axis or --set gives "
        "the engine another kind, give the whole `engine:` mapping, not its `kind` alone (e.g. "
        f"`engine: {{kind: {kind}}}`, or --set 'engine={{kind: {kind}}}')"
    )


def _loc(err: dict) -> tuple:
    """The error's location in the recipe: discriminated unions insert the tag into it
    (engine.vllm.x -> engine.x)."""
    raw = tuple(err["loc"])
    return tuple(
        p for i, p in enumerate(raw) if not (i > 0 and raw[i - 1] == "engine" and p in ENGINE_KINDS)
    )


def describe_error(err: dict, data: Any, sets: dict[str, str]) -> tuple[tuple, str]:
    loc = _loc(err)
    dotted, typ, given = ".".join(str(p) for p in loc), err["type"], err.get("input")
    kinds = ", ".join(repr(k) for k in ENGINE_KINDS)
    if typ == "extra_forbidden":
        return loc, _unknown_key(loc, data, dotted in sets)
    if typ == "missing":
        return loc, "required field is missing"
    if typ == "string_pattern_mismatch" and loc == ("name",):
        rule = "letters, digits and `._-`, starting with a letter or digit, e.g. `jsquad-vllm-fp8`"
        return loc, f"{given!r} is not a valid name: {rule}"
    if typ == "union_tag_invalid":  # (the engine's; pydantic reads a tag from a mapping only)
        return loc + ("kind",), f"unknown engine kind {given.get('kind')!r}; allowed: {kinds}"
    if typ == "union_tag_not_found":
        return loc + ("kind",), f"missing `kind`; allowed: {kinds}"
    if typ == "literal_error" and loc and loc[0] == "metrics":
        from runner.scoring import METRICS

        return (
            loc,
            f"unknown metric {given!r}{_did_you_mean(str(given), list(METRICS))} Allowed: "
            + ", ".join(METRICS),
        )
    if loc == ("engine",) and isinstance(given, str):
        allowed = ", ".join(ENGINE_KINDS)
        return (
            loc,
            f"expected a mapping with a `kind`, e.g. `engine: {{kind: {given}}}`; allowed kinds: "
            f"{allowed}",
        )
    if typ == "model_type" and loc and isinstance(loc[-1], str) and not isinstance(given, dict):
        # a section given one value
        named = loc == ("model",) and isinstance(given, str) and given.strip()
        example = f"{{id: {given}}}" if named else "{key: value}"
        what = "a list" if isinstance(given, list) else repr(given)
        return loc, f"expected a mapping of settings, e.g. `{loc[-1]}: {example}`; got {what}"
    if typ == "list_type" and isinstance(given, str | int | float) and loc:
        # one value where a list goes: the list of it (`a, b`: of them), each item quoted where
        # YAML would read it as something else (`"\n"`, `"1"`, `"yes"`)
        several = isinstance(given, str) and "," in given
        items = [x.strip(" ") for x in given.split(",") if x.strip(" ")] if several else [given]
        shown = ", ".join(map(_as_yaml, items))
        return loc, f"expected a list, e.g. `{loc[-1]}: [{shown}]`"
    return loc, _plain(err)


def _as_yaml(x: Any) -> str:
    """`x` as a YAML flow item that reads back as itself."""
    if not isinstance(x, str):
        return str(x)
    try:
        same = yaml.safe_load(f"[{x}]") == [x]
    except yaml.YAMLError:
        same = False
    return x if same else json.dumps(x, ensure_ascii=False)


def _plain(err: dict) -> str:
    """Pydantic's own message, with the input it got."""
    typ, given = err["type"], err.get("input")
    # a check of ours: its message says it all; a whole mapping as input would not help
    if typ == "value_error":
        msg = err["msg"].removeprefix("Value error, ")
        return msg if isinstance(given, dict) else msg + f" (got {repr(given)[:60]})"
    if "input" in err and typ not in ("model_type", "dict_type"):
        return err["msg"] + f" (got {repr(given)[:60]})"
    return err["msg"]


def error_lines(errs: list, data: Any, sets: dict[str, str], locate: Locate) -> list[str]:
    """One line per error of `ValidationError.errors()` (at most MAX_ERRORS):
    `  line 6, engine.quantizaton: unknown key ...`; `locate(loc, dotted)` gives the `line 6, `
    part."""
    lines = []
    for err in errs[:MAX_ERRORS]:
        loc, msg = describe_error(err, data, sets)
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        lines.append(f"  {locate(loc, dotted)}{dotted}: {msg}")
    if len(errs) > MAX_ERRORS:
        lines.append(f"  ... and {len(errs) - MAX_ERRORS} more")
    return lines


# a file with none of these is no recipe (a data file given by mistake, say)
RECIPE_KEYS = {"name", "base", "model", "engine", "dataset", "prompt", "sampling", "matrix"}


def finish(
    f: RecipeFile,
    overrides: list[str],
    mp: Mapping[str, str],
    origins: tuple = (),
    title: str = "invalid recipe",
) -> LoadedRecipe:
    """The file's recipe data (a study hands in each cell as a file, with the `origins` of its
    settings, see `locator`) with the call's overrides, validated, as a LoadedRecipe (the study sets
    its `cell`). Without a `name`, the error's hint says what a file of shared settings needs."""
    where, data = str(f.path), f.data
    hint = (
        f"add `name: {f.path.stem}` (its report folder's name); a file that only holds shared "
        "settings for other files' `base:` needs `abstract: true` instead"
    )
    hint = None if "name" in data else hint
    if not RECIPE_KEYS & set(data):  # a data file given as a recipe
        hint = NOT_A_RECIPE
    sets, extra = apply_overrides(data, overrides, mp, where)
    base_dir = f.path.resolve().parent
    # a model folder named ./ or ../, and a compile cache folder: relative to the recipe file, like
    # every other path in it
    for key in ("model.id", "model.tokenizer", "engine.compile_cache"):
        v = get_dotted(data, key)
        if not isinstance(v, str) or not v:
            continue
        if v.startswith(("./", "../")) if key.startswith("model.") else not Path(v).is_absolute():
            set_dotted(data, key, str((base_dir / v).resolve()))
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        lines = error_lines(e.errors(), data, sets, locator(f.sources, sets, origins))
        hint = kind_hint(e.errors(), data) or hint
        raise RecipeError(title + "\n" + "\n".join(lines), file=where, hint=hint) from None
    return LoadedRecipe(
        recipe=recipe,
        path=str(f.path.resolve()),
        base_dir=str(base_dir),
        overrides=[*overrides, *extra],
    )


def check_abstract(f: RecipeFile) -> None:
    """A base-only file may leave fields out; anything it does say must still be right."""
    try:
        Recipe.model_validate(f.data)
    except ValidationError as e:
        errs = [x for x in e.errors() if x["type"] not in ("missing", "union_tag_not_found")]
        if errs:
            lines = error_lines(errs, f.data, {}, locator(f.sources, {}))
            raise RecipeError(
                "invalid base file (abstract: true)\n" + "\n".join(lines), file=str(f.path)
            ) from None


def load_file(
    f: RecipeFile, overrides: list[str], *, model_paths: Mapping[str, str]
) -> list[LoadedRecipe]:
    """The experiment a plain recipe file holds (none for a base-only file). `model_paths`: hub id
    -> local folder (--model-path), applied to model.id / model.tokenizer after the overrides."""
    if f.is_study:
        raise RecipeError(
            "is a study file (`matrix`/`variants`); load it with runner.load_recipes",
            file=str(f.path),
        )
    for k, what in (("exclude", "exclude"), ("report", "arrange in a report")):
        if f.keys.get(k):
            msg = f"only a study (a file with `matrix` or `variants`) has cells to {what}"
            raise RecipeError(msg, file=str(f.path), field=k)
    if f.keys.get("abstract"):
        check_abstract(f)
        return []
    return [finish(f, overrides, model_paths)]


Studies = Callable[["RecipeFile", list[str], Mapping[str, str], "Keep | None"], list[LoadedRecipe]]


def load_recipes(
    path: str | Path,
    overrides: list[str] | None = None,
    *,
    model_paths: Mapping[str, str] | None = None,
    keep: Keep | None = None,
    studies: Studies | None = None,
) -> list[LoadedRecipe]:
    """One LoadedRecipe per experiment in the file: 1 (recipe), one per cell (a study, expanded by
    `studies`), 0 (abstract); `keep`: only those whose name it keeps are validated (`--only`: a
    `--set` is not checked against experiments the call does not run)."""
    f = read_recipe_file(path)
    overrides, mp = list(overrides or []), dict(model_paths or {})
    if f.is_study and studies is not None:
        return studies(f, overrides, mp, keep)
    name = f.data.get("name")
    if not f.is_study and keep is not None and isinstance(name, str) and not keep(name):
        return []
    return load_file(f, overrides, model_paths=mp)  # a study file without `studies`: refused there
