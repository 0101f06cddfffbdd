"""vLLM offline `LLM.generate`: the engine this project exists for.

vllm is imported only inside VLLMEngine, in the recipe's child process."""
from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveInt

from runner.errors import RunnerError
from runner.strict import StrictModel
from runner.config.common import MAX_SEED, MAX_TOKENS
from runner.engines.base import EngineInfo, Generation, Knob


class VLLMSpec(StrictModel):
    """vLLM offline inference (`vllm.LLM`)."""

    kind: Literal["vllm"] = Field(description="Engine selector.")
    quantization: str | None = Field(None, description="vLLM quantization method (`awq`, `gptq`, `fp8`, "
                                     "`bitsandbytes`, ...); default: what the checkpoint's config says.")
    enable_prefix_caching: bool | None = Field(None, description="Automatic prefix caching; default: vLLM's (on).")
    cpu_offload_gb: float = Field(0, ge=0, le=100_000, allow_inf_nan=False, description="GiB of weights to keep in CPU memory (UVA offload).")
    swap_space: float | None = Field(None, ge=0, le=100_000, allow_inf_nan=False, description="CPU swap space per GPU in GiB (V0 engines only: "
                                     "reported as ignored where the installed vLLM has no such argument).")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, allow_inf_nan=False, description="Share of GPU memory vLLM may use, in (0, 1].")
    enforce_eager: bool = Field(False, description="Skip CUDA graphs and torch.compile (faster start, slower decode).")
    max_model_len: PositiveInt | None = Field(None, le=MAX_TOKENS, description="Context length limit; default: the model's.")
    tensor_parallel_size: PositiveInt = Field(1, le=1024, description="GPUs to shard the model over.")
    kv_cache_dtype: str = Field("auto", description="KV-cache dtype (`auto`, `fp8`, ...).")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Engine seed.")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="Any other `vllm.EngineArgs` field, "
                                        "passed through; checked against the installed vLLM before start.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for the engine process "
                                "(e.g. `VLLM_USE_V2_MODEL_RUNNER: \"0\"`).")

    def build(self, model: Any, chat: bool | None) -> "VLLMEngine":
        return VLLMEngine(self, model, chat)

    def llm_kwargs(self, model: Any) -> dict[str, Any]:
        """The recipe mapped onto `vllm.LLM(**kwargs)` (pure: no vLLM needed)."""
        kw: dict[str, Any] = {
            "model": model.id, "tokenizer": model.tokenizer_id, "revision": model.revision,
            "dtype": model.dtype, "load_format": model.load_format, "trust_remote_code": model.trust_remote_code,
            "quantization": self.quantization, "cpu_offload_gb": self.cpu_offload_gb,
            "gpu_memory_utilization": self.gpu_memory_utilization, "enforce_eager": self.enforce_eager,
            "max_model_len": self.max_model_len, "tensor_parallel_size": self.tensor_parallel_size,
            "kv_cache_dtype": self.kv_cache_dtype, "disable_log_stats": False,
        }
        if self.enable_prefix_caching is not None:
            kw["enable_prefix_caching"] = self.enable_prefix_caching
        if self.swap_space is not None:
            kw["swap_space"] = self.swap_space
        if self.seed is not None:
            kw["seed"] = self.seed
        overlap = set(self.engine_args) & set(kw)
        if overlap:
            raise RunnerError(f"engine_args repeats {sorted(overlap)}; set them as engine fields instead",
                              field="engine.engine_args")
        kw.update(self.engine_args)
        return kw

    def engine_env(self) -> dict[str, str]:
        env = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
        if self.cpu_offload_gb > 0:
            # vLLM 0.26's default V2 model runner accepts cpu_offload_gb and ignores it; V1 offloads.
            env["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        env.update(self.env)
        return env


def sampling_params_kwargs(s: Any) -> dict[str, Any]:
    """Engine-neutral Sampling -> vllm.SamplingParams kwargs."""
    return {"temperature": s.temperature, "top_p": s.top_p if s.temperature > 0 else 1.0,
            "top_k": s.top_k if s.temperature > 0 else 0, "max_tokens": s.max_tokens,
            "stop": list(s.stop) or None, "ignore_eos": s.ignore_eos, "seed": s.seed}


def accepted_args() -> set[str]:
    from vllm.engine.arg_utils import EngineArgs
    return {f.name for f in dataclasses.fields(EngineArgs)}


def check_args(kwargs: dict[str, Any], accepted: set[str]) -> list[str]:
    """Names in kwargs the installed vLLM does not accept (swap_space handled by the caller)."""
    return sorted(k for k in kwargs if k not in accepted)


# vLLM renames AWQ/GPTQ requests to the kernel it picks (config/model.py _verify_quantization)
_QUANT_ALIASES = {"awq": "auto_awq", "awq_marlin": "auto_awq", "gptq": "auto_gptq", "gptq_marlin": "auto_gptq"}

_LOAD_RE = re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds")
_KV_RE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_OFFLOAD_RE = re.compile(r"Total CPU offloaded parameters: ([\d.]+)")
_KV_GIB_RE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")


def parse_engine_log(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    if m := _LOAD_RE.search(text):
        out["weights_gib"], out["weights_load_s"] = float(m.group(1)), float(m.group(2))
    if m := _KV_RE.search(text):
        out["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
    if m := _KV_GIB_RE.search(text):
        out["kv_cache_gib"] = float(m.group(1))
    if m := _OFFLOAD_RE.search(text):
        out["cpu_offloaded_gib"] = float(m.group(1))
    if "Using V2 Model Runner" in text or "V2 Model Runner" in text:
        out["v2_runner"] = 1.0
    return out


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
    except Exception:   # an architecture transformers cannot build: size simply unknown
        return None


class VLLMEngine:
    def __init__(self, spec: VLLMSpec, model: Any, chat: bool | None):
        for k, v in spec.engine_env().items():
            os.environ.setdefault(k, v) if k == "VLLM_USE_FLASHINFER_SAMPLER" else os.environ.__setitem__(k, v)
        try:
            import vllm
        except ImportError as e:
            raise RunnerError(f"vLLM is not installed in this Python ({e}); install vllm on a GPU host "
                              "or use `engine: kind: transformers`", field="engine.kind")
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
            raise RunnerError(f"vLLM {vllm.__version__} does not accept {', '.join(bad)}; it accepts: "
                              + ", ".join(sorted(accepted)), field="engine.engine_args")
        self.kwargs = kwargs
        self.tokenizer = load_tokenizer(model)
        self.chat = uses_chat_template(self.tokenizer, chat)
        log_path = os.environ.get("RUNNER_ENGINE_LOG")
        log_start = Path(log_path).stat().st_size if log_path and Path(log_path).exists() else 0
        t0 = time.perf_counter()
        self.llm = LLM(**kwargs)
        load_s = time.perf_counter() - t0
        log = ""
        if log_path and Path(log_path).exists():
            with open(log_path, "rb") as f:
                f.seek(log_start)
                log = f.read().decode("utf-8", "replace")
        parsed = parse_engine_log(log)
        vc = self.llm.llm_engine.vllm_config
        cc, mc = vc.cache_config, vc.model_config
        kv_tokens = getattr(cc, "kv_cache_size_tokens", None) or (
            cc.num_gpu_blocks * cc.block_size if cc.num_gpu_blocks else None) or parsed.get("kv_cache_tokens")
        import torch

        from runner.execution.gpumem import device_facts
        self.info = EngineInfo(name="vllm", version=vllm.__version__,
                               device=device_facts().get("gpu", ""),   # NVML: no CUDA context in this process
                               load_s=load_s, weights_gib=parsed.get("weights_gib"),
                               kv_cache_tokens=int(kv_tokens) if kv_tokens else None,
                               quantization=mc.quantization)
        self.info.extra.update({"torch": torch.__version__, "kv_cache_gib": parsed.get("kv_cache_gib"),
                                "model_runner": "V2" if parsed.get("v2_runner") else
                                ("V1" if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "0" else "unknown"),
                                "env": spec.engine_env()})
        self._cc, self._mc, self._vc = cc, mc, vc
        # the full-size reference only matters for knobs that shrink the weights on the GPU
        self._bf16_gib = (unquantized_gib(model.id, model.trust_remote_code)
                          if spec.quantization or mc.quantization or spec.cpu_offload_gb > 0 else None)

    def encode(self, messages: list[list[dict]]) -> tuple[list[str], list[list[int]]]:
        from runner.engines.tokenizing import encode_prompts
        return encode_prompts(self.tokenizer, messages, self.chat)

    def generate(self, prompts: list[list[int]], sampling: Any, progress=None, sink=None) -> list[Generation]:
        from vllm import SamplingParams
        sp = SamplingParams(**sampling_params_kwargs(sampling))
        use_tqdm: Any = progress_tqdm(progress) if progress is not None else False
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=use_tqdm)
        gens = []
        for p, o in zip(prompts, outs):
            c = o.outputs[0]
            m = o.metrics
            ttft = getattr(m, "first_token_latency", None) if m is not None else None
            e2e = None
            if m is not None and ttft is not None and getattr(m, "last_token_ts", None) and m.first_token_ts:
                e2e = ttft + (m.last_token_ts - m.first_token_ts)
            gens.append(Generation(text=c.text, prompt_tokens=len(p), output_tokens=len(c.token_ids),
                                   cached_tokens=o.num_cached_tokens, ttft_s=ttft, latency_s=e2e))
        if sink:
            sink(list(enumerate(gens)))
        self._metrics = {}
        try:
            for mt in self.llm.get_metrics():
                if hasattr(mt, "value"):
                    self._metrics[mt.name] = self._metrics.get(mt.name, 0) + mt.value
        except Exception as e:   # metrics are evidence, not the result: record and go on
            self.info.notes.append(f"vLLM metrics unavailable: {e}")
        self.info.extra["metrics"] = {k: v for k, v in self._metrics.items()
                                      if k in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
                                               "vllm:prompt_tokens", "vllm:generation_tokens",
                                               "vllm:num_preemptions")}
        self.info.knobs = self._knobs(gens)
        return gens

    def _knobs(self, gens: list[Generation]) -> list[Knob]:
        s, cc, mc, vc = self.spec, self._cc, self._mc, self._vc
        K = []
        w = self.info.weights_gib
        bf16 = self._bf16_gib
        q_eff = mc.quantization
        if s.quantization is None:
            K.append(Knob("quantization", None, q_eff, "default",
                          f"from the checkpoint config; weights {w} GiB" if w else "from the checkpoint config"))
        else:
            want = _QUANT_ALIASES.get(s.quantization, s.quantization)
            ok = q_eff is not None and q_eff in (want, s.quantization)
            ev = f"engine loaded {q_eff}; weights {w} GiB" + (f" vs {bf16:.1f} GiB unquantized bf16" if bf16 else "")
            K.append(Knob("quantization", s.quantization, q_eff, "applied" if ok else "ignored", ev))
        cached = sum(g.cached_tokens or 0 for g in gens)
        prompt = sum(g.prompt_tokens for g in gens)
        eff_pc = bool(cc.enable_prefix_caching)
        ev = f"{cached:,} of {prompt:,} prompt tokens served from cache ({cached / max(prompt, 1):.1%})"
        if s.enable_prefix_caching is None:
            K.append(Knob("enable_prefix_caching", None, eff_pc, "default", ev))
        elif s.enable_prefix_caching:
            K.append(Knob("enable_prefix_caching", True, eff_pc,
                          "applied" if eff_pc and cached > 0 else ("unverified" if eff_pc else "ignored"), ev))
        else:
            K.append(Knob("enable_prefix_caching", False, eff_pc,
                          "applied" if not eff_pc and cached == 0 else "ignored", ev))
        if s.cpu_offload_gb > 0:
            runner = self.info.extra.get("model_runner")
            if w is not None and bf16 is not None:
                expected = max(bf16 - s.cpu_offload_gb, 0)
                took = w <= bf16 - 0.5 * s.cpu_offload_gb
                K.append(Knob("cpu_offload_gb", s.cpu_offload_gb, round(max(bf16 - w, 0), 2),
                              "applied" if took else "ignored",
                              f"weights on GPU {w} GiB (full model {bf16:.1f} GiB, expected ~{expected:.1f}); "
                              f"model runner {runner}"))
            else:
                K.append(Knob("cpu_offload_gb", s.cpu_offload_gb, None, "unverified",
                              "weight memory not reported by the engine"))
        if "swap_space" in self.dropped:
            K.append(Knob("swap_space", self.dropped["swap_space"], None, "ignored",
                          f"vLLM {self.info.version} has no swap_space argument (V1 engine: no CPU swap); "
                          "not passed"))
        elif s.swap_space is not None:
            K.append(Knob("swap_space", s.swap_space, getattr(cc, "swap_space", None), "unverified",
                          "accepted by this vLLM; the V1 engine preempts by recomputation"))
        K.append(Knob("gpu_memory_utilization", s.gpu_memory_utilization, cc.gpu_memory_utilization,
                      "applied" if abs(cc.gpu_memory_utilization - s.gpu_memory_utilization) < 1e-9 else "ignored",
                      f"KV cache {self.info.kv_cache_tokens:,} tokens" if self.info.kv_cache_tokens else ""))
        K.append(Knob("enforce_eager", s.enforce_eager, mc.enforce_eager,
                      "applied" if mc.enforce_eager == s.enforce_eager else "ignored", "model_config.enforce_eager"))
        if s.max_model_len is not None:
            K.append(Knob("max_model_len", s.max_model_len, mc.max_model_len,
                          "applied" if mc.max_model_len == s.max_model_len else "ignored", "model_config"))
        tp = vc.parallel_config.tensor_parallel_size
        K.append(Knob("tensor_parallel_size", s.tensor_parallel_size, tp,
                      "applied" if tp == s.tensor_parallel_size else "ignored", "parallel_config"))
        K.append(Knob("kv_cache_dtype", s.kv_cache_dtype, cc.cache_dtype,
                      "default" if s.kv_cache_dtype == "auto" else
                      ("applied" if str(cc.cache_dtype).startswith(s.kv_cache_dtype) else "ignored"), "cache_config"))
        K.append(Knob("load_format", self.model_spec.load_format, str(getattr(vc.load_config, "load_format", "")),
                      "applied", "load_config"))
        return K

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown(timeout=10)
        except TypeError:
            llm.llm_engine.engine_core.shutdown()
        except Exception:   # best effort: the isolating parent kills the process group anyway
            pass
        del self.llm
        import gc
        gc.collect()


def progress_tqdm(progress):
    """A tqdm class for vLLM's use_tqdm that forwards completed counts to `progress`."""
    from tqdm import tqdm

    import io

    class _Bar(tqdm):
        def __init__(self, *a, **kw):
            # vLLM also wraps prompt rendering in this class (an iterable bar): forward only the
            # bar over finished requests (no iterable), so prompts are not counted twice
            self._forward = not a and kw.get("iterable") is None
            kw["file"] = io.StringIO()          # the runner draws its own bar
            super().__init__(*a, **kw)

        def update(self, n=1):
            if n and self._forward:
                progress(int(n))
            return super().update(n)
    return _Bar
