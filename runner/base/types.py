"""The engine seam and the settings it speaks: which model, how to sample, an example, a request, a
generation, a knob, what an engine reports about itself, and the base of every engine's recipe
section.

Engines import these (and nothing above them); recipes embed ModelSpec and Sampling."""

from __future__ import annotations

import importlib
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    field_validator,
    model_validator,
)

MAX_TOKENS = 1_048_576  # 2**20: more than any model's context
MAX_SEED = 2**63 - 1  # what every engine's RNG takes
Messages = list[dict[str, str]]


class StrictModel(BaseModel):
    """The base of every configuration model: unknown keys are errors; instances are immutable; a
    number field refuses true/false (pydantic would read `max_tokens: true` as 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, data: Any) -> Any:
        """true/false given to a number field: handed on as the words, which it refuses (at its own
        place: `got 'true'`)."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            k: _bool_words(v, fields[k].annotation) if k in fields else v for k, v in data.items()
        }


def unwrap(ann: Any) -> Any:
    """An annotation without its `Annotated[...]` layers."""
    while typing.get_origin(ann) is Annotated:
        ann = typing.get_args(ann)[0]
    return ann


def union_args(ann: Any) -> tuple | None:
    """The members of a union annotation (None: not a union)."""
    unions = (typing.Union, types.UnionType)
    return typing.get_args(ann) if typing.get_origin(ann) in unions else None


def _bool_words(value: Any, ann: Any) -> Any:
    """`value` with each true/false where `ann` takes only a number (in a list or mapping of
    numbers too: `slo: {ttft: true}`) turned into its word."""
    if isinstance(value, bool):
        return str(value).lower() if _number_only(ann) else value
    for m in map(unwrap, union_args(unwrap(ann)) or (ann,)):
        args, origin = typing.get_args(m), typing.get_origin(m)
        if origin is dict and isinstance(value, dict) and len(args) == 2:
            return {k: _bool_words(v, args[1]) for k, v in value.items()}
        if origin is list and isinstance(value, list) and args:
            return [_bool_words(v, args[0]) for v in value]
    return value


def _number_only(ann: Any) -> bool:
    """The annotation takes numbers (int, float) and not booleans."""
    ann = unwrap(ann)
    if (args := union_args(ann)) is not None:
        return any(map(_number_only, args)) and not any(map(_takes_bool, args))
    return isinstance(ann, type) and issubclass(ann, (int, float)) and ann is not bool


def _takes_bool(ann: Any) -> bool:
    ann = unwrap(ann)
    if (args := union_args(ann)) is not None:
        return any(map(_takes_bool, args))
    if typing.get_origin(ann) is Literal:
        return any(isinstance(x, bool) for x in typing.get_args(ann))
    return ann is bool or ann is Any


class ModelSpec(StrictModel):
    """Which model to load."""

    id: str = Field(
        min_length=1,
        description="Hub id (`Qwen/Qwen2.5-7B-Instruct`), a local folder, a local `.gguf` file, or "
        "`builtin:demo` (a tiny random model built offline for smoke tests).",
    )
    gguf_file: str | None = Field(
        None,
        description="A GGUF file inside the `id` folder (or give the `.gguf` path as `id`). Its "
        "weights are dequantized on load; its tokenizer and chat template are used unless "
        "`tokenizer` names others. Needs `pip install 'runner[gguf]'`.",
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) to load.")
    tokenizer: str | None = Field(None, description="Tokenizer id or folder; defaults to `id`.")
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto",
        description="Weight and activation dtype; `auto` takes the checkpoint's (float32 on CPU).",
    )
    load_format: Literal["auto", "dummy"] = Field(
        "auto",
        description="`dummy` = random weights with the real shapes: speed only, scores mean "
        "nothing.",
    )
    trust_remote_code: bool = Field(
        False, description="Allow code shipped with the checkpoint to run. Off unless set."
    )

    @property
    def tokenizer_id(self) -> str:
        return self.tokenizer or self.id

    @property
    def gguf_path(self) -> Path | None:
        """The GGUF file this model is loaded from, or None for any other model."""
        path = Path(self.id).expanduser()
        if self.gguf_file:
            return path / self.gguf_file
        return path if self.id.lower().endswith(".gguf") else None


class Sampling(StrictModel):
    """Engine-neutral sampling; each engine translates it into its own arguments."""

    temperature: float = Field(
        0.0, ge=0, le=100, allow_inf_nan=False, description="0 = greedy decoding."
    )
    top_p: float = Field(
        1.0, gt=0, le=1, allow_inf_nan=False, description="Nucleus sampling mass, in (0, 1]."
    )
    top_k: NonNegativeInt = Field(
        0, le=MAX_TOKENS, description="Keep the k most likely tokens; 0 = off."
    )
    max_tokens: PositiveInt = Field(
        64, le=MAX_TOKENS, description="Most output tokens per example."
    )
    stop: list[Annotated[str, Field(min_length=1, max_length=1000)]] = Field(
        default_factory=list,
        max_length=64,
        description="Strings that end the output (not included); none may be empty (an empty stop "
        "string would end every output before it starts).",
    )
    ignore_eos: bool = Field(
        False, description="Keep generating past end-of-sequence (speed runs: fixed length)."
    )
    seed: int | None = Field(
        None,
        ge=0,
        le=MAX_SEED,
        description="Sampling seed (only matters when temperature > 0), 0 to 2**63-1.",
    )

    @field_validator("stop")
    @classmethod
    def _no_written_escapes(cls, stop: list[str]) -> list[str]:
        """`stop: [\\n]` unquoted in YAML (or through --set) is a backslash and an n, which no
        output holds: refused, not silently never matched."""
        for s in stop:
            if m := re.search(r"\\[ntr]", s):
                raise ValueError(
                    f"{s!r} holds a backslash and a letter ({m.group()!r}), not a newline or tab: "
                    'YAML reads escapes only in double quotes; write stop: ["\\n"]'
                )
        return stop


@dataclass(frozen=True)
class Example:
    """One normalized dataset row."""

    id: str
    question: str
    context: str = ""
    answers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """One prompt as the engine receives it: its token ids, and the example it was rendered from
    (only the fake engine reads it: its reply template may use the example's fields)."""

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
    """A setting the recipe asked for, and what the run shows took effect (a row of
    results.json)."""

    model_config = ConfigDict(extra="forbid")  # mutable, as the results models are

    name: str
    requested: Any = None
    effective: Any = None
    status: Literal["applied", "ignored", "default", "unverified"]
    evidence: str = ""


@dataclass
class EngineInfo:
    """Facts the engine measured or reported about itself (or, for a run that ended early, that its
    log shows)."""

    name: str = ""
    version: str = ""
    device: str = ""
    load_s: float = 0.0
    weights_gib: float | None = None
    kv_cache_tokens: int | None = None
    quantization: str | None = None
    knobs: list[Knob] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # the GPUs the engine runs on (their energy counters are read; GPU-seconds are priced per GPU)
    gpus: int = 0
    # the most sequences one step of the engine holds (vLLM's `max_num_seqs`, a static batch's size;
    # None: unknown): a profile's window is one such step's worth of prompts
    batch: int | None = None


Advance = Callable[[int], None]  # a progress bar's update: how many more requests finished
# (request index, generation) pairs as they finish
Sink = Callable[[list[tuple[int, Generation]]], None]


# set (to "1") while the engine of a job with a recipe that profiles is built: an engine whose
# profiler must be set up at construction (vLLM) reads it
PROFILE_ENV = "RUNNER_PROFILE"
# prompts a profile takes: one engine step's worth (`EngineInfo.batch`), so the window's steps are
# shaped as the run's; PROFILE_WINDOW where the engine does not say; at most PROFILE_MAX_WINDOW
# (traces grow with steps)
PROFILE_WINDOW, PROFILE_MAX_WINDOW = 128, 1024


class Engine(Protocol):
    info: EngineInfo

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        """Each prompt's text and token ids, exactly as generate() will see them."""

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: Advance | None,
        sink: Sink | None,
    ) -> list[Generation]:
        """One completion per request, in order; finished ones go to `sink` as soon as they are done
        (so an interrupted run keeps them)."""

    # optional: `profiled(folder)`, a context manager running what is inside under the engine's
    # profiler and leaving Chrome trace files in `folder` (`profile: true`; runner/run/profile.py)
    # optional: `prepare(sampling)`, called before a generation is timed (engine-side setup for
    # those settings,
    # e.g. transformers' continuous batching manager); it counts toward the engine start
    # (`info.load_s`)

    def reset_prefix_cache(self) -> bool | None:
        """Forget cached prefixes (between recipes that share this engine): True when emptied,
        False when it keeps some it could not empty, None when it keeps none."""

    def close(self) -> None:
        """Release the model and every resource the engine holds."""


class EngineSpecBase(StrictModel):
    """Base of every engine's recipe section. Subclasses add `kind: Literal[...]`, their fields and
    `build()`, and set the class facts below; the registry tuple in `runner/engines/__init__.py` is
    the only list."""

    library: ClassVar[str | None] = None  # module that must be importable for `go` to run it
    # what `build` imports of it beyond its top (a lazily loaded package, vLLM's or transformers',
    # imports its parts on first use): loaded ahead too, so no import lands in the engine's start
    preloads: ClassVar[tuple[str, ...]] = ()
    packages: ClassVar[tuple[str, ...]] = ()  # distributions whose versions results.json records
    # this spec's automatic-prefix-caching knob, if any
    prefix_cache_field: ClassVar[str | None] = None
    prefix_cache_default: ClassVar[bool] = False  # what the engine does when that field is unset
    fake: ClassVar[bool] = False  # outputs are made up: label reports, scores mean nothing
    serves: ClassVar[bool] = False  # has an OpenAI-compatible server mode (`load:` recipes)
    label: ClassVar[str] = ""  # how reports name the engine
    # a paged KV-cache pool sized from free GPU memory (vLLM): `runner plan` predicts its capacity,
    # the prefix-cache
    # hits, the memory fit and the compute floor; for other engines it plans prompt tokens, context
    # fit and weights
    kv_pool: ClassVar[bool] = False

    @classmethod
    def kind_name(cls) -> str:
        return cls.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]

    def build(self, model: ModelSpec, chat: bool | None) -> Engine:
        raise NotImplementedError

    def preload(self, model: ModelSpec | None = None) -> None:
        """Import the engine's library ahead of `build` (a worker process started before its
        job); an engine may also load what it would for `model` (vLLM: its tokenizer)."""
        for name in (self.library, *self.preloads) if self.library else ():
            importlib.import_module(name)

    def preflight(self, model: ModelSpec) -> None:
        """User errors this engine can see on the host that runs it before anything runs (pure of
        engine libraries); raise RunnerError naming the field."""

    def check_examples(self, examples: Sequence[Example]) -> None:
        """User errors this engine would meet on some example, found before anything runs (the fake
        engine renders its reply for each); raise RunnerError naming the field."""

    def gpus_needed(self) -> int:
        """GPUs one engine needs, all on one node (0: CPU only)."""
        return 0

    def context_limit(self) -> int | None:
        """The context length this engine is told to use (None: the model's own)."""
        return None

    def plan_settings(self, model: ModelSpec) -> dict[str, Any]:
        """The settings `runner plan` predicts with (keyword arguments of its `make_plan`), and
        `device`: where the model runs, `cpu`, `gpu`, or None for the machine planned for. Default:
        on the CPU, no prefix cache."""
        return {"dtype": model.dtype, "enable_prefix_caching": False, "device": "cpu"}

    def prefix_caching_requested(self) -> bool:
        if self.prefix_cache_field is None:
            return False
        value = getattr(self, self.prefix_cache_field)
        return self.prefix_cache_default if value is None else bool(value)

    @classmethod
    def crash_evidence(cls, log_text: str) -> EngineInfo:
        """What the engine's log shows it had done, read when a run ended before it could report."""
        return EngineInfo()

    def server_command(
        self, model: ModelSpec, host: str, port: int
    ) -> tuple[list[str], dict[str, str]]:
        """With `serves`: the command line and environment that start this engine as an
        OpenAI-compatible server on host:port (the serving wing runs it)."""
        raise NotImplementedError

    def served_evidence(
        self, model: ModelSpec, log: str, grown: dict[str, float], version: str
    ) -> EngineInfo:
        """With `serves`: what its server shows took effect (knob verdicts; weights and KV cache
        where known), from the server's log and its counters' growth over the measured requests
        (`grown`)."""
        raise NotImplementedError
