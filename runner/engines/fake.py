"""A deterministic engine for pipeline tests and dry runs: no model, made-up replies. Its reply is a
Jinja template over the example (`reply: "{{ answers[0] }}"` answers correctly, the default a fixed
string), compiled and rendered in the prompts' bounded sandbox. Token counts come from the recipe's
tokenizer when `model.tokenizer` names one (or the model is a builtin), otherwise from
whitespace-separated words. It never stands in for a test of a real engine: reports label it as fake
and its scores are marked not meaningful. Its server (`load:` recipes) is the serving wing's
runner/serve/fake_server.py; the command that starts it and the verdicts read from its log are
here."""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import jinja2.meta
from pydantic import Field, field_validator

from runner.base.errors import TemplateError
from runner.base.jinja import CompiledTemplate, compile_text
from runner.base.types import EngineInfo, EngineSpecBase, Generation, Knob
from runner.engines.hf import (
    encode_prompts,
    load_tokenizer,
    messages_to_text,
    truncate_at_stop,
    uses_chat_template,
)

if TYPE_CHECKING:
    from runner.base.types import Advance, Example, Messages, ModelSpec, Request, Sampling, Sink

DEFAULT_REPLY = "fake reply"
# the fake server's line in engine.log with the settings it runs with
SETTINGS_MARK = "fake server settings: "


class FakeSpec(EngineSpecBase):
    """A fake engine: deterministic replies rendered from the example, no model (pipeline tests, dry
    runs)."""

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
    jitter: float = Field(
        0.0,
        ge=0,
        le=3,
        allow_inf_nan=False,
        description="Noise of a busy machine: each generate() call's delays are all multiplied by "
        "one log-normal factor exp(N(0, jitter)), drawn afresh every call (median 1: the median "
        "time stays len x delay_s).",
    )
    serve_fail: bool = Field(
        False,
        description="Server mode (`load:`): the fake server exits with an error "
        "before it is ready (tests of the failure path).",
    )

    fake = True
    serves = True
    label = "fake (no model: replies are made up)"

    @field_validator("reply")
    @classmethod
    def _compiles(cls, v: str) -> str:
        reply_template(v)
        return v

    def check_examples(self, examples: Sequence[Example]) -> None:
        """The reply rendered for every example now, so a template that fails on one row is found by
        `check`."""
        template = reply_template(self.reply)
        for ex in examples:
            render_reply(template, ex)

    def build(self, model: ModelSpec, chat: bool | None) -> FakeEngine:
        return FakeEngine(self, model, chat)

    def server_command(
        self, model: ModelSpec, host: str, port: int
    ) -> tuple[list[str], dict[str, str]]:
        fail = ["--fail-start"] if self.serve_fail else []
        cmd = [
            sys.executable,
            "-m",
            "runner.serve.fake_server",
            "--host",
            host,
            "--port",
            str(port),
            *fail,
        ]
        cmd += ["--reply", served_reply(self.reply), "--delay-s", repr(self.delay_s)]
        root = str(Path(__file__).resolve().parents[2])  # so `-m runner.serve.fake_server` imports
        return cmd, {
            "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        }

    def served_evidence(
        self, model: ModelSpec, log: str, grown: dict[str, float], version: str
    ) -> EngineInfo:
        lines = [
            x.removeprefix(SETTINGS_MARK) for x in log.splitlines() if x.startswith(SETTINGS_MARK)
        ]
        got, ev = (
            json.loads(lines[-1]) if lines else {},
            "the fake server's settings line in engine.log",
        )
        why = (
            "; the server sees token ids, not the example, so a reply template with variables "
            "is sent as a fixed text"
        )
        sent = [
            ("reply", served_reply(self.reply), why if _variables(self.reply) else ""),
            ("delay_s", self.delay_s, ""),
        ]
        knobs = [
            Knob(
                name=k,
                requested=getattr(self, k),
                effective=got.get(k),
                status="applied" if got.get(k) == want and not note else "ignored",
                evidence=ev + note,
            )
            for k, want, note in sent
        ]
        return EngineInfo(
            self.kind,
            version,
            knobs=knobs,
            notes=["fake server: replies are a fixed text, no model ran"],
        )


def reply_template(text: str) -> CompiledTemplate:
    """The reply compiled in the bounded sandbox (a template that would compute or loop without
    bound is refused in seconds, as a prompt template is)."""
    try:
        return compile_text(text, "reply", "", "engine.reply")
    except TemplateError as e:
        raise ValueError(f"reply is not a usable Jinja template: {e.message}") from None


def _variables(reply: str) -> bool:
    return bool(
        jinja2.meta.find_undeclared_variables(
            reply_template(reply).template.environment.parse(reply)
        )
    )


def served_reply(reply: str) -> str:
    """What the fake server sends: the reply rendered when it is a template without variables, else
    DEFAULT_REPLY (the server gets token ids, not the example the template would need)."""
    return DEFAULT_REPLY if _variables(reply) else reply_template(reply).render("", "engine.reply")


def render_reply(template: CompiledTemplate, ex: Example) -> str:
    """The reply for one example (the template over its question, context, answers and id)."""
    fields = dict(question=ex.question, context=ex.context, answers=list(ex.answers), id=ex.id)
    return template.render("", "engine.reply", what=f"example {ex.id!r}", **fields)


def jitter_factor(jitter: float, rng: random.Random) -> float:
    """One generate() call's slow-down: log-normal with median 1 (a busy machine's multiplicative
    noise)."""
    return math.exp(rng.gauss(0.0, jitter)) if jitter else 1.0


class FakeEngine:
    def __init__(self, spec: FakeSpec, model: ModelSpec, chat: bool | None):
        t0 = time.perf_counter()
        self.spec, self.template = spec, reply_template(spec.reply)
        self.tokenizer, self.chat = None, False
        if model.tokenizer or model.id.startswith("builtin:"):
            self.tokenizer = load_tokenizer(model)
            self.chat = uses_chat_template(self.tokenizer, chat)
        counted = "tokenizer" if self.tokenizer else "whitespace words"
        # each setting as asked, and how
        done = {"reply": "per example", "delay_s": "slept", "jitter": "per call"}
        knobs = [
            Knob(
                name=k,
                requested=getattr(spec, k),
                effective=getattr(spec, k),
                status="applied",
                evidence=ev,
            )
            for k, ev in done.items()
        ]
        knobs.append(
            Knob(
                name="tokens",
                effective=counted,
                status="default",
                evidence="how tokens are counted",
            )
        )
        # the report
        self.info = EngineInfo(
            "fake", "", "none (fake engine)", time.perf_counter() - t0, knobs=knobs
        )
        # says it is fake in its own banner

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        if self.tokenizer is not None:
            return encode_prompts(self.tokenizer, list(messages), self.chat)
        texts = [messages_to_text(m) for m in messages]
        return texts, [self._ids(t) for t in texts]

    def _ids(self, text: str) -> list[int]:
        if self.tokenizer is None:  # whitespace words with stable ids
            return [zlib.crc32(w.encode()) & 0x7FFFFFFF for w in text.split()]
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: Advance | None = None,
        sink: Sink | None = None,
    ) -> list[Generation]:
        out, delay = [], self.spec.delay_s * jitter_factor(self.spec.jitter, random.SystemRandom())
        for i, req in enumerate(requests):
            if delay:
                time.sleep(delay)
            text, _ = truncate_at_stop(render_reply(self.template, req.example), sampling.stop)
            ids, n = self._ids(text), sampling.max_tokens
            if len(ids) <= n:
                n = len(ids)
            elif self.tokenizer is None:
                text = " ".join(text.split()[:n])
            else:
                text = self.tokenizer.decode(ids[:n], skip_special_tokens=True)
            g = Generation(
                text=text, prompt_tokens=len(req.ids), output_tokens=n, latency_s=self.spec.delay_s
            )
            out.append(g)
            if sink:
                sink([(i, g)])
            if progress:
                progress(1)
        return out

    def reset_prefix_cache(self) -> None:
        return None  # no prefix cache

    def close(self) -> None:
        self.tokenizer = None
