"""`base:` chains: a recipe file that starts from another file and overrides it.

- `base: other.yaml` names a file relative to the file that names it (an absolute path works too).
  The base may itself have a `base:`; at most `MAX_BASES` files in a chain; a loop is an error.
- Merging: mappings merge key by key (the file's value wins), anything else - lists included - is
  replaced whole. `matrix` axes and `variants` merge one level deep: an axis or variant the file
  names replaces the base's of the same key whole. `abstract` is never inherited.
- Paths written in a base are relative to the base: when the base lies in another folder, its
  `dataset.path`, `prompt.shots.source.path`, `model.id`/`model.tokenizer` written `./..`/`../..`,
  and template paths that name a folder (`sub/x.j2`) are rewritten relative to the loaded file.
  A template named without a folder (`jsquad.j2`) is rewritten too where that file lies beside the
  base (as loading the base itself would find it first); else it stays a name, found as usual from
  the loaded file (beside it, then in templates/).
"""

from __future__ import annotations

import copy
import difflib
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from runner.base.dotted import get_dotted, set_dotted
from runner.base.errors import RecipeError
from runner.config.yamlfile import line_of, read_yaml

MAX_BASES = 16
ONE_LEVEL = ("matrix", "variants")


@dataclass(frozen=True)
class Source:
    """One file of a chain: its path and YAML tree (for line numbers)."""

    path: Path
    node: yaml.Node | None


def deep_merge(base: Any, over: Any, levels: int = -1) -> Any:
    """`over` on top of `base`: mappings merge key by key, `levels` deep (-1: all the way down),
    everything else is replaced."""
    if levels and isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: deep_merge(base.get(k), v, levels - 1) for k, v in over.items()}}
    return copy.deepcopy(over)


def rebase_paths(data: dict, src: Path, dst: Path) -> dict:
    """Relative paths of a file in folder `src`, rewritten for a file in folder `dst`
    (lexically)."""
    if src == dst:
        return data
    data = copy.deepcopy(data)
    for key in (
        "dataset.path",
        "prompt.shots.source.path",
        "model.id",
        "model.tokenizer",
        "prompt.template",
        "prompt.system_template",
    ):
        v = get_dotted(data, key)
        if not isinstance(v, str) or not v or v.startswith("~") or Path(v).is_absolute():
            continue
        if key.startswith("model."):  # a folder when written ./ or ../ (else a hub id)
            moves = v.startswith(("./", "../"))
        elif key.endswith(".path"):  # a dataset file, unless it names a hub dataset
            moves = get_dotted(data, key.removesuffix("path") + "format") != "hub"
        else:  # a template named with its folder, or beside the base (else found as usual)
            moves = "/" in v or _is_file(src / v)
        if moves:
            set_dotted(data, key, os.path.relpath(os.path.normpath(src / v), dst))
    return data


def _is_file(path: Path) -> bool:
    """False too for a name the file system cannot take (an inline template, say)."""
    try:
        return path.is_file()
    except OSError:
        return False


def with_bases(path: Path, data: dict, node: yaml.Node | None) -> tuple[dict, list[Source]]:
    """The file's data merged over its chain of bases, and the chain (the file first)."""
    top_dir = path.resolve().parent
    sources, layers, seen = [Source(path, node)], [data], [path.resolve()]
    cur_path, cur, cur_node = path, data, node
    while "base" in cur:
        ref = cur["base"]
        bad = partial(
            RecipeError,
            file=str(cur_path),
            field="base",
            line=line_of(cur_node, ("base",), exact=True),
        )
        if not isinstance(ref, str) or not ref.strip():
            raise bad(f"expected the path of another recipe file, got {ref!r}")
        bpath = cur_path.parent / Path(ref).expanduser()  # an absolute path stays itself
        if bpath.resolve() in seen:
            raise bad(f"base chain loops: {' -> '.join(str(p) for p in [*seen, bpath.resolve()])}")
        if not bpath.is_file():
            # not this file, nor one already in the chain (offered, it would loop)
            chain = {*seen, cur_path.resolve()}
            there = [
                p.name
                for p in (bpath.parent.glob("*.y*ml") if bpath.parent.is_dir() else [])
                if p.resolve() not in chain
            ]
            close = difflib.get_close_matches(bpath.name, there, n=1, cutoff=0.75)
            raise bad(
                f"base file {ref!r} {'is not a file' if bpath.exists() else 'not found'} (looked "
                f"for {bpath})",
                hint=f"did you mean {close[0]!r}?" if close else None,
            )
        if len(seen) >= MAX_BASES:
            raise bad(f"more than {MAX_BASES} files in the base chain", line=None)
        seen.append(bpath.resolve())
        (cur, cur_node), cur_path = read_yaml(bpath), bpath
        sources.append(Source(bpath, cur_node))
        layers.append(rebase_paths(cur, bpath.resolve().parent, top_dir))
    merged: dict = {}
    for layer in reversed(layers):
        for k, v in layer.items():
            if k != "base" and (k != "abstract" or layer is data):  # the file's own `abstract`
                merged[k] = deep_merge(merged.get(k), v, 1 if k in ONE_LEVEL else -1)
    return merged, sources
