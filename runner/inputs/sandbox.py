"""A Jinja sandbox that also bounds the work a template can do.

The recipe's timeout covers only the engine process; templates compile and render in the runner
itself. ImmutableSandboxedEnvironment keeps a template away from Python internals and from
changing its inputs; BoundedSandbox also keeps it from running away:

- numbers: `*`, `**` and `+` are checked before they run; an integer of more than
  MAX_INT_DIGITS digits (Python's own limit for printing one) is refused, so `10**(10**8)`
  fails at once instead of computing for minutes;
- text and lists: a result longer than MAX_CHARS characters (or MAX_ITEMS items) is refused
  before it is built: `'x' * 10**9`, `%` and `format` widths, `center`/`ljust`/`replace`/`join`,
  `~`, the filters that make text, and printing a list (measured before `str()` builds it);
- work: the checked operations of one render may produce WORK_CHARS characters in all;
- `range()` is limited to MAX_RANGE items, `lipsum()` to LIPSUM_MAX paragraphs;
- time: every loop step, call and attribute lookup checks the deadline set by `limits()`
  (cooperative, so it works in any thread and needs no signal);
- nothing runs at compile time: `optimized=False`, intercepted operators are never folded, and the
  checked filters take the context, which keeps Jinja from folding them.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from functools import update_wrapper
from typing import Any

from jinja2 import nodes, pass_eval_context
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import generate_lorem_ipsum
from jinja2.visitor import NodeTransformer
from markupsafe import Markup

from runner.inputs.bounds import (
    LIPSUM_MAX,
    MAX_CHARS,
    MAX_RANGE,
    BoundedEscapeFormatter,
    BoundedFormatter,
    TemplateLimit,
    charge,
    check_binop,
    check_size,
    check_str_call,
    joined_size,
    refuse,
    tick,
)
from runner.inputs.sandbox_filters import bound_filters


def bounded_range(*args: int) -> range:
    r = range(*args)
    try:
        n = len(r)
    except OverflowError:
        n = MAX_RANGE + 1
    if n > MAX_RANGE:
        raise refuse(f"range() of more than {MAX_RANGE:,} items")
    return r


def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
    ints = all(isinstance(x, int) for x in (n, min, max))
    if not (ints and 0 <= n <= LIPSUM_MAX and 1 <= min <= max <= 10 * LIPSUM_MAX):
        raise refuse(f"lipsum(n={n}, min={min}, max={max}) (at most n={LIPSUM_MAX}, max={10 * LIPSUM_MAX})")
    return generate_lorem_ipsum(n, html, min, max)


def _ticking(iterable: Any) -> Iterator[Any]:
    """What every `{% for %}` iterates through: checks the deadline every 256 steps."""
    for n, x in enumerate(iterable):
        if not n & 255:
            tick()
        yield x


@pass_eval_context
def _concat(eval_ctx: Any, items: list) -> str:
    """`a ~ b`, refused before it would pass MAX_CHARS."""
    if joined_size(items) > MAX_CHARS:
        raise refuse(f"`~` would give more than {MAX_CHARS:,} characters")
    out = markup_join(items) if eval_ctx.autoescape else str_join(items)
    charge(len(out))
    return out


def bounded_concat(parts: Any) -> str:
    """Environment.concat: joins what a template (or a block, a macro) renders, stopping at MAX_CHARS."""
    out, total = [], 0
    for p in parts:
        total += len(p)
        if total > MAX_CHARS:
            raise TemplateLimit(f"the text it renders is longer than {MAX_CHARS:,} characters")
        out.append(p)
    return "".join(out)


def _finalize(value: Any) -> Any:
    if not isinstance(value, (str, int, float)):
        check_size(value, f"the printed {type(value).__name__}")
    return value


class _BoundLoops(NodeTransformer):
    """Every `{% for %}` iterates through `_ticking`, every `~` goes through `_concat`."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, "runner_loop", [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Filter(
            nodes.List(node.nodes, lineno=node.lineno), "runner_concat", [], [], None, None, lineno=node.lineno
        )


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment with the bounds described at the top of this module."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    concat = staticmethod(bounded_concat)

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("optimized", False)  # no constant folding at compile time
        super().__init__(finalize=_finalize, **kwargs)
        self.globals["range"] = bounded_range
        self.globals["lipsum"] = bounded_lipsum
        bound_filters(self.filters)
        self.filters["runner_loop"] = _ticking
        self.filters["runner_concat"] = _concat

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = _BoundLoops().visit(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        tick()
        check_binop(operator, left, right)
        out = super().call_binop(context, operator, left, right)
        if isinstance(out, (str, bytes, list, tuple)):
            charge(len(out))
        return out

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        tick()
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, (str, bytes)) and isinstance(obj, types.BuiltinMethodType):
            args = check_str_call(owner, obj.__name__, args, kwargs)
        out = super().call(context, obj, *args, **kwargs)
        if isinstance(out, (str, bytes, list, tuple)):
            charge(len(out))
        return out

    def getattr(self, obj: Any, attribute: str) -> Any:
        tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        tick()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Any:
        """str.format / format_map through BoundedFormatter (Jinja >= 3.1.5 calls this on attribute access)."""
        if (
            not isinstance(value, (types.MethodType, types.BuiltinMethodType))
            or value.__name__ not in ("format", "format_map")
            or not isinstance(value.__self__, str)
        ):
            return None
        fmt_str, is_map = value.__self__, value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                args, kwargs = (), args[0]
            return self.format_string(fmt_str, args, kwargs)

        return update_wrapper(wrapper, value)

    def format_string(self, s: str, args: tuple, kwargs: dict, format_func: Any = None) -> str:  # type: ignore[override]
        """Also what Jinja < 3.1.5 calls for `'...'.format(...)` (with `format_func`)."""
        if getattr(format_func, "__name__", "") == "format_map":
            if kwargs or len(args) != 1:
                raise TypeError("format_map() takes exactly one argument")
            args, kwargs = (), args[0]
        f = BoundedEscapeFormatter(self, escape=s.escape) if isinstance(s, Markup) else BoundedFormatter(self)
        out = type(s)(f.vformat(s, args, kwargs))
        charge(len(out))
        return out
