"""Hugging Face transformers `generate`: the baseline engine.

`batch_size: 1` is the plain one-prompt-at-a-time loop; larger batches pad on the
left and run length-sorted. torch/transformers are imported only when built (the engine object is in
`transformers_engine.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from runner.config.common import ModelSpec
from runner.engines.base import EngineSpecBase, Knob
from runner.errors import RunnerError

if TYPE_CHECKING:
    from runner.engines.transformers_engine import TransformersEngine


class TransformersSpec(EngineSpecBase):
    """Hugging Face transformers `generate` (the baseline)."""

    library: ClassVar[str | None] = "transformers"
    packages: ClassVar[tuple[str, ...]] = ("torch", "transformers", "tokenizers")
    label: ClassVar[str] = "transformers"

    kind: Literal["transformers"] = Field(description="Engine selector.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="`auto` = cuda when available, else cpu. "
        "On Ray (`--executor ray`) `cuda` reserves a GPU; `auto` "
        "reserves none.",
    )
    batch_size: PositiveInt = Field(
        1, le=65536, description="1 = one prompt at a time; larger = left-padded, length-sorted batches."
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] | None = Field(
        None, description="Attention kernel; default is transformers' choice (sdpa where supported)."
    )
    quantization: Literal["bitsandbytes-4bit", "bitsandbytes-8bit"] | None = Field(
        None,
        description="Quantize on load with bitsandbytes. Pre-quantized AWQ/GPTQ checkpoints need "
        "nothing here: transformers loads them as their config says.",
    )
    warmup: bool = Field(
        True,
        description="Run one short generation at engine start, so kernel selection "
        "and JIT stay out of the generation time.",
    )

    def build(self, model: ModelSpec, chat: bool | None) -> TransformersEngine:
        from runner.engines.transformers_engine import TransformersEngine

        return TransformersEngine(self, model, chat)

    def gpus_needed(self) -> int:
        """`cuda`: one GPU. `auto` asks for none (it must also run on a CPU-only node): Ray then reserves no
        GPU for it, yet on a node with GPUs it may still use one, as Ray 2.60 leaves CUDA_VISIBLE_DEVICES as
        it is for tasks that ask for none; set `device: cuda` to have one reserved."""
        return 1 if self.device == "cuda" else 0

    def preflight(self, model: ModelSpec) -> None:
        from runner.execution.gpumem import has_cuda_device

        if self.device == "cuda" and not has_cuda_device():
            raise RunnerError(
                "device is cuda but this machine has no NVIDIA GPU",
                field="engine.device",
                hint="use `device: auto` (cuda when there is one, else cpu) or `device: cpu`",
            )


@dataclass(frozen=True)
class TransformersFacts:
    """What the loaded model shows: where its parameters are and in what dtype, its attention kernel
    and quantization method."""

    device: str
    param_device: str
    dtype: str
    attn: str | None
    quantization: str | None
    weights_gib: float


def transformers_knobs(spec: TransformersSpec, model: ModelSpec, f: TransformersFacts) -> list[Knob]:
    """Every knob of a transformers recipe with its verdict (pure: facts given as data)."""

    def knob(name: str, requested: Any, effective: Any, status: str, evidence: str) -> Knob:
        return Knob(name=name, requested=requested, effective=effective, status=status, evidence=evidence)

    return [
        knob(
            "device",
            spec.device,
            f.device,
            "applied" if spec.device in ("auto", f.device) else "ignored",
            f"parameters on {f.param_device}",
        ),
        knob(
            "dtype",
            model.dtype,
            f.dtype,
            "applied" if model.dtype in ("auto", f.dtype) else "ignored",
            "dtype of the loaded parameters",
        ),
        knob("batch_size", spec.batch_size, spec.batch_size, "applied", "batches built by the runner"),
        knob(
            "attn_implementation",
            spec.attn_implementation,
            f.attn,
            "default"
            if spec.attn_implementation is None
            else ("applied" if f.attn == spec.attn_implementation else "ignored"),
            "model.config._attn_implementation",
        ),
        knob(
            "quantization",
            spec.quantization,
            f.quantization,
            "default" if spec.quantization is None else ("applied" if f.quantization else "ignored"),
            f"model.config.quantization_config; weights {f.weights_gib:.2f} GiB",
        ),
    ]
