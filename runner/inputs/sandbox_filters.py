"""The Jinja filters of BoundedSandbox (sandbox.py), checked: each one ticks the deadline, refuses an
input too large to work on, runs its own check where an argument sets the size of what it makes
(`center`, `indent`, `wordwrap`, `replace`, `format`, `join`, `tojson`, `batch`, `slice`, `sum`),
and charges what it returns to the render's work."""

from __future__ import annotations

from typing import Any

from jinja2 import pass_context
from jinja2.utils import _PassArg

from runner.inputs.bounds import (
    MAX_CHARS,
    MAX_RANGE,
    charge,
    check_percent,
    check_replace,
    check_size,
    joined_size,
    refuse,
    size_of,
    tick,
)


def _text_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    for v in (value, *args, *kwargs.values()):
        if not isinstance(v, (int, float, type(None))):
            check_size(v, "a filter's input")


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    return kwargs[name] if name in kwargs else (args[i] if len(args) > i else default)


def _center_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    width = _arg(args, kwargs, 0, "width", 80)
    if isinstance(width, int) and width > MAX_CHARS:
        raise refuse(f"center({width:,}) would give more than {MAX_CHARS:,} characters")


def _indent_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    width = _arg(args, kwargs, 0, "width", 4)
    ind = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    if ind * (str(value).count("\n") + 1) + len(str(value)) > MAX_CHARS:
        raise refuse(f"indent() would give more than {MAX_CHARS:,} characters")


def _wordwrap_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    s, width, wrap = str(value), _arg(args, kwargs, 0, "width", 79), _arg(args, kwargs, 2, "wrapstring", None)
    breaks = len(s) // max(width, 1) + s.count("\n") + 1 if isinstance(width, int) else len(s)
    if len(s) + breaks * len(wrap or "\n") > MAX_CHARS:
        raise refuse(f"wordwrap() would give more than {MAX_CHARS:,} characters")


def _replace_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    count = _arg(args, kwargs, 2, "count", None)
    check_replace(
        value, _arg(args, kwargs, 0, "old", ""), _arg(args, kwargs, 1, "new", ""), -1 if count is None else count
    )


def _format_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    check_percent(str(value), kwargs or args)


def _join_pre(value: Any, *args: Any, **kwargs: Any) -> list:
    items = list(value)
    if joined_size(items) + len(str(_arg(args, kwargs, 0, "d", ""))) * len(items) > MAX_CHARS:
        raise refuse(f"join would give more than {MAX_CHARS:,} characters")
    return items


def _tojson_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    indent = _arg(args, kwargs, 0, "indent", None)
    if isinstance(indent, int) and indent > 16 or 6 * size_of(value) > MAX_CHARS:
        raise refuse(f"tojson would give more than {MAX_CHARS:,} characters (or an indent above 16)")


def _batch_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    n, fill = _arg(args, kwargs, 0, "linecount", 0), _arg(args, kwargs, 1, "fill_with", None)
    if isinstance(n, int) and (n > MAX_RANGE or fill is not None and n * size_of(fill) > MAX_CHARS):
        raise refuse(f"batch/slice into {n:,} (at most {MAX_RANGE:,}, and padding of at most {MAX_CHARS:,} characters)")


def _slice_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    _batch_pre(value, _arg(args, kwargs, 0, "slices", 0), _arg(args, kwargs, 1, "fill_with", None))


def _sum_pre(value: Any, *args: Any, **kwargs: Any) -> None:
    if not isinstance(_arg(args, kwargs, 1, "start", 0), (int, float)):
        raise refuse("sum() with a start that is not a number (sum adds numbers; use join for text)")


_TEXT_FILTERS = {
    "capitalize",
    "e",
    "escape",
    "forceescape",
    "lower",
    "pprint",
    "safe",
    "string",
    "striptags",
    "title",
    "trim",
    "truncate",
    "upper",
    "urlencode",
    "urlize",
    "wordcount",
    "xmlattr",
    "list",
}
_SPECIAL = {
    "center": _center_pre,
    "indent": _indent_pre,
    "wordwrap": _wordwrap_pre,
    "replace": _replace_pre,
    "format": _format_pre,
    "join": _join_pre,
    "tojson": _tojson_pre,
    "batch": _batch_pre,
    "slice": _slice_pre,
    "sum": _sum_pre,
}


def _checked_filter(orig: Any, pre: Any) -> Any:
    pass_arg = _PassArg.from_obj(orig)

    @pass_context  # context filters are never folded at compile time
    def run(context: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        tick()
        _text_pre(value, *args, **kwargs)
        if pre is not None:
            new = pre(value, *args, **kwargs)
            value = value if new is None else new
        lead = {
            _PassArg.context: (context,),
            _PassArg.eval_context: (context.eval_ctx,),
            _PassArg.environment: (context.environment,),
        }.get(pass_arg, ())  # type: ignore[arg-type]
        out = orig(*lead, value, *args, **kwargs)
        if isinstance(out, (str, list, tuple)):
            charge(len(out))
        return out

    run.__name__, run.__doc__ = getattr(orig, "__name__", "filter"), getattr(orig, "__doc__", None)
    return run


def bound_filters(filters: dict[str, Any]) -> None:
    """Replace the filters that make text (and those with a size argument) by their checked versions."""
    for name in list(filters):
        if name in _TEXT_FILTERS or name in _SPECIAL:
            filters[name] = _checked_filter(filters[name], _SPECIAL.get(name))
