"""Prompts: Jinja templates rendered in a bounded sandbox with StrictUndefined.

A typo in a template is an error naming the template and the variable, not an empty string; a
template cannot reach Python internals or the file system, and cannot run away: the sandbox
(sandbox.py) refuses work beyond fixed bounds, each render has a deadline, and `render_all`
bounds the time for all prompts of a run. Every problem is a TemplateError naming the template."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jinja2

from runner.errors import DatasetError, TemplateError
from runner.inputs.bounds import MAX_CHARS, TemplateLimit, limits, tick
from runner.inputs.datasets import Example, read_examples
from runner.inputs.sandbox import BoundedSandbox

PROJECT_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
RENDER_SECONDS = 5.0  # one template for one example (compiling one template, too)
TOTAL_SECONDS = 60.0  # render_all: this, plus PER_EXAMPLE_SECONDS for each example
PER_EXAMPLE_SECONDS = 0.01
MAX_TEMPLATE_CHARS = MAX_CHARS
LIMIT_HINT = (
    "a prompt template only formats the example: huge numbers, long loops and text beyond "
    f"{MAX_CHARS:,} characters are refused; simplify the template"
)


def _env() -> BoundedSandbox:
    return BoundedSandbox(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


def find_template(name: str, base_dir: Path) -> Path | None:
    """Relative to the recipe file first, then the recipe folder's `templates/`, its
    parent's `templates/`, and the project's `templates/`."""
    p = Path(name).expanduser()
    if p.is_absolute():
        return p if p.is_file() else None
    candidates = [base_dir / p, base_dir / "templates" / p, base_dir.parent / "templates" / p, PROJECT_TEMPLATES / p]
    for c in candidates:
        if c.is_file():
            return c
    return None


@dataclass(frozen=True)
class CompiledTemplate:
    source: str
    path: str
    template: jinja2.Template
    sha256: str | None = None  # of the file's bytes as read (16 hex digits); None for inline text

    def render(self, where: str, field: str, /, *, what: str = "", **variables: Any) -> str:
        """`what`: which prompt this is (`example 'x1'`), named by a bound's error."""
        at = f"{self.path} ({what})" if what else self.path
        try:
            with limits(RENDER_SECONDS, "rendering"):
                return self.template.render(**variables)
        except TemplateLimit as e:
            raise TemplateError(f"{at}: {e}", file=where, field=field, hint=LIMIT_HINT) from None
        except jinja2.UndefinedError as e:
            raise TemplateError(
                f"{at}: undefined variable: {e.message}",
                file=where,
                field=field,
                hint="available: " + ", ".join(sorted(variables)),
            ) from None
        except jinja2.exceptions.SecurityError as e:
            raise TemplateError(
                f"{at}: unsafe operation refused by the sandbox: {e}", file=where, field=field
            ) from None
        except jinja2.TemplateError as e:
            raise TemplateError(f"{at}: {type(e).__name__}: {e}", file=where, field=field) from None
        except Exception as e:  # a template's own arithmetic/type error is the user's, not ours
            if isinstance(e, TypeError) and "no loader" in str(e):
                raise TemplateError(
                    f"{self.path}: templates cannot include, import or extend other files; "
                    "put the whole prompt in one template",
                    file=where,
                    field=field,
                ) from e
            raise TemplateError(
                f"{at}: error while rendering: {type(e).__name__}: {str(e)[:300]}", file=where, field=field
            ) from e


def compile_text(source: str, label: str, where: str, field: str) -> CompiledTemplate:
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateError(
            f"{label} is longer than {MAX_TEMPLATE_CHARS:,} characters",
            file=where,
            field=field,
            hint="a prompt template this long is almost certainly the wrong file",
        )
    try:
        with limits(RENDER_SECONDS, "compiling"):
            return CompiledTemplate(source, label, _env().from_string(source))
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"{label} line {e.lineno}: syntax error: {e.message}", file=where, field=field) from None
    except TemplateLimit as e:
        raise TemplateError(f"{label}: {e}", file=where, field=field, hint=LIMIT_HINT) from None
    except RecursionError:
        raise TemplateError(f"{label}: nested too deeply to compile", file=where, field=field) from None
    except Exception as e:  # the lexer's own errors (an integer literal too long to read, ...)
        raise TemplateError(
            f"{label}: cannot compile: {type(e).__name__}: {str(e)[:300]}", file=where, field=field
        ) from None


def compile_file(name: str, base_dir: Path, where: str, field: str) -> CompiledTemplate:
    path = find_template(name, base_dir)
    if path is None:
        raise TemplateError(
            f"template not found: {name!r} (looked beside the recipe and in templates/)", file=where, field=field
        )
    try:
        if path.stat().st_size > 4 * MAX_TEMPLATE_CHARS:
            raise TemplateError(
                f"template {path} is larger than {4 * MAX_TEMPLATE_CHARS:,} bytes",
                file=where,
                field=field,
                hint="a prompt template this large is almost certainly the wrong file",
            )
        data = path.read_bytes()
    except OSError as e:
        raise TemplateError(
            f"cannot read template {path}: {e.strerror or e}",
            file=where,
            field=field,
            hint="check the file's permissions",
        ) from None
    try:
        source = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TemplateError(
            f"template {path} is not UTF-8 text (byte 0x{data[e.start]:02x} on line {line})",
            file=where,
            field=field,
            hint="save the template as UTF-8",
        ) from None
    if not source.strip():
        raise TemplateError(
            f"template {path} is empty",
            file=where,
            field=field,
            hint="write the prompt into it; variables: question, context, answers, id, example, shots",
        )
    return replace(compile_text(source, str(path), where, field), sha256=hashlib.sha256(data).hexdigest()[:16])


def _vars(ex: Example) -> dict[str, Any]:
    ex_dict = {"id": ex.id, "question": ex.question, "context": ex.context, "answers": list(ex.answers)}
    return {**ex_dict, "example": ex_dict}


class PromptBuilder:
    """Compiled templates + shots for one recipe; turns examples into chat messages."""

    def __init__(self, spec: Any, base_dir: Path, where: str = ""):
        self.spec, self.where = spec, where
        self.user = compile_file(spec.template, base_dir, where, "prompt.template")
        self._sources = {f"template:{spec.template}": self.user.sha256}
        self.system = None
        if spec.system_template:
            self.system = compile_file(spec.system_template, base_dir, where, "prompt.system_template")
            self._sources[f"template:{spec.system_template}"] = self.system.sha256
        elif spec.system is not None:
            self.system = compile_text(spec.system, "prompt.system", where, "prompt.system")
        self.shots = [
            {"question": s.question, "context": s.context, "answer": s.answer, "answers": [s.answer]}
            for s in spec.shots.examples
        ]
        if spec.shots.k:
            self.shots += self._drawn_shots(spec.shots, base_dir)
        self.template_files = [t.path for t in (self.user, self.system) if t is not None and t.path.startswith("/")]
        self._fixed: list[dict] | None = None  # system message and shot turns: the same for every example

    def _drawn_shots(self, shots: Any, base_dir: Path) -> list[dict]:
        loaded = read_examples(shots.source, base_dir, self.where, field="prompt.shots.source")
        if loaded.sha256:
            self._sources[f"shots:{shots.source.path}"] = loaded.sha256
        pool = list(loaded.examples)
        if shots.k > len(pool):
            raise DatasetError(
                f"asks for {shots.k} shots, but {loaded.path or shots.source.path} has only {len(pool)} examples",
                file=self.where,
                field="prompt.shots.k",
                hint="lower prompt.shots.k, or draw from a larger prompt.shots.source",
            )
        picked = random.Random(shots.seed).sample(pool, shots.k)
        for e in picked:
            if not e.answers:
                raise DatasetError(
                    f"shot example {e.id!r} of {loaded.path or shots.source.path} has no gold answer",
                    file=self.where,
                    field="prompt.shots.source.fields.answers",
                    hint="a worked example needs its answer: map fields.answers to the answer column",
                )
        return [
            {"question": e.question, "context": e.context, "answer": e.answers[0], "answers": list(e.answers)}
            for e in picked
        ]

    @property
    def sources(self) -> dict[str, str]:
        """sha256 (16 hex digits) of each file this builder read, of the bytes it read, keyed as
        runner.inputs.prepare records them: `template:<name>`, `shots:<path>`."""
        return {k: v for k, v in self._sources.items() if v}

    def _fixed_messages(self) -> list[dict]:
        if self._fixed is None:
            msgs: list[dict] = []
            if self.system is not None:
                field = "prompt.system_template" if self.spec.system_template else "prompt.system"
                msgs.append(
                    {
                        "role": "system",
                        "content": self.system.render(self.where, field, what="the system prompt", shots=self.shots),
                    }
                )
            if self.spec.shots.placement == "turns":
                for i, s in enumerate(self.shots):
                    v = {"id": "shot", **s}
                    msgs.append(
                        {
                            "role": "user",
                            "content": self.user.render(
                                self.where, "prompt.template", what=f"shot {i + 1}", **v, example=v, shots=self.shots
                            ),
                        }
                    )
                    msgs.append({"role": "assistant", "content": s["answer"]})
            self._fixed = msgs
        return self._fixed

    def messages(self, ex: Example) -> list[dict]:
        msgs = [dict(m) for m in self._fixed_messages()]
        msgs.append(
            {
                "role": "user",
                "content": self.user.render(
                    self.where, "prompt.template", what=f"example {ex.id!r}", **_vars(ex), shots=self.shots
                ),
            }
        )
        return msgs

    def render_all(self, examples: Any, seconds: float | None = None) -> list[list[dict]]:
        """messages() for every example, all within `seconds` (default: TOTAL_SECONDS plus
        PER_EXAMPLE_SECONDS per example); past it, a TemplateError naming the template."""
        examples = list(examples)
        n = len(examples)
        seconds = seconds if seconds is not None else TOTAL_SECONDS + PER_EXAMPLE_SECONDS * n
        out = []
        with limits(seconds, f"rendering all {n} prompts"):
            for ex in examples:
                try:
                    tick()
                except TemplateLimit as e:
                    raise TemplateError(
                        f"{self.user.path} (example {ex.id!r}): {e}",
                        file=self.where,
                        field="prompt.template",
                        hint=LIMIT_HINT,
                    ) from None
                out.append(self.messages(ex))
        return out
