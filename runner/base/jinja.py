"""Jinja in a sandbox that also bounds the work a template can do: prompt templates and the fake
engine's reply.

The recipe's timeout covers only the engine process; templates compile and render in the runner
itself. ImmutableSandboxedEnvironment keeps a template away from Python internals and from changing
its inputs; BoundedSandbox also keeps it from running away:

- numbers: `*`, `**` and `+` are checked before they run; an integer of more than MAX_INT_DIGITS
  digits (Python's own limit for printing one) is refused, so `10**(10**8)` fails at once instead of
  computing for minutes;
- text and lists: a result longer than MAX_CHARS characters (or MAX_ITEMS items) is refused before
  it is built: `'x' * 10**9`, `%` and `format` widths, `center`/`ljust`/`replace`/`join`, `~`, the
  filters that make text, and printing a list (measured before `str()` builds it);
- work: the checked operations of one render may produce WORK_CHARS characters in all;
- `range()` is limited to MAX_RANGE items, `lipsum()` to LIPSUM_MAX paragraphs;
- time: every loop step, call and attribute lookup checks the deadline set by `limits()`
  (cooperative, so it works in any thread and needs no signal);
- nothing runs at compile time: `optimized=False`, intercepted operators are never folded, and the
  checked filters take the context, which keeps Jinja from folding them.

Each check runs *before* the operation it guards, so a refused operation allocates nothing. Every
problem of a template is a TemplateError naming it."""

from __future__ import annotations

import difflib
import math
import re
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial, update_wrapper, wraps
from typing import Any

import jinja2
import jinja2.meta
from jinja2 import nodes, pass_context, pass_eval_context
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEscapeFormatter,
    SandboxedFormatter,
)
from jinja2.utils import Namespace, generate_lorem_ipsum
from jinja2.visitor import NodeTransformer
from markupsafe import Markup

from runner.base.errors import TemplateError

MAX_CHARS = 1_000_000  # one string, one list's text, one rendered prompt
MAX_ITEMS = 100_000  # one list built by repetition or concatenation
MAX_RANGE = 10_000  # one range()
MAX_INT_DIGITS = 4_300  # Python refuses to print longer integers anyway
WORK_CHARS = 20_000_000  # what the checked operations of one render may produce
LIPSUM_MAX = 100  # paragraphs (of at most 10 x this many words)
_MAX_INT_BITS = int(MAX_INT_DIGITS / math.log10(2))


class TemplateLimit(Exception):
    """A template went beyond one of the bounds; the message says which."""


_state = threading.local()


@contextmanager
def limits(seconds: float, what: str) -> Iterator[None]:
    """Bound the template work done inside: a deadline (`what` took longer than `seconds`: refused)
    and a work budget. Nested limits keep the earlier deadline."""
    outer = getattr(_state, "budget", None)
    b = types.SimpleNamespace(
        due=time.monotonic() + seconds,
        late=f"{what} took longer than {seconds:g} s",
        left=WORK_CHARS,
    )
    if outer is not None and outer.due < b.due:
        b.due, b.late = outer.due, outer.late
    _state.budget = b
    try:
        yield
    finally:
        _state.budget = outer


def tick() -> None:
    b = getattr(_state, "budget", None)
    if b is not None and time.monotonic() > b.due:
        raise TemplateLimit(b.late)


def _charged(out: Any) -> Any:
    """`out`, its length (text, a list) taken from the work budget of the render."""
    b = getattr(_state, "budget", None)
    if b is not None and isinstance(out, (str, bytes, list, tuple)):
        b.left -= len(out)
        if b.left < 0:
            raise TemplateLimit(
                f"it computes more than {WORK_CHARS:,} characters of text for one prompt"
            )
        tick()
    return out


def refuse(what: str) -> TemplateLimit:
    return TemplateLimit(f"{what}, beyond what a prompt template may compute")


def size_of(value: Any) -> int:
    """About how many characters str(value) has; stops counting once past MAX_CHARS."""
    total, stack, seen = 0, [value], set()
    while stack and total <= MAX_CHARS:
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


def _cap(n: int, what: str) -> None:
    """Refuse what would give `n` characters, more than MAX_CHARS."""
    if n > MAX_CHARS:
        raise refuse(f"{what} would give more than {MAX_CHARS:,} characters")


def check_size(value: Any, what: str) -> None:
    if size_of(value) > MAX_CHARS:
        raise refuse(f"{what} has more than {MAX_CHARS:,} characters")


_PCT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def check_percent(fmt: str, args: Any) -> None:
    """`fmt % args` would give more than MAX_CHARS characters: refused before it runs."""
    biggest = size_of(args)
    stars = max(
        (a for a in (args if isinstance(args, tuple) else (args,)) if isinstance(a, int)), default=0
    )
    total = len(fmt)
    for width, prec, conv in _PCT.findall(fmt):
        if conv == "%":
            continue
        nums = [
            stars if x == "*" else (MAX_CHARS + 1 if len(x) > 7 else int(x))
            for x in (width, prec)
            if x
        ]
        total += max([biggest, *nums])
        _cap(total, "`%` formatting")


def check_binop(op: str, a: Any, b: Any) -> None:
    if op == "**" and isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        digits = b * math.log10(abs(a)) if b.bit_length() < 64 else math.inf
        if digits > MAX_INT_DIGITS:
            raise refuse(
                f"`**` would give a number of about {digits:,.0f} digits (at most "
                f"{MAX_INT_DIGITS:,})"
            )
    elif op == "*":
        _check_times(a, b)
    elif op == "+" and isinstance(a, (str, bytes, list, tuple)) and type(a) is type(b):
        if isinstance(a, (list, tuple)) and len(a) + len(b) > MAX_ITEMS:
            raise refuse(f"`+` would give a list of more than {MAX_ITEMS:,} items")
        _cap(size_of(a) + size_of(b), "`+`")
    elif op == "%" and isinstance(a, str):
        check_percent(a, b)


def _check_times(a: Any, b: Any) -> None:
    if isinstance(a, int) and isinstance(b, int):
        if a.bit_length() + b.bit_length() > _MAX_INT_BITS:
            raise refuse(f"`*` would give a number of more than {MAX_INT_DIGITS:,} digits")
        return
    seq, n = (a, b) if isinstance(b, int) else (b, a)
    if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)) and n > 1:
        if isinstance(seq, (list, tuple)) and len(seq) * n > MAX_ITEMS:
            raise refuse(f"`*` would give a list of {len(seq) * n:,} items (at most {MAX_ITEMS:,})")
        _cap(size_of(seq) * n, "`*`")


def check_str_call(s: str | bytes, name: str, args: tuple, kwargs: dict) -> tuple:
    """A str/bytes method that can make far more text than it was given, checked before it runs.
    Returns the arguments to call it with (an iterable for `join` is read once, here)."""
    arg = args[0] if args else None
    if name in ("center", "ljust", "rjust", "zfill"):
        width = kwargs.get("width", arg)
        if isinstance(width, int):
            _cap(width, f"{name}({width:,})")
    elif name == "expandtabs":
        size = kwargs.get("tabsize", 8 if arg is None else arg)
        if isinstance(size, int):
            _cap(len(s) + s.count("\t" if isinstance(s, str) else b"\t") * size, "expandtabs()")
    elif name == "replace" and len(args) >= 2:
        check_replace(s, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count", -1))
    elif name == "join" and args:
        items = list(args[0])
        _cap(joined_size(items) + len(s) * len(items), "join()")
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
    _cap(len(s) + n * max(0, len(new) - len(old)), "replace()")


class BoundedFormatter(SandboxedFormatter):
    """str.format in the sandbox, refusing a field (or a total) longer than MAX_CHARS before it is
    built."""

    _total = 0  # characters this formatter has produced

    def format_field(self, value: Any, format_spec: str) -> Any:
        tick()
        nums = re.findall(r"\d+", format_spec)
        if any(len(x) > 7 or int(x) > MAX_CHARS for x in nums) or size_of(value) > MAX_CHARS:
            raise refuse(f"a format() field would be longer than {MAX_CHARS:,} characters")
        out = super().format_field(value, format_spec)
        self._total += len(out)
        _cap(self._total, "format()")
        return out


class BoundedEscapeFormatter(BoundedFormatter, SandboxedEscapeFormatter):
    pass


def _filter_pre(name: str, value: Any, args: tuple, kwargs: dict) -> Any:
    """The check of a filter with a size argument (`name`; any other passes), before it runs.
    Returns the value to pass on (an iterable for `join` is read once, here)."""
    arg = lambda i, key, default: (
        kwargs[key] if key in kwargs else args[i] if len(args) > i else default
    )
    if name == "center":
        check_str_call("", name, args, kwargs)
    elif name == "indent":
        width = arg(0, "width", 4)
        ind = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        _cap(ind * (str(value).count("\n") + 1) + len(str(value)), "indent()")
    elif name == "wordwrap":
        s, width, wrap = str(value), arg(0, "width", 79), arg(2, "wrapstring", None)
        breaks = len(s) // max(width, 1) + s.count("\n") + 1 if isinstance(width, int) else len(s)
        _cap(len(s) + breaks * len(wrap or "\n"), "wordwrap()")
    elif name == "replace":
        count = arg(2, "count", None)
        check_replace(value, arg(0, "old", ""), arg(1, "new", ""), -1 if count is None else count)
    elif name == "format":
        check_percent(str(value), kwargs or args)
    else:
        return _items_pre(name, value, arg)
    return value


def _items_pre(name: str, value: Any, arg: Callable[[int, str, Any], Any]) -> Any:
    """_filter_pre of the filters that take or make a list (or sum one)."""
    if name == "join":
        items = list(value)
        _cap(joined_size(items) + len(str(arg(0, "d", ""))) * len(items), "join")
        return items
    elif name == "tojson":
        indent = arg(0, "indent", None)
        if isinstance(indent, int) and indent > 16 or 6 * size_of(value) > MAX_CHARS:
            raise refuse(
                f"tojson would give more than {MAX_CHARS:,} characters (or an indent above 16)"
            )
    elif name in ("batch", "slice"):
        n, fill = arg(0, "linecount" if name == "batch" else "slices", 0), arg(1, "fill_with", None)
        if isinstance(n, int) and (
            n > MAX_RANGE or fill is not None and n * size_of(fill) > MAX_CHARS
        ):
            most = f"at most {MAX_RANGE:,}, and padding of at most {MAX_CHARS:,} characters"
            raise refuse(f"batch/slice into {n:,} ({most})")
    elif name == "sum" and not isinstance(arg(1, "start", 0), (int, float)):
        raise refuse(
            "sum() with a start that is not a number (sum adds numbers; use join for text)"
        )
    return value


_TEXT_FILTERS = set(
    "capitalize e escape forceescape lower pprint safe string striptags title trim truncate upper "
    "urlencode urlize wordcount xmlattr list".split()
)
_SIZED_FILTERS = set("center indent wordwrap replace format join tojson batch slice sum".split())


def _checked_filter(orig: Any, name: str) -> Any:
    @pass_context  # context filters are never folded at compile time
    @wraps(orig)
    def run(context: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        tick()
        for v in (value, *args, *kwargs.values()):
            if not isinstance(v, (int, float, type(None))):
                check_size(v, "a filter's input")
        value = _filter_pre(name, value, args, kwargs)  # a text filter: passed on as it is
        # Context.call passes the filter its context, eval context or environment, as it asks
        return _charged(context.call(orig, value, *args, **kwargs))

    return run


def bounded_range(*args: int) -> range:
    r = range(*args)
    with suppress(OverflowError):  # len() of a range beyond sys.maxsize
        if len(r) <= MAX_RANGE:
            return r
    raise refuse(f"range() of more than {MAX_RANGE:,} items")


def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
    ints = all(isinstance(x, int) for x in (n, min, max))
    if not (ints and 0 <= n <= LIPSUM_MAX and 1 <= min <= max <= 10 * LIPSUM_MAX):
        raise refuse(
            f"lipsum(n={n}, min={min}, max={max}) (at most n={LIPSUM_MAX}, max={10 * LIPSUM_MAX})"
        )
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
    _cap(joined_size(items), "`~`")
    return _charged(markup_join(items) if eval_ctx.autoescape else str_join(items))


def bounded_concat(parts: Any) -> str:
    """Environment.concat: joins what a template (or a block, a macro) renders, stopping at
    MAX_CHARS."""
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
        items = nodes.List(node.nodes, lineno=node.lineno)
        return nodes.Filter(items, "runner_concat", [], [], None, None, lineno=node.lineno)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment with the bounds described at the top of this module (and
    StrictUndefined: a typo is an error)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    concat = staticmethod(bounded_concat)

    def __init__(self) -> None:
        super().__init__(
            optimized=False,  # no constant folding at compile time
            finalize=_finalize,
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,
        )
        self.globals.update(range=bounded_range, lipsum=bounded_lipsum)
        # the filters that make text, and those with a size argument: checked
        for name in _TEXT_FILTERS | _SIZED_FILTERS:
            self.filters[name] = _checked_filter(self.filters[name], name)
        self.filters.update(runner_loop=_ticking, runner_concat=_concat)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = _BoundLoops().visit(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        tick()
        check_binop(operator, left, right)
        return _charged(super().call_binop(context, operator, left, right))

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        tick()
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, (str, bytes)) and isinstance(obj, types.BuiltinMethodType):
            args = check_str_call(owner, obj.__name__, args, kwargs)
        return _charged(super().call(context, obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        tick()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Any:
        """str.format / format_map through BoundedFormatter (Jinja >= 3.1.5 calls this on attribute
        access)."""
        if (
            isinstance(value, (types.MethodType, types.BuiltinMethodType))
            and value.__name__ in ("format", "format_map")
            and isinstance(value.__self__, str)
        ):
            wrapper = lambda *a, **kw: self.format_string(value.__self__, a, kw, value)
            return update_wrapper(wrapper, value)
        return None

    def format_string(self, s: str, args: tuple, kwargs: dict, format_func: Any = None) -> str:  # type: ignore[override]
        """Also what Jinja < 3.1.5 calls for `'...'.format(...)` (with `format_func`)."""
        if getattr(format_func, "__name__", "") == "format_map":
            if kwargs or len(args) != 1:
                raise TypeError("format_map() takes exactly one argument")
            args, kwargs = (), args[0]
        f = (
            BoundedEscapeFormatter(self, escape=s.escape)
            if isinstance(s, Markup)
            else BoundedFormatter(self)
        )
        return _charged(type(s)(f.vformat(s, args, kwargs)))


RENDER_SECONDS = 5.0  # one template for one example (compiling one template, too)
TOTAL_SECONDS = 60.0  # render_all: this, plus PER_EXAMPLE_SECONDS for each example
PER_EXAMPLE_SECONDS = 0.01
# a dataset's columns reach a template only through `dataset.fields`
UNPASSED = " (a dataset's other columns are not passed: map one to question or context)"
LIMIT_HINT = (
    "a prompt template only formats the example: huge numbers, long loops and text beyond "
    f"{MAX_CHARS:,} characters are refused; simplify the template"
)


@dataclass(frozen=True)
class CompiledTemplate:
    path: str
    template: jinja2.Template
    sha256: str | None = None  # of the file's bytes as read (16 hex digits); None for inline text
    names: frozenset[str] = frozenset()  # the variables it reads (jinja2.meta's undeclared ones)

    def render(self, where: str, field: str, /, *, what: str = "", **variables: Any) -> str:
        """`what`: which prompt this is (`example 'x1'`), named by a bound's error."""
        at = f"{self.path} ({what})" if what else self.path
        err = partial(TemplateError, file=where, field=field)
        try:
            with limits(RENDER_SECONDS, "rendering"):
                return self.template.render(**variables)
        except TemplateLimit as e:
            raise err(f"{at}: {e}", hint=LIMIT_HINT) from None
        except jinja2.UndefinedError as e:
            said = re.search(r"'(\w+)' is undefined", e.message or "")
            close = difflib.get_close_matches(said[1], variables, n=1) if said else []
            hint = (f"did you mean `{close[0]}`? " if close else "") + "available: "
            hint += ", ".join(sorted(variables)) + UNPASSED
            raise err(f"{at}: undefined variable: {e.message}", hint=hint) from None
        except jinja2.exceptions.SecurityError as e:
            raise err(f"{at}: unsafe operation refused by the sandbox: {e}") from None
        except jinja2.TemplateError as e:
            raise err(f"{at}: {type(e).__name__}: {e}") from None
        except Exception as e:  # a template's own arithmetic/type error is the user's, not ours
            if isinstance(e, TypeError) and "no loader" in str(e):
                no = (
                    "templates cannot include, import or extend other files; put the whole "
                    "prompt in one template"
                )
                raise err(f"{self.path}: {no}") from e
            raise err(f"{at}: error while rendering: {type(e).__name__}: {str(e)[:300]}") from e


def compile_text(source: str, label: str, where: str, field: str) -> CompiledTemplate:
    err = partial(TemplateError, file=where, field=field)
    if len(source) > MAX_CHARS:
        wrong = "a prompt template this long is almost certainly the wrong file"
        raise err(f"{label} is longer than {MAX_CHARS:,} characters", hint=wrong)
    try:
        with limits(RENDER_SECONDS, "compiling"):
            env = BoundedSandbox()
            names = frozenset(jinja2.meta.find_undeclared_variables(env.parse(source)))
            return CompiledTemplate(label, env.from_string(source), names=names)
    except jinja2.TemplateSyntaxError as e:
        raise err(f"{label} line {e.lineno}: syntax error: {e.message}") from None
    except TemplateLimit as e:
        raise err(f"{label}: {e}", hint=LIMIT_HINT) from None
    except RecursionError:
        raise err(f"{label}: nested too deeply to compile") from None
    except Exception as e:  # the lexer's own errors (an integer literal too long to read, ...)
        raise err(f"{label}: cannot compile: {type(e).__name__}: {str(e)[:300]}") from None
