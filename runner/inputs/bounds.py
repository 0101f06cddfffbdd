"""The bounds on template work and the checks that keep a template inside them (see sandbox.py).

Each check runs *before* the operation it guards, so a refused operation allocates nothing.
`limits()` sets, for the current thread, a deadline and a budget of characters that the checked
operations may produce; `tick()` and `charge()` enforce them cooperatively (no signals)."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter
from jinja2.utils import Namespace

MAX_CHARS = 1_000_000  # one string, one list's text, one rendered prompt
MAX_ITEMS = 100_000  # one list built by repetition or concatenation
MAX_RANGE = 10_000  # one range()
MAX_INT_DIGITS = 4_300  # Python refuses to print longer integers anyway
WORK_CHARS = 20_000_000  # what the checked operations of one render may produce
LIPSUM_MAX = 100  # paragraphs (of at most 10 x this many words)
_MAX_INT_BITS = int(MAX_INT_DIGITS / math.log10(2))


class TemplateLimit(Exception):
    """A template went beyond one of the bounds; the message says which."""


@dataclass
class _Budget:
    due: float
    what: str
    seconds: float
    left: int


_state = threading.local()


@contextmanager
def limits(seconds: float, what: str, work_chars: int = WORK_CHARS) -> Iterator[None]:
    """Bound the template work done inside: a deadline (`what` took longer than `seconds`: refused)
    and a work budget. Nested limits keep the earlier deadline."""
    outer: _Budget | None = getattr(_state, "budget", None)
    b = _Budget(time.monotonic() + seconds, what, seconds, work_chars)
    if outer is not None and outer.due < b.due:
        b.due, b.what, b.seconds = outer.due, outer.what, outer.seconds
    _state.budget = b
    try:
        yield
    finally:
        _state.budget = outer


def tick() -> None:
    b = getattr(_state, "budget", None)
    if b is not None and time.monotonic() > b.due:
        raise TemplateLimit(f"{b.what} took longer than {b.seconds:g} s")


def charge(n: int) -> None:
    b = getattr(_state, "budget", None)
    if b is not None:
        b.left -= n
        if b.left < 0:
            raise TemplateLimit(f"it computes more than {WORK_CHARS:,} characters of text for one prompt")
        tick()


def refuse(what: str) -> TemplateLimit:
    return TemplateLimit(f"{what}, beyond what a prompt template may compute")


def size_of(value: Any, limit: int = MAX_CHARS) -> int:
    """About how many characters str(value) has; stops counting once past `limit`."""
    total, stack, seen = 0, [value], set()
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)  # quotes inside a container: counted below
        elif isinstance(v, (bytes, bytearray)):
            total += 4 * len(v) + 3
        elif isinstance(v, int) and not isinstance(v, bool):
            total += v.bit_length() * 30103 // 100000 + 2
        elif isinstance(v, (list, tuple, set, frozenset, dict, Namespace)):
            if id(v) in seen:
                total += 5
                continue
            seen.add(id(v))
            if isinstance(v, Namespace):
                v = v._Namespace__attrs  # type: ignore[attr-defined]
            items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else v
            total += 2 + 4 * len(items)
            stack.extend(items)
        else:
            total += 24
    return total


def joined_size(items: list) -> int:
    """About how long "".join(map(str, items)) is; stops counting once past MAX_CHARS."""
    total = 0
    for x in items:
        total += len(x) if isinstance(x, (str, bytes)) else size_of(x)
        if total > MAX_CHARS:
            break
    return total


def check_size(value: Any, what: str) -> None:
    n = size_of(value)
    if n > MAX_CHARS:
        raise refuse(f"{what} has more than {MAX_CHARS:,} characters")


_PCT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def check_percent(fmt: str, args: Any) -> None:
    """`fmt % args` would give more than MAX_CHARS characters: refused before it runs."""
    biggest = size_of(args)
    stars = max((a for a in (args if isinstance(args, tuple) else (args,)) if isinstance(a, int)), default=0)
    total = len(fmt)
    for width, prec, conv in _PCT.findall(fmt):
        if conv == "%":
            continue
        nums = [stars if x == "*" else (MAX_CHARS + 1 if len(x) > 7 else int(x)) for x in (width, prec) if x]
        total += max([biggest, *nums])
        if total > MAX_CHARS:
            raise refuse(f"`%` formatting would give more than {MAX_CHARS:,} characters")


def check_binop(op: str, a: Any, b: Any) -> None:
    ints = isinstance(a, int) and isinstance(b, int)
    if op == "**" and ints and b > 0 and abs(a) > 1:
        digits = b * math.log10(abs(a)) if b.bit_length() < 64 else math.inf
        if digits > MAX_INT_DIGITS:
            raise refuse(f"`**` would give a number of about {digits:,.0f} digits (at most {MAX_INT_DIGITS:,})")
    elif op == "*" and ints:
        if a.bit_length() + b.bit_length() > _MAX_INT_BITS:
            raise refuse(f"`*` would give a number of more than {MAX_INT_DIGITS:,} digits")
    elif op == "*":
        seq, n = (a, b) if isinstance(b, int) else (b, a)
        if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)) and n > 1:
            if isinstance(seq, (list, tuple)) and len(seq) * n > MAX_ITEMS:
                raise refuse(f"`*` would give a list of {len(seq) * n:,} items (at most {MAX_ITEMS:,})")
            if size_of(seq) * n > MAX_CHARS:
                raise refuse(f"`*` would give more than {MAX_CHARS:,} characters")
    elif op == "+" and isinstance(a, (str, bytes, list, tuple)) and type(a) is type(b):
        if isinstance(a, (list, tuple)) and len(a) + len(b) > MAX_ITEMS:
            raise refuse(f"`+` would give a list of more than {MAX_ITEMS:,} items")
        if size_of(a) + size_of(b) > MAX_CHARS:
            raise refuse(f"`+` would give more than {MAX_CHARS:,} characters")
    elif op == "%" and isinstance(a, str):
        check_percent(a, b)


def check_str_call(s: str | bytes, name: str, args: tuple, kwargs: dict) -> tuple:
    """A str/bytes method that can make far more text than it was given, checked before it runs.
    Returns the arguments to call it with (an iterable for `join` is read once, here)."""
    arg = args[0] if args else None
    if name in ("center", "ljust", "rjust", "zfill"):
        width = kwargs.get("width", arg)
        if isinstance(width, int) and width > MAX_CHARS:
            raise refuse(f"{name}({width:,}) would give more than {MAX_CHARS:,} characters")
    elif name == "expandtabs":
        size = kwargs.get("tabsize", 8 if arg is None else arg)
        if isinstance(size, int) and len(s) + s.count("\t" if isinstance(s, str) else b"\t") * size > MAX_CHARS:
            raise refuse(f"expandtabs() would give more than {MAX_CHARS:,} characters")
    elif name == "replace" and len(args) >= 2:
        check_replace(s, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count", -1))
    elif name == "join" and args:
        items = list(args[0])
        if joined_size(items) + len(s) * len(items) > MAX_CHARS:
            raise refuse(f"join() would give more than {MAX_CHARS:,} characters")
        return (items, *args[1:])
    elif name == "translate" and isinstance(arg, dict):
        if len(s) * max((size_of(v) for v in arg.values()), default=0) > MAX_CHARS:
            raise refuse(f"translate() could give more than {MAX_CHARS:,} characters")
    return args


def check_replace(s: Any, old: Any, new: Any, count: Any) -> None:
    s, old, new = (x if isinstance(x, (str, bytes)) else str(x) for x in (s, old, new))
    if type(s) is not type(old):
        return  # a TypeError, raised by the call itself
    n = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    if len(s) + n * max(0, len(new) - len(old)) > MAX_CHARS:
        raise refuse(f"replace() would give more than {MAX_CHARS:,} characters")


class BoundedFormatter(SandboxedFormatter):
    """str.format in the sandbox, refusing a field (or a total) longer than MAX_CHARS before it is built."""

    def __init__(self, env: Any, **kwargs: Any):
        super().__init__(env, **kwargs)
        self._total = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        tick()
        nums = re.findall(r"\d+", format_spec)
        if any(len(x) > 7 or int(x) > MAX_CHARS for x in nums) or size_of(value) > MAX_CHARS:
            raise refuse(f"a format() field would be longer than {MAX_CHARS:,} characters")
        out = super().format_field(value, format_spec)
        self._total += len(out)
        if self._total > MAX_CHARS:
            raise refuse(f"format() would give more than {MAX_CHARS:,} characters")
        return out


class BoundedEscapeFormatter(BoundedFormatter, SandboxedEscapeFormatter):
    pass
