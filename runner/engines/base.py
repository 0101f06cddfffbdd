"""The engine seam: the one place engines differ.

An engine takes token-id requests and engine-neutral sampling settings and
returns generations. Everything engine-specific (argument translation, library
imports, effective-knob evidence) lives in the engine's own module; the facts
the rest of the runner needs about an engine kind live on its spec class
(`EngineSpecBase`'s class variables), so nothing outside `engines/` asks which
engine it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from runner.strict import StrictModel

if TYPE_CHECKING:
    from runner.config.common import ModelSpec, Sampling
    from runner.inputs.datasets import Example

Messages = list[dict[str, str]]
KnobStatus = Literal["applied", "ignored", "default", "unverified"]


@dataclass(frozen=True)
class Request:
    """One prompt as the engine receives it: its token ids and the example it was rendered from."""

    ids: list[int]
    example: Example


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int | None = None  # prompt tokens served from the prefix cache
    ttft_s: float | None = None  # time to first token, per request
    latency_s: float | None = None  # end-to-end latency, per request


class Knob(BaseModel):
    """A setting the recipe asked for, and what the run shows took effect (a row of results.json)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    requested: Any = None
    effective: Any = None
    status: KnobStatus
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
SinkFn = Callable[[list[tuple[int, Generation]]], None]  # (request index, generation) pairs as they finish


class Engine(Protocol):
    info: EngineInfo

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        """Each prompt's text and token ids, exactly as generate() will see them."""

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: ProgressFn | None = None,
        sink: SinkFn | None = None,
    ) -> list[Generation]:
        """One completion per request, in order; finished ones go to `sink` as soon as they are
        done (so an interrupted run keeps them)."""

    def reset_prefix_cache(self) -> bool:
        """Forget cached prefixes (between recipes that share this engine); False if it keeps none."""

    def close(self) -> None:
        """Release the model and every resource the engine holds."""


@dataclass(frozen=True)
class CrashEvidence:
    """What an engine's log shows it had done, read when a run ended before it could report."""

    weights_gib: float | None = None
    kv_cache_tokens: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServeEvidence:
    """What an engine's server shows took effect (its log) and did (its /metrics counters)."""

    knobs: tuple[Knob, ...] = ()
    cached_tokens: int | None = None  # prompt tokens served from the prefix cache, over the counters given
    weights_gib: float | None = None
    kv_cache_tokens: int | None = None
    notes: tuple[str, ...] = ()


class EngineSpecBase(StrictModel):
    """Base of every engine's recipe section. Subclasses add `kind: Literal[...]`, their fields and
    `build()`, and set the class facts below; the registry tuple in `engines/__init__.py` is the
    only list of engines."""

    library: ClassVar[str | None] = None  # module that must be importable for `go` to run it
    packages: ClassVar[tuple[str, ...]] = ()  # distributions whose versions results.json records
    prefix_cache_field: ClassVar[str | None] = None  # this spec's automatic-prefix-caching knob, if any
    prefix_cache_default: ClassVar[bool] = False  # what the engine does when that field is unset
    fake: ClassVar[bool] = False  # outputs are made up: label reports, scores mean nothing
    serves: ClassVar[bool] = False  # has an OpenAI-compatible server mode (`load:` recipes)
    label: ClassVar[str] = ""  # how reports name the engine

    @classmethod
    def kind_name(cls) -> str:
        return cls.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]

    def build(self, model: ModelSpec, chat: bool | None) -> Engine:
        raise NotImplementedError

    def preflight(self, model: ModelSpec) -> None:
        """User errors this engine can see before anything runs (pure of engine libraries);
        raise RunnerError naming the field. Checks of the host the engine runs on: with `runner go
        --executor ray` they run on the worker node, not on the driver."""

    def gpus_needed(self) -> int:
        """GPUs one engine needs, all on one node: what a Ray task running it asks for (0: CPU only)."""
        return 0

    def context_limit(self) -> int | None:
        """The context length this engine is told to use (None: the model's own)."""
        return None

    def plan_settings(self, model: ModelSpec) -> dict[str, Any]:
        """The settings `runner plan` predicts with (keyword arguments of planning.make_plan): memory,
        KV cache and batching as this engine will use them. Default: no prefix cache."""
        return {"dtype": model.dtype, "enable_prefix_caching": False}

    def serve_command(self, model: ModelSpec, host: str, port: int) -> list[str] | None:
        """The command line that starts this engine as an OpenAI-compatible server (for recipes with
        `load:`), or None if the engine has no server mode."""
        return None

    def serve_env(self) -> dict[str, str]:
        """Environment variables for the server process."""
        return {}

    def serve_evidence(self, model: ModelSpec, log_text: str, counters: dict[str, float]) -> ServeEvidence:
        """Requested vs effective settings of this engine's server, read from what it logged since it
        started (`log_text`), and what its /metrics counters (`counters`: growth over the measured
        requests, `*_total` names) say, e.g. prefix-cache hits. Default: nothing known."""
        return ServeEvidence()

    def prefix_caching_requested(self) -> bool:
        if self.prefix_cache_field is None:
            return False
        value = getattr(self, self.prefix_cache_field)
        return self.prefix_cache_default if value is None else bool(value)

    @classmethod
    def crash_evidence(cls, log_text: str) -> CrashEvidence:
        """Facts read from the engine's log of a run that ended early (default: none)."""
        return CrashEvidence()
