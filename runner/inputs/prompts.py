"""Prompts: the recipe's Jinja templates (found beside the recipe or in templates/), rendered with
its shots in the bounded sandbox (runner/base/jinja.py) with StrictUndefined: a typo is an error
naming the template and the variable, not an empty string, and `render_all` bounds the time for all
prompts of a run."""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import random
from dataclasses import replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from runner.base import jinja
from runner.base.errors import DatasetError, TemplateError
from runner.base.types import Example
from runner.inputs.datasets import read_examples

PROJECT_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def find_template(name: str, base_dir: Path) -> Path | None:
    """Relative to the recipe file first, then the recipe folder's `templates/`, its
    parent's `templates/`, and the project's `templates/`."""
    with contextlib.suppress(OSError):  # a name too long for the file system is no file
        return next((c for c in _candidates(name, base_dir) if c.is_file()), None)
    return None


def _candidates(name: str, base_dir: Path) -> list[Path]:
    p = Path(name).expanduser()  # an absolute path: every candidate is itself
    folders = (base_dir, base_dir / "templates", base_dir.parent / "templates", PROJECT_TEMPLATES)
    return [d / p for d in folders]


def compile_file(name: str, base_dir: Path, where: str, field: str) -> jinja.CompiledTemplate:
    path, err = find_template(name, base_dir), partial(TemplateError, file=where, field=field)
    if path is None:
        folders = {c.parent for c in _candidates(name, base_dir)}
        near = sorted({f.name for d in folders if d.is_dir() for f in d.iterdir() if f.is_file()})
        close = difflib.get_close_matches(Path(name).expanduser().name, near, n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}?" if close else None
        shown = repr(name) if len(name) <= 200 else f"{name[:100]!r}... ({len(name):,} characters)"
        raise err(
            f"template not found: {shown} (looked beside the recipe and in templates/)", hint=hint
        )
    try:
        if path.stat().st_size > 4 * jinja.MAX_CHARS:
            raise err(
                f"template {path} is larger than {4 * jinja.MAX_CHARS:,} bytes",
                hint="a prompt template this large is almost certainly the wrong file",
            )
        data = path.read_bytes()
    except OSError as e:
        raise err(
            f"cannot read template {path}: {e.strerror or e}", hint="check the file's permissions"
        ) from None
    try:
        source = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise err(
            f"template {path} is not UTF-8 text (byte 0x{data[e.start]:02x} on line {line})",
            hint="save the template as UTF-8",
        ) from None
    if not source.strip():
        raise err(
            f"template {path} is empty",
            hint="write the prompt into it; variables: question, context, answers, id, example, "
            "shots",
        )
    return replace(
        jinja.compile_text(source, str(path), where, field),
        sha256=hashlib.sha256(data).hexdigest()[:16],
    )


def _shot(question: str, context: str, answers: list[str]) -> dict:
    return {"question": question, "context": context, "answer": answers[0], "answers": answers}


class PromptBuilder:
    """Compiled templates + shots for one recipe; turns examples into chat messages."""

    def __init__(self, spec: Any, base_dir: Path, where: str = ""):
        self.spec, self.where = spec, where
        self.user = compile_file(spec.template, base_dir, where, "prompt.template")
        self._sources = {f"template:{spec.template}": self.user.sha256}
        self.system = None
        # the field the system prompt comes from (its errors name it)
        self.system_field = "prompt.system_template" if spec.system_template else "prompt.system"
        if spec.system_template:
            self.system = compile_file(spec.system_template, base_dir, where, self.system_field)
            self._sources[f"template:{spec.system_template}"] = self.system.sha256
        elif spec.system is not None:
            self.system = jinja.compile_text(spec.system, "prompt.system", where, self.system_field)
        self.shots = [_shot(s.question, s.context, [s.answer]) for s in spec.shots.examples]
        if (shots := spec.shots).k:  # drawn from a dataset
            loaded = read_examples(shots.source, base_dir, self.where, field="prompt.shots.source")
            # None for a hub dataset: `sources` leaves it out
            self._sources[f"shots:{shots.source.path}"] = loaded.sha256
            name = loaded.path or shots.source.path
            # a worked example needs its answer: drawn from those that have one
            pool = [e for e in loaded.examples if e.answers]
            err = partial(DatasetError, file=self.where)
            if not pool:
                raise err(
                    f"no example of {name} has a gold answer to show as a worked example",
                    field="prompt.shots.source.fields.answers",
                    hint="map prompt.shots.source.fields.answers to the answer column",
                )
            if shots.k > len(pool):
                some = "" if len(pool) == len(loaded.examples) else " with a gold answer"
                raise err(
                    f"asks for {shots.k} shots, but {name} has only {len(pool)} examples{some}",
                    field="prompt.shots.k",
                    hint="lower prompt.shots.k, or draw from a larger prompt.shots.source",
                )
            picked = random.Random(shots.seed).sample(pool, shots.k)
            self.shots += [_shot(e.question, e.context, list(e.answers)) for e in picked]
        self._shots_shown()

    def _shots_shown(self) -> None:
        """`placement: system` hands the shots to the templates as `shots` only: where neither
        reads it, every shot would be left out of every prompt, unsaid."""
        if self.spec.shots.placement != "system" or not self.shots:
            return
        if any("shots" in t.names for t in (self.system, self.user) if t is not None):
            return
        where = (
            "there is no system prompt"
            if self.system is None
            else f"neither {self.system_field} nor prompt.template reads `shots`"
        )
        raise TemplateError(
            f"placement: system gives the {len(self.shots)} worked example(s) to the templates as "
            f"`shots`, but {where}: they would be left out of every prompt",
            file=self.where,
            field="prompt.shots.placement",
            hint="use placement: turns (each shot a user/assistant exchange before the question), "
            "or show them in the system template: {% for s in shots %}Q: {{ s.question }} "
            "A: {{ s.answer }}\n{% endfor %}",
        )

    @property
    def sources(self) -> dict[str, str]:
        """sha256 (16 hex digits) of each file this builder read, of the bytes it read, keyed as
        runner.inputs.prepare records them: `template:<name>`, `shots:<path>`."""
        return {k: v for k, v in self._sources.items() if v}

    def _user(self, what: str, variables: dict) -> dict:
        return {
            "role": "user",
            "content": self.user.render(
                self.where, "prompt.template", what=what, **variables, shots=self.shots
            ),
        }

    @cached_property
    def _fixed_messages(self) -> list[dict]:
        """The system message and shot turns: the same for every example."""
        msgs: list[dict] = []
        if self.system is not None:
            content = self.system.render(
                self.where, self.system_field, what="the system prompt", shots=self.shots
            )
            msgs.append({"role": "system", "content": content})
        if self.spec.shots.placement == "turns":
            for i, s in enumerate(self.shots):
                v = {"id": "shot", **s}
                msgs += [
                    self._user(f"shot {i + 1}", {**v, "example": v}),
                    {"role": "assistant", "content": s["answer"]},
                ]
        return msgs

    def messages(self, ex: Example) -> list[dict]:
        v = {
            "id": ex.id,
            "question": ex.question,
            "context": ex.context,
            "answers": list(ex.answers),
        }
        return [
            *(dict(m) for m in self._fixed_messages),
            self._user(f"example {ex.id!r}", {**v, "example": v}),
        ]

    def render_all(self, examples: list[Example]) -> list[list[dict]]:
        """messages() for every example, all within jinja's TOTAL_SECONDS plus PER_EXAMPLE_SECONDS
        per example; past it, a TemplateError naming the template."""
        out: list[list[dict]] = []
        seconds = jinja.TOTAL_SECONDS + jinja.PER_EXAMPLE_SECONDS * len(examples)
        with jinja.limits(seconds, f"rendering all {len(examples)} prompts"):
            for ex in examples:
                try:
                    jinja.tick()
                except jinja.TemplateLimit as e:
                    msg = f"{self.user.path} (example {ex.id!r}): {e}"
                    raise TemplateError(
                        msg, file=self.where, field="prompt.template", hint=jinja.LIMIT_HINT
                    ) from None
                out.append(self.messages(ex))
        return out
