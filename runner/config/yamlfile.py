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

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from runner.base.errors import RecipeError

# the hint for a file that is no recipe (a data file given by mistake, say)
NOT_A_RECIPE = (
    "a recipe is a .yaml file of settings; a dataset is named in a recipe's `dataset.path`"
)

MAX_BYTES = 1 << 20
MAX_DEPTH = 50
MAX_VALUES = 100_000


class _TooDeep(Exception):
    """args[0]: the line that goes one level too deep."""


class _BoundedLoader(yaml.SafeLoader):
    _depth = 0

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


def _count_values(root: yaml.Node, err: Callable[..., RecipeError]) -> None:
    """Values in the tree with aliases expanded, counted in time linear in the file (memoized per
    node)."""
    sizes = {}  # id(node) -> values below it (0 while they are being counted)

    def size(node: yaml.Node) -> int:
        key = id(node)
        if sizes.get(key):
            return sizes[key]
        if key in sizes:  # being counted: an alias inside what it names
            msg = (
                "an alias (*name) refers to a mapping or list that contains it; a recipe cannot "
                "contain itself"
            )
            raise err(msg, line=_line(node))
        sizes[key] = 0
        n = 1
        for item in node.value if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) else ():
            # (key, value) or value
            n += size(item[0]) + size(item[1]) if isinstance(item, tuple) else size(item)
            if n > MAX_VALUES:
                break
        if n > MAX_VALUES:
            msg = (
                f"the YAML holds more than {MAX_VALUES:,} values once its aliases (*name) are "
                "expanded"
            )
            hint = "write the values out instead of nesting aliases"
            raise err(f"{msg}; a recipe is far smaller", line=_line(node), hint=hint)
        sizes[key] = n
        return n

    size(root)


def _no_duplicate_keys(root: yaml.Node, err: Callable[..., RecipeError]) -> None:
    """Each mapping node is checked once, however many aliases point at it."""
    seen_nodes, stack = set(), [root]
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
                    msg = (
                        f"key {key!r} appears twice (first on line {seen[key]}); the second "
                        "would silently replace"
                    )
                    raise err(f"{msg} the first", line=_line(k))
                seen[key] = _line(k)
                stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """(data, root node) of a recipe file; RecipeError naming the file for anything else."""
    err = partial(RecipeError, file=str(path))
    if not path.exists():
        raise err("file not found")
    if path.is_dir():
        raise err("is a folder, not a recipe file")
    with path.open("rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise err(f"file is larger than {MAX_BYTES // (1 << 20)} MiB; a recipe is a few kilobytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise err(
            f"not UTF-8 text (bad byte at offset {e.start})", hint="save the recipe as UTF-8"
        ) from None
    if not text.strip():
        raise err("file is empty; a recipe needs at least name, model, engine, dataset, prompt")
    return _parse(text, err)


def _parse(text: str, err: Callable[..., RecipeError]) -> tuple[Any, yaml.Node | None]:
    try:
        loader = _BoundedLoader(text)
    except yaml.reader.ReaderError as e:  # a control character: PyYAML checks the whole text first
        line = text.count("\n", 0, e.position) + 1
        col = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        why = f"a control character (0x{e.character:02x}) at column {col}: YAML allows none there"
        hint = (
            "delete it (text pasted from a colored terminal carries them; `cat -v FILE` shows "
            "them as ^[)"
        )
        raise err(why, line=line, hint=hint) from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise err("file holds no YAML document")
        _count_values(node, err)
        _no_duplicate_keys(node, err)
        data = loader.construct_document(node)
    except _TooDeep as e:
        raise err(
            f"nested more than {MAX_DEPTH} levels deep; a recipe needs fewer than 10",
            line=e.args[0],
        ) from None
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else None
        # where the context began, when it is another line (an unclosed `{` or `[`)
        began = e.context_mark.line + 1 if e.context_mark else None
        context = ""
        if e.context:
            context = f" ({e.context}" + (f" on line {began})" if began and began != line else ")")
        raise err(f"YAML syntax error: {e.problem}{context}", line=line) from None
    except yaml.YAMLError as e:
        raise err(f"YAML error: {e}") from None
    except (ValueError, OverflowError) as e:  # e.g. an integer of more than 4,300 digits
        raise err(f"YAML value cannot be read: {e}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise err(
            f"a recipe must be a mapping of keys, got {type(data).__name__}", hint=NOT_A_RECIPE
        )
    return data, node


def line_of(root: yaml.Node | None, loc: tuple, exact: bool = False) -> int | None:
    """1-based line of the deepest node of `loc` present in the YAML tree (the root's line when none
    is); with `exact`, None unless the whole of `loc` is there."""
    node, line = root, None
    for part in loc:
        hit = None  # (the node whose line counts, the node to go on from)
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if k.value == str(part)), None)
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            hit = (node.value[part], node.value[part])
        if hit is None:
            if exact:
                return None
            break
        line, node = _line(hit[0]), hit[1]
    return line if line is not None or root is None else _line(root)
