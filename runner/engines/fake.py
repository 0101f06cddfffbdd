"""A deterministic engine for pipeline tests and dry runs: no model, made-up replies.

Its reply is a Jinja template over the example (`reply: "{{ answers[0] }}"` answers
correctly, the default a fixed string). Token counts come from the recipe's tokenizer when
`model.tokenizer` names one (or the model is a builtin), otherwise from whitespace-separated
words. It never stands in for a test of a real engine: reports label it as fake and its scores
are marked not meaningful.

Server mode (recipes with `load:`): runner/engines/fake_server.py, an OpenAI-compatible completions
server that streams `served_reply(reply)` word by word, one request at a time, `delay_s` each. It gets
token ids, not the example, so a reply template with variables is sent as DEFAULT_REPLY."""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from runner.config.common import ModelSpec, Sampling
from runner.engines.base import EngineInfo, EngineSpecBase, Generation, Knob, Messages, ProgressFn, Request, SinkFn

DEFAULT_REPLY = "fake reply"


class FakeSpec(EngineSpecBase):
    """A fake engine: deterministic replies rendered from the example, no model (pipeline tests, dry runs)."""

    kind: Literal["fake"] = Field(description="Engine selector.")
    reply: str = Field(
        DEFAULT_REPLY,
        max_length=10_000,
        description="Jinja template of the reply, over the example's `question`, `context`, "
        "`answers`, `id` (e.g. `{{ answers[0] }}`).",
    )
    delay_s: float = Field(
        0.0,
        ge=0,
        le=60,
        allow_inf_nan=False,
        description="Seconds each request takes (requests run one after another).",
    )
    serve_fail: bool = Field(
        False,
        description="Server mode (`load:`): the fake server exits with an error "
        "before it is ready (tests of the failure path).",
    )

    fake: ClassVar[bool] = True
    serves: ClassVar[bool] = True
    label: ClassVar[str] = "fake (no model: replies are made up)"

    @field_validator("reply")
    @classmethod
    def _compiles(cls, v: str) -> str:
        _template(v)
        return v

    def build(self, model: ModelSpec, chat: bool | None) -> FakeEngine:
        return FakeEngine(self, model, chat)

    def serve_command(self, model: ModelSpec, host: str, port: int) -> list[str] | None:
        """runner/engines/fake_server.py: streams `served_reply(reply)` word by word, one request at a time."""
        import sys

        cmd = [
            sys.executable,
            "-m",
            "runner.engines.fake_server",
            "--host",
            host,
            "--port",
            str(port),
            "--reply",
            served_reply(self.reply),
            "--delay-s",
            repr(self.delay_s),
        ]
        return cmd + (["--fail-start"] if self.serve_fail else [])

    def serve_env(self) -> dict[str, str]:
        import os
        from pathlib import Path

        root = str(Path(__file__).resolve().parents[2])  # so `-m runner.engines.fake_server` imports
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        return {"PYTHONPATH": os.pathsep.join(paths if root in paths else [root, *paths])}

    def serve_evidence(self, model: ModelSpec, log_text: str, counters: dict[str, float]) -> Any:
        import json

        from runner.engines.base import ServeEvidence

        lines = [ln for ln in log_text.splitlines() if ln.startswith(SETTINGS_MARK)]
        got = json.loads(lines[-1][len(SETTINGS_MARK) :]) if lines else {}
        ev = "the fake server's settings line in engine.log"
        fixed = _has_variables(self.reply)
        knobs = (
            Knob(
                name="reply",
                requested=self.reply,
                effective=got.get("reply"),
                evidence=ev
                + (
                    "; the server sees token ids, not the example, so a reply template with variables is "
                    "sent as a fixed text"
                    if fixed
                    else ""
                ),
                status="applied" if got.get("reply") == served_reply(self.reply) and not fixed else "ignored",
            ),
            Knob(
                name="delay_s",
                requested=self.delay_s,
                effective=got.get("delay_s"),
                evidence=ev,
                status="applied" if got.get("delay_s") == self.delay_s else "ignored",
            ),
        )
        return ServeEvidence(knobs=knobs, notes=("fake server: replies are a fixed text, no model ran",))


SETTINGS_MARK = "fake server settings: "


def served_reply(reply: str) -> str:
    """What the fake server sends: the reply rendered when it is a template without variables, else
    DEFAULT_REPLY (the server gets token ids, not the example the template would need)."""
    return DEFAULT_REPLY if _has_variables(reply) else _template(reply).render("", "engine.reply")


def _has_variables(reply: str) -> bool:
    from jinja2 import meta

    return bool(meta.find_undeclared_variables(_template(reply).template.environment.parse(reply)))


def _template(text: str) -> Any:
    """The reply compiled in the prompts' bounded sandbox (a template that would compute or loop without
    bound is refused in seconds, as a prompt template is)."""
    from runner.errors import TemplateError
    from runner.inputs.prompts import compile_text

    try:
        return compile_text(text, "reply", "", "engine.reply")
    except TemplateError as e:
        raise ValueError(f"reply is not a usable Jinja template: {e.message}") from None


class _Words:
    """Whitespace tokens with stable ids, for a fake engine with no tokenizer."""

    def encode(self, text: str) -> list[int]:
        return [zlib.crc32(w.encode()) & 0x7FFFFFFF for w in text.split()]

    def cut(self, text: str, n: int) -> str:
        return " ".join(text.split()[:n])


class _HFTokens:
    def __init__(self, tokenizer: Any):
        self.tok = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def cut(self, text: str, n: int) -> str:
        return self.tok.decode(self.encode(text)[:n], skip_special_tokens=True)


class FakeEngine:
    def __init__(self, spec: FakeSpec, model: ModelSpec, chat: bool | None):
        t0 = time.perf_counter()
        self.spec, self.template = spec, _template(spec.reply)
        self.tokenizer, self.chat = None, False
        if model.tokenizer or model.id.startswith("builtin:"):
            from runner.engines.tokenizing import load_tokenizer, uses_chat_template

            self.tokenizer = load_tokenizer(model)
            self.chat = uses_chat_template(self.tokenizer, chat)
        self.tokens = _HFTokens(self.tokenizer) if self.tokenizer is not None else _Words()
        self.info = EngineInfo(name="fake", version="-", device="none (fake engine)", load_s=time.perf_counter() - t0)
        self.info.notes.append(
            "fake engine: replies are rendered from a template, no model ran; "
            "times and scores say nothing about a model"
        )
        self.info.knobs = [
            Knob(
                name="reply",
                requested=spec.reply,
                effective=spec.reply,
                status="applied",
                evidence="rendered per example",
            ),
            Knob(
                name="delay_s",
                requested=spec.delay_s,
                effective=spec.delay_s,
                status="applied",
                evidence="slept per request",
            ),
            Knob(
                name="tokens",
                requested=None,
                effective="tokenizer" if self.tokenizer else "whitespace words",
                status="default",
                evidence="how prompt and output tokens are counted",
            ),
        ]

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        if self.tokenizer is not None:
            from runner.engines.tokenizing import encode_prompts

            return encode_prompts(self.tokenizer, list(messages), self.chat)
        from runner.engines.tokenizing import messages_to_text

        texts = [messages_to_text(m) for m in messages]
        return texts, [self.tokens.encode(t) for t in texts]

    def _reply(self, req: Request, sampling: Sampling) -> Generation:
        ex = req.example
        text = self.template.render(
            "",
            "engine.reply",
            what=f"example {ex.id!r}",
            question=ex.question,
            context=ex.context,
            answers=list(ex.answers),
            id=ex.id,
        )
        from runner.engines.tokenizing import truncate_at_stop

        text, _ = truncate_at_stop(text, sampling.stop)
        n = len(self.tokens.encode(text))
        if n > sampling.max_tokens:
            text, n = self.tokens.cut(text, sampling.max_tokens), sampling.max_tokens
        return Generation(text=text, prompt_tokens=len(req.ids), output_tokens=n, latency_s=self.spec.delay_s)

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: ProgressFn | None = None,
        sink: SinkFn | None = None,
    ) -> list[Generation]:
        out = []
        for i, req in enumerate(requests):
            if self.spec.delay_s:
                time.sleep(self.spec.delay_s)
            g = self._reply(req, sampling)
            out.append(g)
            if sink:
                sink([(i, g)])
            if progress:
                progress(1)
        return out

    def reset_prefix_cache(self) -> bool:
        return False  # no prefix cache

    def close(self) -> None:
        self.tokenizer = None
