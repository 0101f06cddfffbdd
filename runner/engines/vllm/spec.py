"""The recipe's `engine: kind: vllm` section (`VLLMSpec`): its fields and checks, and its mappings,
all pure (no vLLM needed): onto `vllm.LLM(**kwargs)`, the engine process's environment, and the
`vllm serve` command line of a `load:` recipe. Facts from vLLM 0.26.0's source: `python -m
vllm.entrypoints.cli.main serve MODEL` takes the EngineArgs fields as `--kebab-case` flags (a bool
as `--x`/`--no-x`, except the plain `store_true` flags in `_BARE_FLAGS`; lists `nargs="+"`; mappings
as JSON); `POST /reset_prefix_cache` is mounted only with `VLLM_SERVER_DEV_MODE=1`."""

from __future__ import annotations

import json
import os
import sys
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PositiveInt, field_validator

import runner.engines.gguf as gguf  # the module, not the package: tests patch its functions
from runner.base.errors import RunnerError
from runner.base.types import MAX_SEED, MAX_TOKENS, EngineInfo, EngineSpecBase
from runner.engines.builtin import cache_root
from runner.engines.hf import load_tokenizer_ahead
from runner.engines.vllm.engine import (
    VLLMEngine,
    copy_tokenizer_ahead,
    load_front_modules_ahead,
    load_vllm_tokenizer_ahead,
)
from runner.engines.vllm.facts import crash_evidence, parse_engine_log, served_facts, vllm_knobs

if TYPE_CHECKING:
    from runner.base.types import ModelSpec

_DEFAULT_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}  # where the shell does not set it
_LLM_FIELDS = {  # passed as they are
    "quantization",
    "cpu_offload_gb",
    "gpu_memory_utilization",
    "enforce_eager",
    "max_model_len",
    "tensor_parallel_size",
    "kv_cache_dtype",
}
_LLM_OPTIONAL = {"enable_prefix_caching", "swap_space", "seed"}  # passed only when set
_GIB = dict(ge=0, le=100_000, allow_inf_nan=False)  # an amount of memory in GiB


class VLLMSpec(EngineSpecBase):
    """vLLM offline inference (`vllm.LLM`)."""

    library = "vllm"
    preloads = ("vllm.engine.arg_utils", "vllm.entrypoints.llm")  # `vllm.LLM` and its arguments
    packages = ("vllm", "torch", "transformers")
    prefix_cache_field = "enable_prefix_caching"
    kv_pool = True
    prefix_cache_default = True
    label = "vLLM"
    serves = True

    kind: Literal["vllm"] = Field(description="Engine selector.")
    quantization: str | None = Field(
        None,
        description="vLLM quantization method (`awq`, `gptq`, `fp8`, "
        "`bitsandbytes`, ...); default: what the checkpoint's config says.",
    )
    enable_prefix_caching: bool | None = Field(
        None, description="Automatic prefix caching; default: vLLM's (on)."
    )
    cpu_offload_gb: float = Field(
        0, **_GIB, description="GiB of weights to keep in CPU memory (UVA offload)."
    )
    swap_space: float | None = Field(
        None,
        **_GIB,
        description="CPU swap space per GPU in GiB (V0 engines only: reported as ignored "
        "where the installed vLLM has no such argument).",
    )
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Share of GPU memory vLLM may use, in (0, 1].",
    )
    enforce_eager: bool = Field(
        False, description="Skip CUDA graphs and torch.compile (faster start, slower decode)."
    )
    max_model_len: PositiveInt | None = Field(
        None, le=MAX_TOKENS, description="Context length limit; default: the model's."
    )
    tensor_parallel_size: PositiveInt = Field(
        1, le=1024, description="GPUs to shard the model over."
    )
    kv_cache_dtype: str = Field("auto", description="KV-cache dtype (`auto`, `fp8`, ...).")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Engine seed.")
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Any other `vllm.EngineArgs` field, passed through; checked against the "
        "installed vLLM before start, and each key (nested ones such as "
        "`compilation_config.cudagraph_capture_sizes` too) read back from the engine's config "
        "after it starts: the report's knob table says applied, ignored or unverified.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables for the engine process (e.g. `VLLM_USE_V2_MODEL_RUNNER: "
        '"0"`).',
    )
    compile_cache: str | None = Field(
        None,
        description="A folder for vLLM's compile cache (VLLM_CACHE_ROOT, and "
        "TORCHINDUCTOR_CACHE_DIR below it; relative to the recipe file): a later start of the same "
        "configuration, in another call or on another host given the folder, loads the compiled "
        "graphs instead of compiling (a warm start; CUDA graphs are still captured). Default: "
        "`$RUNNER_CACHE/vllm` (VLLM_CACHE_ROOT where it is set).",
    )
    warmup: bool = Field(
        False,
        description="At engine start, run one synthetic batch: as many prompts as the engine runs "
        "at once (`max_num_seqs`), together about as long as its largest step "
        "(`max_num_batched_tokens`; at most 2,048 tokens each), 2 output tokens each; the prefix "
        "cache is emptied after it. The first measured steps then find the GPU memory allocator's "
        "cache and kernel choices warm. Offline runs only (a serving run has "
        "`load.warmup_requests`).",
    )

    @field_validator("engine_args")
    @classmethod
    def _step_holds_the_sequences(cls, v: dict[str, Any]) -> dict[str, Any]:
        """vLLM refuses to start when a step's tokens cannot hold one token of each sequence (its
        SchedulerConfig check); found here instead of after the engine process started."""
        seqs, tokens = v.get("max_num_seqs"), v.get("max_num_batched_tokens")
        if isinstance(seqs, int) and isinstance(tokens, int) and tokens < seqs:
            raise ValueError(
                f"max_num_batched_tokens ({tokens}) is below max_num_seqs ({seqs}); vLLM refuses "
                "to start: raise "
                "max_num_batched_tokens or lower max_num_seqs"
            )
        return v

    def build(self, model: ModelSpec, chat: bool | None) -> VLLMEngine:
        return VLLMEngine(self, model, chat)

    crash_evidence = staticmethod(crash_evidence)

    def context_limit(self) -> int | None:
        return self.max_model_len

    def gpus_needed(self) -> int:
        return self.tensor_parallel_size

    def plan_settings(self, model: ModelSpec) -> dict[str, Any]:
        args = self.engine_args
        return self.model_dump(include=_LLM_FIELDS - {"tensor_parallel_size"}) | {
            "dtype": model.dtype,
            "block_size": int(args.get("block_size") or 16),
            "enable_prefix_caching": self.prefix_caching_requested(),
            "max_num_batched_tokens": args.get("max_num_batched_tokens"),
            "max_num_seqs": args.get("max_num_seqs"),
            "device": "gpu",
        }

    def llm_kwargs(self, model: ModelSpec) -> dict[str, Any]:
        """The recipe mapped onto `vllm.LLM(**kwargs)` (pure: no vLLM needed)."""
        kw: dict[str, Any] = {
            "model": model.id,
            "tokenizer": model.tokenizer_id,
            "disable_log_stats": False,
        }
        kw |= model.model_dump(include={"revision", "dtype", "load_format", "trust_remote_code"})
        kw |= self.model_dump(include=_LLM_FIELDS)
        kw |= self.model_dump(include=_LLM_OPTIONAL, exclude_none=True)
        if overlap := set(self.engine_args) & set(kw):
            why = f"engine_args repeats {sorted(overlap)}; set them as engine fields instead"
            raise RunnerError(why, field="engine.engine_args")
        return kw | self.engine_args

    def preload(self, model: ModelSpec | None = None) -> None:
        self.set_env()
        super().preload(model)
        # what the front end imports inside `LLM()` (kept from earlier starts), but not the engine
        # process's modules (flashinfer, ...): some initialize CUDA, and vLLM then starts that
        # process by spawn instead of fork (reports/h200-ahead, reports/h200-tokahead)
        with suppress(Exception):
            load_front_modules_ahead()
        if model is not None:
            with suppress(Exception):  # the engine's build loads it again and says why it fails
                load_tokenizer_ahead(model)
            if model.gguf_path is None:  # (a GGUF file's copy is made in the engine's build)
                with suppress(Exception):  # the same: vLLM's own, in `LLM()`, and its copies
                    kwargs = self.llm_kwargs(model)
                    copy_tokenizer_ahead(load_vllm_tokenizer_ahead(kwargs), kwargs)

    def set_env(self) -> None:
        """The engine's environment, set before vLLM is imported."""
        os.environ.update(self.engine_env())

    def engine_env(self) -> dict[str, str]:
        """What the engine's process runs with: the defaults where the shell has none, the compile
        cache, then the recipe's `env`."""
        root = self.compile_cache or os.environ.get("VLLM_CACHE_ROOT") or str(cache_root() / "vllm")
        inductor = None if self.compile_cache else os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        env = {k: os.environ.get(k, v) for k, v in _DEFAULT_ENV.items()} | {
            "VLLM_CACHE_ROOT": root,
            "TORCHINDUCTOR_CACHE_DIR": inductor or f"{root}/inductor",
        }
        if self.cpu_offload_gb > 0:
            # vLLM 0.26's default V2 model runner accepts cpu_offload_gb and ignores it; V1
            # offloads.
            env["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        return env | self.env

    def server_command(
        self, model: ModelSpec, host: str, port: int
    ) -> tuple[list[str], dict[str, str]]:
        # a GGUF file is served from its safetensors copy
        served, converted = gguf.vllm_model(model)
        # no such flag in 0.26
        kwargs = {k: v for k, v in self.llm_kwargs(served).items() if k != "swap_space"}
        if converted:
            kwargs["served_model_name"] = model.id  # the name the load generator asks for
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(kwargs["model"])]
        return [*cmd, "--host", host, "--port", str(port), *cli_args(kwargs)], self.engine_env() | {
            "VLLM_SERVER_DEV_MODE": "1"
        }

    def served_evidence(
        self, model: ModelSpec, log: str, grown: dict[str, float], version: str
    ) -> EngineInfo:
        parsed = parse_engine_log(log)
        info = EngineInfo(self.kind, version, weights_gib=parsed.get("weights_gib"))
        info.kv_cache_tokens = parsed.get("kv_cache_tokens") or None
        facts = served_facts(self, model, log, version)
        if facts is None:
            info.notes = ["the server's log has no engine config line: knobs not verified"]
            return info
        hits, queries = (
            int(grown.get(f"vllm:prefix_cache_{n}_total") or 0) for n in ("hits", "queries")
        )
        info.knobs = vllm_knobs(self, model.load_format, facts, hits, queries)
        return info


_BARE_FLAGS = {
    "disable_log_stats",
    "data_parallel_multi_port_external_lb",
    "aggregate_engine_logging",
    "headless",
    "grpc",
    "hf_token",
}


def cli_args(kwargs: dict[str, Any]) -> list[str]:
    """EngineArgs-style kwargs -> vLLM CLI flags (`model` is the positional argument; None values
    left out)."""
    out: list[str] = []
    for k, v in kwargs.items():
        flag = f"--{k.replace('_', '-')}"
        if k == "model" or v is None or (isinstance(v, (list, tuple)) and not v):
            continue
        if isinstance(v, bool):  # a bare flag is left out when off
            out += [flag] if v else [] if k in _BARE_FLAGS else [f"--no-{flag[2:]}"]
        elif isinstance(v, (list, tuple)):
            out += [flag, *(str(x) for x in v)]
        else:
            # `=`: a value may start with `-`
            out.append(f"{flag}={json.dumps(v) if isinstance(v, dict) else v}")
    return out
