"""The settings both the recipe and the engines speak: which model, and how to sample.

Engines import these (the engine protocol is typed with them); recipes embed them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from runner.strict import StrictModel

MAX_TOKENS = 1_048_576  # 2**20: more than any model's context
MAX_SEED = 2**63 - 1  # what every engine's RNG takes


class ModelSpec(StrictModel):
    """Which model to load."""

    id: str = Field(
        description="Hub id (`Qwen/Qwen2.5-7B-Instruct`), a local folder, or `builtin:demo` "
        "(a tiny random model built offline for smoke tests)."
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) to load.")
    tokenizer: str | None = Field(None, description="Tokenizer id or folder; defaults to `id`.")
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", description="Weight and activation dtype; `auto` takes the checkpoint's (float32 on CPU)."
    )
    load_format: Literal["auto", "dummy"] = Field(
        "auto", description="`dummy` = random weights with the real shapes: speed only, scores mean nothing."
    )
    trust_remote_code: bool = Field(False, description="Allow code shipped with the checkpoint to run. Off unless set.")

    @property
    def tokenizer_id(self) -> str:
        return self.tokenizer or self.id


class Sampling(StrictModel):
    """Engine-neutral sampling; each engine translates it into its own arguments."""

    temperature: float = Field(0.0, ge=0, le=100, allow_inf_nan=False, description="0 = greedy decoding.")
    top_p: float = Field(1.0, gt=0, le=1, allow_inf_nan=False, description="Nucleus sampling mass, in (0, 1].")
    top_k: NonNegativeInt = Field(0, le=MAX_TOKENS, description="Keep the k most likely tokens; 0 = off.")
    max_tokens: PositiveInt = Field(64, le=MAX_TOKENS, description="Most output tokens per example.")
    stop: list[Annotated[str, Field(min_length=1, max_length=1000)]] = Field(
        default_factory=list,
        max_length=64,
        description="Strings that end the output (not included); none may be empty (an empty stop string "
        "would end every output before it starts).",
    )
    ignore_eos: bool = Field(False, description="Keep generating past end-of-sequence (speed runs: fixed length).")
    seed: int | None = Field(
        None, ge=0, le=MAX_SEED, description="Sampling seed (only matters when temperature > 0), 0 to 2**63-1."
    )
