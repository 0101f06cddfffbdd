"""vLLM offline `LLM.generate`: the engine this project exists for. This module holds the recipe side (the
spec, the recipe -> vLLM argument mapping); the engine object is in `vllm_engine.py`, the `vllm serve`
evidence in `vllm_serve.py`.

vllm is imported only inside VLLMEngine, in the recipe's child process."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from runner.config.common import MAX_SEED, MAX_TOKENS, ModelSpec, Sampling
from runner.engines.base import CrashEvidence, EngineSpecBase
from runner.engines.vllm_knobs import crash_evidence
from runner.errors import RunnerError

if TYPE_CHECKING:
    from runner.engines.vllm_engine import VLLMEngine


class VLLMSpec(EngineSpecBase):
    """vLLM offline inference (`vllm.LLM`)."""

    library: ClassVar[str | None] = "vllm"
    packages: ClassVar[tuple[str, ...]] = ("vllm", "torch", "transformers")
    prefix_cache_field: ClassVar[str | None] = "enable_prefix_caching"
    prefix_cache_default: ClassVar[bool] = True
    label: ClassVar[str] = "vLLM"
    serves: ClassVar[bool] = True

    kind: Literal["vllm"] = Field(description="Engine selector.")
    quantization: str | None = Field(
        None,
        description="vLLM quantization method (`awq`, `gptq`, `fp8`, "
        "`bitsandbytes`, ...); default: what the checkpoint's config says.",
    )
    enable_prefix_caching: bool | None = Field(None, description="Automatic prefix caching; default: vLLM's (on).")
    cpu_offload_gb: float = Field(
        0, ge=0, le=100_000, allow_inf_nan=False, description="GiB of weights to keep in CPU memory (UVA offload)."
    )
    swap_space: float | None = Field(
        None,
        ge=0,
        le=100_000,
        allow_inf_nan=False,
        description="CPU swap space per GPU in GiB (V0 engines only: reported as ignored "
        "where the installed vLLM has no such argument).",
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, allow_inf_nan=False, description="Share of GPU memory vLLM may use, in (0, 1]."
    )
    enforce_eager: bool = Field(False, description="Skip CUDA graphs and torch.compile (faster start, slower decode).")
    max_model_len: PositiveInt | None = Field(
        None, le=MAX_TOKENS, description="Context length limit; default: the model's."
    )
    tensor_parallel_size: PositiveInt = Field(1, le=1024, description="GPUs to shard the model over.")
    kv_cache_dtype: str = Field("auto", description="KV-cache dtype (`auto`, `fp8`, ...).")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Engine seed.")
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Any other `vllm.EngineArgs` field, "
        "passed through; checked against the installed vLLM before start, and each key (nested ones such as "
        "`compilation_config.cudagraph_capture_sizes` too) read back from the engine's config after it "
        "starts: the report's knob table says applied, ignored or unverified.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description='Environment variables for the engine process (e.g. `VLLM_USE_V2_MODEL_RUNNER: "0"`).',
    )
    warmup: bool = Field(
        False,
        description="At engine start, run one synthetic batch: as many prompts as the engine runs at once "
        "(`max_num_seqs`), together about as long as its largest step (`max_num_batched_tokens`; at most 2,048 "
        "tokens each), 2 output tokens each; the prefix cache is emptied after it. The first measured steps "
        "then find the GPU memory allocator's cache and kernel choices warm. Offline runs only (a serving "
        "run has `load.warmup_requests`).",
    )

    def build(self, model: ModelSpec, chat: bool | None) -> VLLMEngine:
        from runner.engines.vllm_engine import VLLMEngine

        return VLLMEngine(self, model, chat)

    @classmethod
    def crash_evidence(cls, log_text: str) -> CrashEvidence:
        return crash_evidence(log_text)

    def context_limit(self) -> int | None:
        return self.max_model_len

    def gpus_needed(self) -> int:
        return self.tensor_parallel_size

    def plan_settings(self, model: ModelSpec) -> dict[str, Any]:
        args = self.engine_args
        return {
            "dtype": model.dtype,
            "quantization": self.quantization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "block_size": int(args.get("block_size") or 16),
            "cpu_offload_gb": self.cpu_offload_gb,
            "enable_prefix_caching": self.prefix_caching_requested(),
            "enforce_eager": self.enforce_eager,
            "max_num_batched_tokens": args.get("max_num_batched_tokens"),
            "max_num_seqs": args.get("max_num_seqs"),
        }

    def serve_command(self, model: ModelSpec, host: str, port: int) -> list[str] | None:
        from runner.serving.server import serve_command

        kwargs = self.llm_kwargs(model)
        kwargs.pop("swap_space", None)  # vLLM 0.26's server has no such flag (reported as ignored)
        return serve_command(kwargs, port, host)

    def serve_env(self) -> dict[str, str]:
        from runner.serving.server import DEV_MODE_ENV

        return {**self.engine_env(), **DEV_MODE_ENV}  # dev mode: POST /reset_prefix_cache between rates

    def serve_evidence(self, model: ModelSpec, log_text: str, counters: dict[str, float]) -> Any:
        """Knob verdicts and prefix-cache hits from a `vllm serve` log and counters (`vllm_serve.py`)."""
        from runner.engines.vllm_serve import serve_evidence

        return serve_evidence(self, model, log_text, counters)

    def llm_kwargs(self, model: ModelSpec) -> dict[str, Any]:
        """The recipe mapped onto `vllm.LLM(**kwargs)` (pure: no vLLM needed)."""
        kw: dict[str, Any] = {
            "model": model.id,
            "tokenizer": model.tokenizer_id,
            "revision": model.revision,
            "dtype": model.dtype,
            "load_format": model.load_format,
            "trust_remote_code": model.trust_remote_code,
            "quantization": self.quantization,
            "cpu_offload_gb": self.cpu_offload_gb,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
            "max_model_len": self.max_model_len,
            "tensor_parallel_size": self.tensor_parallel_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "disable_log_stats": False,
        }
        if self.enable_prefix_caching is not None:
            kw["enable_prefix_caching"] = self.enable_prefix_caching
        if self.swap_space is not None:
            kw["swap_space"] = self.swap_space
        if self.seed is not None:
            kw["seed"] = self.seed
        overlap = set(self.engine_args) & set(kw)
        if overlap:
            raise RunnerError(
                f"engine_args repeats {sorted(overlap)}; set them as engine fields instead", field="engine.engine_args"
            )
        kw.update(self.engine_args)
        return kw

    def engine_env(self) -> dict[str, str]:
        env = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
        if self.cpu_offload_gb > 0:
            # vLLM 0.26's default V2 model runner accepts cpu_offload_gb and ignores it; V1 offloads.
            env["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        env.update(self.env)
        return env


def warmup_prompts(
    max_num_seqs: int, max_num_batched_tokens: int, vocab_size: int, max_model_len: int
) -> list[list[int]]:
    """The warm-up batch: as many prompts as the engine runs at once, together as long as its largest
    step (at least one token each; at most 2,048, and room for 2 output tokens within `max_model_len`),
    of token ids below `vocab_size`, the first token different for each where the vocabulary allows."""
    n = max(1, max_num_seqs)
    length = max(1, min(max_num_batched_tokens // n, 2048, max_model_len - 2))
    top = max(2, min(vocab_size, 100_000))
    return [[(i * 7919 + j * 104_729 + 1) % top for j in range(length)] for i in range(n)]


def sampling_params_kwargs(s: Sampling) -> dict[str, Any]:
    """Engine-neutral Sampling -> vllm.SamplingParams kwargs."""
    return {
        "temperature": s.temperature,
        "top_p": s.top_p if s.temperature > 0 else 1.0,
        "top_k": s.top_k if s.temperature > 0 else 0,
        "max_tokens": s.max_tokens,
        "stop": list(s.stop) or None,
        "ignore_eos": s.ignore_eos,
        "seed": s.seed,
    }


def accepted_args() -> set[str]:
    from vllm.engine.arg_utils import EngineArgs

    return {f.name for f in dataclasses.fields(EngineArgs)}


def check_args(kwargs: dict[str, Any], accepted: set[str]) -> list[str]:
    """Names in kwargs the installed vLLM does not accept (swap_space handled by the caller)."""
    return sorted(k for k in kwargs if k not in accepted)


def unquantized_gib(model_source: str, trust_remote_code: bool) -> float | None:
    """bf16 size of the model's parameters, counted on the meta device (no weights read)."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.from_pretrained(model_source, trust_remote_code=trust_remote_code)
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        with torch.device("meta"):
            m = AutoModelForCausalLM.from_config(cfg, trust_remote_code=trust_remote_code)
        return sum(p.numel() for p in m.parameters()) * 2 / 2**30
    except Exception:  # an architecture transformers cannot build: size simply unknown
        return None
