"""Prompts: Jinja templates rendered in a sandbox with StrictUndefined.

A typo in a template is an error naming the template and the variable, not an
empty string; a template cannot reach Python internals or the file system."""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runner.inputs.datasets import Example, load_examples
from runner.errors import TemplateError

PROJECT_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def _env() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                         autoescape=False)


def find_template(name: str, base_dir: Path) -> Path | None:
    """Relative to the recipe file first, then the recipe folder's `templates/`, its
    parent's `templates/`, and the project's `templates/`."""
    p = Path(name).expanduser()
    if p.is_absolute():
        return p if p.is_file() else None
    candidates = [base_dir / p, base_dir / "templates" / p, base_dir.parent / "templates" / p,
                  PROJECT_TEMPLATES / p]
    for c in candidates:
        if c.is_file():
            return c
    return None


@dataclass(frozen=True)
class CompiledTemplate:
    source: str
    path: str
    template: jinja2.Template

    def render(self, where: str, field: str, **variables: Any) -> str:
        try:
            return self.template.render(**variables)
        except jinja2.UndefinedError as e:
            raise TemplateError(f"{self.path}: undefined variable: {e.message}", file=where, field=field,
                                hint="available: " + ", ".join(sorted(variables)))
        except jinja2.exceptions.SecurityError as e:
            raise TemplateError(f"{self.path}: unsafe operation refused by the sandbox: {e}", file=where, field=field)
        except jinja2.TemplateError as e:
            raise TemplateError(f"{self.path}: {type(e).__name__}: {e}", file=where, field=field)
        except Exception as e:   # a template's own arithmetic/type error is the user's, not ours
            if isinstance(e, TypeError) and "no loader" in str(e):
                raise TemplateError(f"{self.path}: templates cannot include, import or extend other files; "
                                    "put the whole prompt in one template", file=where, field=field) from e
            raise TemplateError(f"{self.path}: error while rendering: {type(e).__name__}: {e}", file=where,
                                field=field) from e


def compile_text(source: str, label: str, where: str, field: str) -> CompiledTemplate:
    try:
        return CompiledTemplate(source, label, _env().from_string(source))
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"{label} line {e.lineno}: syntax error: {e.message}", file=where, field=field)


def compile_file(name: str, base_dir: Path, where: str, field: str) -> CompiledTemplate:
    path = find_template(name, base_dir)
    if path is None:
        raise TemplateError(f"template not found: {name!r} (looked beside the recipe and in templates/)",
                            file=where, field=field)
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TemplateError(f"template {path} is not UTF-8 text", file=where, field=field)
    return compile_text(source, str(path), where, field)


def _vars(ex: Example) -> dict[str, Any]:
    ex_dict = {"id": ex.id, "question": ex.question, "context": ex.context, "answers": list(ex.answers)}
    return {**ex_dict, "example": ex_dict}


class PromptBuilder:
    """Compiled templates + shots for one recipe; turns examples into chat messages."""

    def __init__(self, spec: Any, base_dir: Path, where: str = ""):
        self.spec, self.where = spec, where
        self.user = compile_file(spec.template, base_dir, where, "prompt.template")
        self.system = None
        if spec.system_template:
            self.system = compile_file(spec.system_template, base_dir, where, "prompt.system_template")
        elif spec.system is not None:
            self.system = compile_text(spec.system, "prompt.system", where, "prompt.system")
        self.shots = [{"question": s.question, "context": s.context, "answer": s.answer, "answers": [s.answer]}
                      for s in spec.shots.examples]
        if spec.shots.k:
            pool = load_examples(spec.shots.source, base_dir, where)
            picked = random.Random(spec.shots.seed).sample(pool, min(spec.shots.k, len(pool)))
            self.shots += [{"question": e.question, "context": e.context,
                            "answer": e.answers[0] if e.answers else "", "answers": list(e.answers)}
                           for e in picked]
        self.template_files = [t.path for t in (self.user, self.system) if t is not None and t.path.startswith("/")]

    def messages(self, ex: Example) -> list[dict]:
        msgs: list[dict] = []
        if self.system is not None:
            field = "prompt.system_template" if self.spec.system_template else "prompt.system"
            msgs.append({"role": "system", "content": self.system.render(self.where, field, shots=self.shots)})
        if self.spec.shots.placement == "turns":
            for s in self.shots:
                v = {"id": "shot", **s}
                msgs.append({"role": "user", "content": self.user.render(
                    self.where, "prompt.template", **v, example=v, shots=self.shots)})
                msgs.append({"role": "assistant", "content": s["answer"]})
        msgs.append({"role": "user", "content": self.user.render(
            self.where, "prompt.template", **_vars(ex), shots=self.shots)})
        return msgs
