"""Dotted keys (`engine.engine_args.max_num_seqs`) in nested mappings."""

from __future__ import annotations

from typing import Any


def overlaps(a: str, b: str) -> bool:
    """The same key, or one inside the other (`engine` and `engine.quantization`)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def set_dotted(data: dict, key: str, value: Any) -> None:
    """Set `value` at a dotted key (replacing what is there), making missing mappings on the way.
    TypeError when a part of the way holds a value that is not a mapping."""
    *path, last = key.split(".")
    cur = data
    for p in path:
        if cur.get(p) is None:
            cur[p] = {}
        if not isinstance(cur[p], dict):
            raise TypeError(f"{p!r} is not a mapping")
        cur = cur[p]
    cur[last] = value


def get_dotted(data: Any, key: str) -> Any:
    for p in key.split("."):
        if not isinstance(data, dict) or p not in data:
            return None
        data = data[p]
    return data


def flat_dotted(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys to their leaf values (`{"a": {"b": 1}}` -> `{"a.b": 1}`); an
    empty mapping has no leaves, so it names no key."""
    if not isinstance(data, dict):
        return {prefix[:-1]: data}
    return {
        k: v for key, sub in data.items() for k, v in flat_dotted(sub, f"{prefix}{key}.").items()
    }
