"""vLLM offline `LLM.generate`: the engine this project exists for.

vllm is imported only inside VLLMEngine, in the recipe's child process."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from runner.config.common import MAX_SEED, MAX_TOKENS, ModelSpec, Sampling
from runner.engines.base import (
    CrashEvidence,
    EngineInfo,
    EngineSpecBase,
    Generation,
    Messages,
    ProgressFn,
    Request,
    SinkFn,
)
from runner.engines.vllm_knobs import VLLMFacts, crash_evidence, parse_engine_log, vllm_knobs
from runner.errors import RunnerError


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
        "passed through; checked against the installed vLLM before start.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description='Environment variables for the engine process (e.g. `VLLM_USE_V2_MODEL_RUNNER: "0"`).',
    )

    def build(self, model: ModelSpec, chat: bool | None) -> VLLMEngine:
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
        """Knob verdicts as offline (vllm_knobs), from the server log's engine config line instead of the
        engine's objects; prefix-cache hits from the `vllm:prefix_cache_hits`/`queries` counters (tokens)."""
        from runner.engines.base import Knob, ServeEvidence
        from runner.serving.server import counter

        hits, queries = counter(counters, "vllm:prefix_cache_hits"), counter(counters, "vllm:prefix_cache_queries")
        cached = None if hits is None else int(hits)
        facts, parsed = _served_facts(self, model, log_text)
        kv = parsed.get("kv_cache_tokens")
        if facts is None:
            return ServeEvidence(
                cached_tokens=cached,
                weights_gib=parsed.get("weights_gib"),
                kv_cache_tokens=int(kv) if kv else None,
                notes=("the server's log has no engine config line: knobs not verified",),
            )
        knobs = vllm_knobs(self, model.load_format, facts, cached=cached or 0, prompt=int(queries or 0))
        unknown = Knob(
            name="gpu_memory_utilization",
            requested=self.gpu_memory_utilization,
            status="unverified",
            evidence="not in the server's config line" + (f"; KV cache {int(kv):,} tokens" if kv else ""),
        )
        knobs = [unknown if k.name == "gpu_memory_utilization" else k for k in knobs]
        return ServeEvidence(
            knobs=tuple(knobs),
            cached_tokens=cached,
            weights_gib=facts.weights_gib,
            kv_cache_tokens=facts.kv_cache_tokens,
        )

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


class VLLMEngine:
    def __init__(self, spec: VLLMSpec, model: ModelSpec, chat: bool | None):
        for k, v in spec.engine_env().items():
            os.environ.setdefault(k, v) if k == "VLLM_USE_FLASHINFER_SAMPLER" else os.environ.__setitem__(k, v)
        try:
            import vllm
        except ImportError as e:
            raise RunnerError(
                f"vLLM is not installed in this Python ({e}); install vllm on a GPU host "
                "or use `engine: kind: transformers`",
                field="engine.kind",
            ) from None
        from vllm import LLM

        from runner.engines.tokenizing import load_tokenizer, uses_chat_template

        self.spec, self.model_spec = spec, model
        kwargs = spec.llm_kwargs(model)
        accepted = accepted_args()
        self.dropped: dict[str, Any] = {}
        if "swap_space" in kwargs and "swap_space" not in accepted:
            self.dropped["swap_space"] = kwargs.pop("swap_space")
        bad = check_args(kwargs, accepted)
        if bad:
            raise RunnerError(
                f"vLLM {vllm.__version__} does not accept {', '.join(bad)}; it accepts: " + ", ".join(sorted(accepted)),
                field="engine.engine_args",
            )
        self.kwargs = kwargs
        self.tokenizer = load_tokenizer(model)
        self.chat = uses_chat_template(self.tokenizer, chat)
        log_path = os.environ.get("RUNNER_ENGINE_LOG")
        log_start = Path(log_path).stat().st_size if log_path and Path(log_path).exists() else 0
        t0 = time.perf_counter()
        self.llm = LLM(**kwargs)
        load_s = time.perf_counter() - t0
        self.facts, parsed = self._read_facts(vllm.__version__, _log_since(log_path, log_start))
        import torch

        from runner.execution.gpumem import device_facts

        self.info = EngineInfo(
            name="vllm",
            version=vllm.__version__,
            device=device_facts().get("gpu", ""),  # NVML: no CUDA context in this process
            load_s=load_s,
            weights_gib=self.facts.weights_gib,
            kv_cache_tokens=self.facts.kv_cache_tokens,
            quantization=self.facts.quantization,
        )
        self.info.extra.update(
            {
                "torch": torch.__version__,
                "kv_cache_gib": parsed.get("kv_cache_gib"),
                "model_runner": self.facts.model_runner,
                "env": spec.engine_env(),
                "block_size": self._block_size,
            }
        )

    def _read_facts(self, version: str, log: str) -> tuple[VLLMFacts, dict[str, float]]:
        parsed = parse_engine_log(log)
        vc = self.llm.llm_engine.vllm_config
        cc, mc = vc.cache_config, vc.model_config
        self._block_size = getattr(cc, "block_size", None)
        kv_tokens = (
            getattr(cc, "kv_cache_size_tokens", None)
            or (cc.num_gpu_blocks * cc.block_size if cc.num_gpu_blocks else None)
            or parsed.get("kv_cache_tokens")
        )
        spec, model = self.spec, self.model_spec
        # the full-size reference only matters for knobs that shrink the weights on the GPU
        full = (
            unquantized_gib(model.id, model.trust_remote_code)
            if spec.quantization or mc.quantization or spec.cpu_offload_gb > 0
            else None
        )
        runner = (
            "V2"
            if parsed.get("v2_runner")
            else ("V1" if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "0" else "unknown")
        )
        lf = getattr(vc.load_config, "load_format", "")
        facts = VLLMFacts(
            quantization=mc.quantization,
            prefix_caching=bool(cc.enable_prefix_caching),
            gpu_memory_utilization=cc.gpu_memory_utilization,
            enforce_eager=bool(mc.enforce_eager),
            max_model_len=mc.max_model_len,
            tensor_parallel_size=vc.parallel_config.tensor_parallel_size,
            cache_dtype=str(cc.cache_dtype),
            load_format=str(getattr(lf, "value", lf)).lower(),
            weights_gib=parsed.get("weights_gib"),
            unquantized_gib=full,
            model_runner=runner,
            kv_cache_tokens=int(kv_tokens) if kv_tokens else None,
            version=version,
            swap_space=getattr(cc, "swap_space", None),
            dropped=dict(self.dropped),
        )
        return facts, parsed

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        from runner.engines.tokenizing import encode_prompts

        return encode_prompts(self.tokenizer, list(messages), self.chat)

    def generate(
        self,
        requests: Sequence[Request],
        sampling: Sampling,
        progress: ProgressFn | None = None,
        sink: SinkFn | None = None,
    ) -> list[Generation]:
        """All requests go to the engine at once (as `LLM.generate` does); finished outputs are
        handed to `sink` step by step, so an interrupted run keeps every sample it finished."""
        from vllm import SamplingParams

        sp = SamplingParams(**sampling_params_kwargs(sampling))
        ids = self.llm.enqueue([{"prompt_token_ids": r.ids} for r in requests], sp, use_tqdm=False)
        # enqueue() returns vLLM's internal ids ("<n>-<8 random chars>"); outputs carry the external "<n>"
        index = {key: i for i, rid in enumerate(ids) for key in (rid, rid.split("-", 1)[0])}
        gens: list[Generation | None] = [None] * len(requests)
        engine = self.llm.llm_engine
        while engine.has_unfinished_requests():
            done = [(index[o.request_id], o) for o in engine.step() if o.finished]
            done = [(i, _generation(o, len(requests[i].ids))) for i, o in done]
            if not done:
                continue
            for i, g in done:
                gens[i] = g
            if sink:
                sink(done)
            if progress:
                progress(len(done))
        missing = [i for i, g in enumerate(gens) if g is None]
        if missing:
            raise RuntimeError(f"vLLM finished without outputs for {len(missing)} requests (first: {missing[0]})")
        out: list[Generation] = gens  # type: ignore[assignment]
        self._collect_metrics()
        self.info.knobs = vllm_knobs(
            self.spec,
            self.model_spec.load_format,
            self.facts,
            cached=sum(g.cached_tokens or 0 for g in out),
            prompt=sum(g.prompt_tokens for g in out),
        )
        return out

    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache (between cells that share this engine)."""
        return bool(self.llm.reset_prefix_cache())

    def _collect_metrics(self) -> None:
        metrics: dict[str, float] = {}
        try:
            for mt in self.llm.get_metrics():
                if hasattr(mt, "value"):
                    metrics[mt.name] = metrics.get(mt.name, 0) + mt.value
        except Exception as e:  # metrics are evidence, not the result: record and go on
            self.info.notes.append(f"vLLM metrics unavailable: {e}")
        self.info.extra["metrics"] = {
            k: v
            for k, v in metrics.items()
            if k
            in (
                "vllm:prefix_cache_queries",
                "vllm:prefix_cache_hits",
                "vllm:prompt_tokens",
                "vllm:generation_tokens",
                "vllm:num_preemptions",
            )
        }

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown(timeout=10)
        except TypeError:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # best effort: the isolating parent kills the process group anyway
            pass
        del self.llm
        import gc

        gc.collect()


def _generation(o: Any, prompt_tokens: int) -> Generation:
    c, m = o.outputs[0], o.metrics
    ttft = getattr(m, "first_token_latency", None) if m is not None else None
    e2e = None
    if m is not None and ttft is not None and getattr(m, "last_token_ts", None) and m.first_token_ts:
        e2e = ttft + (m.last_token_ts - m.first_token_ts)
    return Generation(
        text=c.text,
        prompt_tokens=prompt_tokens,
        output_tokens=len(c.token_ids),
        cached_tokens=o.num_cached_tokens,
        ttft_s=ttft,
        latency_s=e2e,
    )


def _log_since(log_path: str | None, start: int) -> str:
    if not log_path or not Path(log_path).exists():
        return ""
    with open(log_path, "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", "replace")


def _served_facts(spec: VLLMSpec, model: ModelSpec, log: str) -> tuple[VLLMFacts | None, dict[str, float]]:
    """VLLMFacts from a server's log: its `Initializing a V1 LLM engine (vX) with config: k=v, ...` line
    (VllmConfig.__str__), weights and KV cache lines; None when the config line is missing."""
    import re

    parsed = parse_engine_log(log)
    line = next((ln for ln in reversed(log.splitlines()) if "with config:" in ln), None)
    if line is None:
        return None, parsed
    cfg = {k: v.strip("'") for k, v in re.findall(r"(\w+)=('[^']*'|[^,\s]+)", line.split("with config:", 1)[1])}
    version = re.search(r"engine \(v([^)]+)\)", line)
    full = unquantized_gib(model.id, model.trust_remote_code) if spec.quantization or spec.cpu_offload_gb > 0 else None
    kv = parsed.get("kv_cache_tokens")
    return VLLMFacts(
        quantization=None if cfg.get("quantization", "None") == "None" else cfg["quantization"],
        prefix_caching=cfg.get("enable_prefix_caching") == "True",
        gpu_memory_utilization=spec.gpu_memory_utilization,
        enforce_eager=cfg.get("enforce_eager") == "True",
        max_model_len=int(cfg["max_seq_len"]) if cfg.get("max_seq_len", "").isdigit() else None,
        tensor_parallel_size=int(cfg.get("tensor_parallel_size", "1")),
        cache_dtype=cfg.get("kv_cache_dtype", "auto"),
        load_format=cfg.get("load_format", "").rsplit(".", 1)[-1].lower(),
        weights_gib=parsed.get("weights_gib"),
        unquantized_gib=full,
        model_runner="V2" if parsed.get("v2_runner") else "unknown",
        kv_cache_tokens=int(kv) if kv else None,
        version=version.group(1) if version else "",
    ), parsed
