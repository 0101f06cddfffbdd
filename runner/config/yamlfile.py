"""Reading a recipe file's YAML with every cost bounded.

A recipe is a few kilobytes; a file that is not one must fail in seconds, naming the file:
- at most `MAX_BYTES` (1 MiB) of text;
- at most `MAX_DEPTH` (50) nested mappings/lists (PyYAML composes recursively: deeper input would
  end in a RecursionError);
- at most `MAX_VALUES` (100,000) values once aliases are expanded (an 800-byte "billion laughs"
  file expands to 10**9; everything after parsing walks the expanded tree);
- no alias inside the mapping or list it names (a structure that contains itself);
- no key twice in one mapping (YAML lets the second silently replace the first).

Only the safe loader is used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from runner.errors import RecipeError

MAX_BYTES = 1 << 20
MAX_DEPTH = 50
MAX_VALUES = 100_000


class _TooDeep(Exception):
    def __init__(self, line: int):
        self.line = line


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than MAX_DEPTH while composing."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # type: ignore[override]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _count_values(root: yaml.Node, where: str) -> None:
    """Values in the tree with aliases expanded, counted in time linear in the file (memoized per node)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise RecipeError(
                "an alias (*name) refers to a mapping or list that contains it; a recipe cannot contain itself",
                file=where,
                line=_line(node),
            )
        active.add(key)
        n = 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                n += size(k) + size(v)
                if n > MAX_VALUES:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                n += size(v)
                if n > MAX_VALUES:
                    break
        active.discard(key)
        if n > MAX_VALUES:
            raise RecipeError(
                f"the YAML holds more than {MAX_VALUES:,} values once its aliases (*name) are "
                "expanded; a recipe is far smaller",
                file=where,
                line=_line(node),
                hint="write the values out instead of nesting aliases",
            )
        sizes[key] = n
        return n

    size(root)


def _no_duplicate_keys(root: yaml.Node, where: str) -> None:
    """Each mapping node is checked once, however many aliases point at it."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for k, v in node.value:
                key = str(k.value)
                if key in seen and key != "<<":
                    raise RecipeError(
                        f"key {key!r} appears twice (first on line {seen[key]}); the second would "
                        "silently replace the first",
                        file=where,
                        line=_line(k),
                    )
                seen[key] = _line(k)
                stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _read_text(path: Path, where: str) -> str:
    if not path.exists():
        raise RecipeError("file not found", file=where)
    if path.is_dir():
        raise RecipeError("is a folder, not a recipe file", file=where)
    with path.open("rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise RecipeError(f"file is larger than {MAX_BYTES // (1 << 20)} MiB; a recipe is a few kilobytes", file=where)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecipeError(
            f"not UTF-8 text (bad byte at offset {e.start})", file=where, hint="save the recipe as UTF-8"
        ) from None


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """(data, root node) of a recipe file; RecipeError naming the file for anything else."""
    where = str(path)
    text = _read_text(path, where)
    if not text.strip():
        raise RecipeError("file is empty; a recipe needs at least name, model, engine, dataset, prompt", file=where)
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise RecipeError("file holds no YAML document", file=where)
        _count_values(node, where)
        _no_duplicate_keys(node, where)
        data = loader.construct_document(node)
    except _TooDeep as e:
        raise RecipeError(
            f"nested more than {MAX_DEPTH} levels deep; a recipe needs fewer than 10", file=where, line=e.line
        ) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        line = mark.line + 1 if mark else None
        raise RecipeError(
            f"YAML syntax error: {e.problem}" + (f" ({e.context})" if e.context else ""), file=where, line=line
        ) from None
    except yaml.YAMLError as e:
        raise RecipeError(f"YAML error: {e}", file=where) from None
    except (ValueError, OverflowError) as e:  # e.g. an integer of more than 4,300 digits
        raise RecipeError(f"YAML value cannot be read: {e}", file=where) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise RecipeError(f"a recipe must be a mapping of keys, got {type(data).__name__}", file=where)
    return data, node


def line_of(root: yaml.Node | None, loc: tuple, exact: bool = False) -> int | None:
    """1-based line of the deepest node of `loc` present in the YAML tree (the root's line when none is);
    with `exact`, None unless the whole of `loc` is there."""
    node, line = root, None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(part):
                    line, nxt = k.start_mark.line + 1, v
                    break
            if nxt is None:
                return None if exact else _fallback(line, root)
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return None if exact else _fallback(line, root)
    return _fallback(line, root)


def _fallback(line: int | None, root: yaml.Node | None) -> int | None:
    return line if line is not None else (root.start_mark.line + 1 if root is not None else None)
