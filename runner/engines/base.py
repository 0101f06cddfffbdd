"""The engine seam: the one place engines differ.

An engine takes token-id prompts and engine-neutral sampling settings and
returns generations. Everything engine-specific (argument translation, library
imports, effective-knob evidence) lives in the engine's own module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int | None = None      # prompt tokens served from the prefix cache
    ttft_s: float | None = None           # time to first token, per request
    latency_s: float | None = None        # end-to-end latency, per request


@dataclass
class Knob:
    """A setting the recipe asked for, and what the run shows took effect."""
    name: str
    requested: Any
    effective: Any
    status: str          # "applied" | "ignored" | "default" | "unverified"
    evidence: str = ""


@dataclass
class EngineInfo:
    """Facts the engine measured or reported about itself during the run."""
    name: str
    version: str
    device: str = ""
    load_s: float = 0.0
    weights_gib: float | None = None
    kv_cache_tokens: int | None = None
    quantization: str | None = None
    knobs: list[Knob] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


ProgressFn = Callable[[int], None]
SinkFn = Callable[[list[tuple[int, "Generation"]]], None]   # (prompt index, generation) pairs as they finish


class Engine(Protocol):
    info: EngineInfo

    def encode(self, messages: list[list[dict]]) -> tuple[list[str], list[list[int]]]:
        """Each prompt's text and token ids, exactly as generate() will see them."""

    def generate(self, prompts: list[list[int]], sampling: Any, progress: ProgressFn | None = None,
                 sink: SinkFn | None = None) -> list[Generation]:
        """Generate one completion per token-id prompt, in order; hand finished ones to `sink`
        as soon as they are done (so an interrupted run keeps them)."""

    def close(self) -> None:
        """Release the model and every resource the engine holds."""
