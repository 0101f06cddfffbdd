"""vLLM offline inference, the engine this project exists for: `VLLMSpec` (the recipe's `engine` section and its
mapping onto `vllm.LLM`, pure) and `VLLMEngine` (`vllm.LLM` built from the spec, the facts read back from it, the
streaming generation loop; vllm is imported only there, in the recipe's own process). What vLLM shows took effect is
decided by pure functions of (spec, facts read from the engine, generations), so every "applied / ignored / default /
unverified" knob row is unit-tested on the CPU with facts given as plain data; `effective_engine_args` walks a
VllmConfig duck-typed, so tests pass plain objects."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, PositiveInt, field_validator

import runner.engines.gguf as gguf  # the module, not the package: tests patch its functions
from runner.base.dotted import flat_dotted
from runner.base.errors import RunnerError
from runner.base.nvml import device_facts
from runner.base.types import MAX_SEED, MAX_TOKENS, EngineInfo, EngineSpecBase, Generation, Knob
from runner.engines.hf import encode_prompts, load_tokenizer, uses_chat_template

if TYPE_CHECKING:
    from runner.base.types import Advance, Messages, ModelSpec, Request, Sampling, Sink

_LLM_FIELDS = {"quantization", "cpu_offload_gb", "gpu_memory_utilization", "enforce_eager", "max_model_len"}
_LLM_FIELDS |= {"tensor_parallel_size", "kv_cache_dtype"}  # passed as they are
_LLM_OPTIONAL = {"enable_prefix_caching", "swap_space", "seed"}  # passed only when set
_GIB = dict(ge=0, le=100_000, allow_inf_nan=False)  # an amount of memory in GiB


class VLLMSpec(EngineSpecBase):
    """vLLM offline inference (`vllm.LLM`)."""

    library: ClassVar[str | None] = "vllm"
    packages: ClassVar[tuple[str, ...]] = ("vllm", "torch", "transformers")
    prefix_cache_field: ClassVar[str | None] = "enable_prefix_caching"
    kv_pool: ClassVar[bool] = True
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
    cpu_offload_gb: float = Field(0, **_GIB, description="GiB of weights to keep in CPU memory (UVA offload).")
    swap_space: float | None = Field(
        None,
        **_GIB,
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
        description="Any other `vllm.EngineArgs` field, passed through; checked against the installed vLLM before "
        "start, and each key (nested ones such as `compilation_config.cudagraph_capture_sizes` too) read back from "
        "the engine's config after it starts: the report's knob table says applied, ignored or unverified.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description='Environment variables for the engine process (e.g. `VLLM_USE_V2_MODEL_RUNNER: "0"`).',
    )
    compile_cache: str | None = Field(
        None,
        description="A folder for vLLM's compile cache (VLLM_CACHE_ROOT, and TORCHINDUCTOR_CACHE_DIR below it; "
        "relative to the recipe file): a later start of the same configuration, in another call or on another host "
        "given the folder, loads the compiled graphs instead of compiling (a warm start; CUDA graphs are still "
        "captured). Default: vLLM's own (~/.cache/vllm).",
    )
    warmup: bool = Field(
        False,
        description="At engine start, run one synthetic batch: as many prompts as the engine runs at once "
        "(`max_num_seqs`), together about as long as its largest step (`max_num_batched_tokens`; at most 2,048 "
        "tokens each), 2 output tokens each; the prefix cache is emptied after it. The first measured steps "
        "then find the GPU memory allocator's cache and kernel choices warm. Offline runs only (a serving "
        "run has `load.warmup_requests`).",
    )

    @field_validator("engine_args")
    @classmethod
    def _step_holds_the_sequences(cls, v: dict[str, Any]) -> dict[str, Any]:
        """vLLM refuses to start when a step's tokens cannot hold one token of each sequence (its SchedulerConfig
        check); found here instead of after the engine process started."""
        seqs, tokens = v.get("max_num_seqs"), v.get("max_num_batched_tokens")
        if isinstance(seqs, int) and isinstance(tokens, int) and tokens < seqs:
            raise ValueError(
                f"max_num_batched_tokens ({tokens}) is below max_num_seqs ({seqs}); vLLM refuses to start: raise "
                "max_num_batched_tokens or lower max_num_seqs"
            )
        return v

    def build(self, model: ModelSpec, chat: bool | None) -> VLLMEngine:
        return VLLMEngine(self, model, chat)

    @classmethod
    def crash_evidence(cls, log_text: str) -> EngineInfo:
        return crash_evidence(log_text)

    def context_limit(self) -> int | None:
        return self.max_model_len

    def gpus_needed(self) -> int:
        return self.tensor_parallel_size

    def plan_settings(self, model: ModelSpec) -> dict[str, Any]:
        args = self.engine_args
        s = {"dtype": model.dtype, "quantization": self.quantization, "kv_cache_dtype": self.kv_cache_dtype}
        s |= {"gpu_memory_utilization": self.gpu_memory_utilization, "max_model_len": self.max_model_len}
        s |= {"block_size": int(args.get("block_size") or 16), "cpu_offload_gb": self.cpu_offload_gb}
        s |= {"enable_prefix_caching": self.prefix_caching_requested(), "enforce_eager": self.enforce_eager}
        s |= {"max_num_batched_tokens": args.get("max_num_batched_tokens"), "max_num_seqs": args.get("max_num_seqs")}
        return s | {"device": "gpu"}

    def llm_kwargs(self, model: ModelSpec) -> dict[str, Any]:
        """The recipe mapped onto `vllm.LLM(**kwargs)` (pure: no vLLM needed)."""
        kw: dict[str, Any] = {"model": model.id, "tokenizer": model.tokenizer_id, "disable_log_stats": False}
        kw |= model.model_dump(include={"revision", "dtype", "load_format", "trust_remote_code"})
        kw |= self.model_dump(include=_LLM_FIELDS)
        kw |= {k: v for k, v in self.model_dump(include=_LLM_OPTIONAL).items() if v is not None}
        if overlap := set(self.engine_args) & set(kw):
            why = f"engine_args repeats {sorted(overlap)}; set them as engine fields instead"
            raise RunnerError(why, field="engine.engine_args")
        return kw | self.engine_args

    def engine_env(self) -> dict[str, str]:
        env = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
        if self.cpu_offload_gb > 0:
            # vLLM 0.26's default V2 model runner accepts cpu_offload_gb and ignores it; V1 offloads.
            env["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        if self.compile_cache:
            env |= {"VLLM_CACHE_ROOT": self.compile_cache, "TORCHINDUCTOR_CACHE_DIR": f"{self.compile_cache}/inductor"}
        return env | self.env


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
    kw = {"temperature": s.temperature, "top_p": s.top_p if s.temperature > 0 else 1.0}
    kw |= {"top_k": s.top_k if s.temperature > 0 else 0, "max_tokens": s.max_tokens, "stop": list(s.stop) or None}
    return kw | {"ignore_eos": s.ignore_eos, "seed": s.seed}


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


_KEPT_METRICS = {f"vllm:{m}" for m in ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens")}
_KEPT_METRICS |= {"vllm:generation_tokens", "vllm:num_preemptions"}


class VLLMEngine:
    def __init__(self, spec: VLLMSpec, model: ModelSpec, chat: bool | None):
        for k, v in spec.engine_env().items():  # set before vllm is imported; the sampler switch only where unset
            os.environ.setdefault(k, v) if k == "VLLM_USE_FLASHINFER_SAMPLER" else os.environ.__setitem__(k, v)
        try:
            import vllm
        except ImportError as e:
            fix = "install vllm on a GPU host or use `engine: kind: transformers`"
            raise RunnerError(f"vLLM is not installed in this Python ({e}); {fix}", field="engine.kind") from None
        import torch

        self.spec, self.model_spec = spec, model
        self.loaded, converted = gguf.vllm_model(model)  # a GGUF file: its safetensors copy, made once
        self.kwargs, self.dropped = _accepted_kwargs(spec.llm_kwargs(self.loaded), vllm.__version__)
        self.tokenizer = load_tokenizer(model)
        self.chat = uses_chat_template(self.tokenizer, chat)
        log_path = os.environ.get("RUNNER_ENGINE_LOG")
        log_start = Path(log_path).stat().st_size if log_path and Path(log_path).exists() else 0
        t0 = time.perf_counter()
        self.llm = vllm.LLM(**self.kwargs)
        log = _log_since(log_path, log_start)
        self.facts, parsed = self._read_facts(vllm.__version__, log)
        t_warm = time.perf_counter()
        warm = warm_up(self.llm) if spec.warmup else None
        warm_s = time.perf_counter() - t_warm if warm else None
        f, load_s = self.facts, time.perf_counter() - t0
        gpu = device_facts().get("gpu", "")  # NVML: no CUDA context in this process
        self.info = EngineInfo("vllm", vllm.__version__, gpu, load_s, f.weights_gib, f.kv_cache_tokens, f.quantization)
        self.info.gpus = f.tensor_parallel_size or spec.tensor_parallel_size
        self.info.extra |= {"torch": torch.__version__, "kv_cache_gib": parsed.get("kv_cache_gib")}
        self.info.extra |= {"model_runner": f.model_runner, "env": spec.engine_env(), "block_size": self._block_size}
        self.info.extra["start"] = start_parts(parsed, f.compile_cache_dir, load_s, warm_s)
        if warm:
            self.info.extra["warmup"] = warm
        if converted:
            self.info.extra["gguf"] = converted
            self.info.notes.append(gguf.note(converted, "vllm"))

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
        shrinks = spec.quantization or mc.quantization or spec.cpu_offload_gb > 0
        full = unquantized_gib(self.loaded.id, model.trust_remote_code) if shrinks else None
        lf = getattr(vc.load_config, "load_format", "")
        env_runner = "V1" if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "0" else "unknown"  # unless the log says V2
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
            model_runner="V2" if parsed.get("v2_runner") else env_runner,
            kv_cache_tokens=int(kv_tokens) if kv_tokens else None,
            version=version,
            swap_space=getattr(cc, "swap_space", None),
            dropped=dict(self.dropped),
            engine_args=effective_engine_args(vc, spec.engine_args),
            compile_cache_dir=compile_cache_dir(log),
        )
        return facts, parsed

    def encode(self, messages: Sequence[Messages]) -> tuple[list[str], list[list[int]]]:
        return encode_prompts(self.tokenizer, list(messages), self.chat)

    def generate(
        self, requests: Sequence[Request], sampling: Sampling, progress: Advance | None = None, sink: Sink | None = None
    ) -> list[Generation]:
        """All requests go to the engine at once (as `LLM.generate` does); finished outputs are
        handed to `sink` step by step, so an interrupted run keeps every sample it finished."""
        from vllm import SamplingParams

        sp = SamplingParams(**sampling_params_kwargs(sampling))
        before = self._read_metrics()
        t0 = time.perf_counter()
        ids = self.llm.enqueue([{"prompt_token_ids": r.ids} for r in requests], sp, use_tqdm=False)
        self.info.extra["enqueue_s"] = round(time.perf_counter() - t0, 3)  # handing the requests over
        # enqueue() returns vLLM's internal ids ("<n>-<8 random chars>"); outputs carry the external "<n>"
        index = {key: i for i, rid in enumerate(ids) for key in (rid, rid.split("-", 1)[0])}
        gens: list[Generation | None] = [None] * len(requests)
        engine = self.llm.llm_engine
        while engine.has_unfinished_requests():  # each step's finished requests handed on
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
        if missing := [i for i, g in enumerate(gens) if g is None]:
            raise RuntimeError(f"vLLM finished without outputs for {len(missing)} requests (first: {missing[0]})")
        out: list[Generation] = gens  # type: ignore[assignment]
        # the counters' growth over this call, not the warm-up's nor an earlier cell's ({} where a reading failed)
        after = None if before is None else self._read_metrics()
        self.info.extra["metrics"] = {} if before is None or after is None else counters_since(before, after)
        cached, prompt = sum(g.cached_tokens or 0 for g in out), sum(g.prompt_tokens for g in out)
        self.info.knobs = vllm_knobs(self.spec, self.model_spec.load_format, self.facts, cached, prompt)
        return out

    def reset_prefix_cache(self) -> bool:
        return bool(self.llm.reset_prefix_cache())

    def _read_metrics(self) -> dict[str, float] | None:
        """vLLM's counters kept for the report, summed over their labels (None where unavailable)."""
        metrics: dict[str, float] = {}
        try:
            for mt in self.llm.get_metrics():
                if hasattr(mt, "value") and mt.name in _KEPT_METRICS:
                    metrics[mt.name] = metrics.get(mt.name, 0) + mt.value
        except Exception as e:  # metrics are evidence, not the result: record and go on
            note = f"vLLM metrics unavailable: {e}"
            if note not in self.info.notes:
                self.info.notes.append(note)
            return None
        return metrics

    def close(self) -> None:
        if getattr(self, "llm", None) is None:
            return
        with contextlib.suppress(Exception):  # best effort: the isolating parent kills the process group anyway
            core = self.llm.llm_engine.engine_core
            try:
                core.shutdown(timeout=10)
            except TypeError:
                core.shutdown()
        del self.llm
        gc.collect()


def _accepted_kwargs(kwargs: dict[str, Any], version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`vllm.LLM` kwargs the installed vLLM accepts, and those dropped (`swap_space` where it has no such
    argument: reported as ignored); any other argument it does not accept is an error."""
    from vllm.engine.arg_utils import EngineArgs

    accepted = {f.name for f in fields(EngineArgs)}
    dropped: dict[str, Any] = {}
    if "swap_space" in kwargs and "swap_space" not in accepted:
        dropped["swap_space"] = kwargs.pop("swap_space")
    if bad := check_args(kwargs, accepted):
        msg = f"vLLM {version} does not accept {', '.join(bad)}; it accepts: " + ", ".join(sorted(accepted))
        raise RunnerError(msg, field="engine.engine_args")
    return kwargs, dropped


def _generation(o: Any, prompt_tokens: int) -> Generation:
    c, m = o.outputs[0], o.metrics
    ttft = getattr(m, "first_token_latency", None) if m is not None else None
    e2e = None
    if m is not None and ttft is not None and getattr(m, "last_token_ts", None) and m.first_token_ts:
        e2e = ttft + (m.last_token_ts - m.first_token_ts)
    return Generation(c.text, prompt_tokens, len(c.token_ids), o.num_cached_tokens, ttft, e2e)


def _log_since(log_path: str | None, start: int) -> str:
    if not log_path or not Path(log_path).exists():
        return ""
    with open(log_path, "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", "replace")


def warm_up(llm: Any) -> str:
    """`engine.warmup`: one synthetic batch at a `vllm.LLM`'s limits (`warmup_prompts`), 2 output tokens each,
    then its prefix cache emptied (part of the engine start); what ran, for the report."""
    from vllm import SamplingParams

    sc, mc = llm.llm_engine.vllm_config.scheduler_config, llm.llm_engine.vllm_config.model_config
    prompts = warmup_prompts(sc.max_num_seqs, sc.max_num_batched_tokens, mc.get_vocab_size(), mc.max_model_len)
    t0 = time.perf_counter()
    sp = SamplingParams(max_tokens=2, ignore_eos=True, temperature=0.0)
    llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    emptied = llm.reset_prefix_cache()
    took_s = time.perf_counter() - t0
    ran = f"{len(prompts):,} prompts of {len(prompts[0]):,} tokens, 2 output tokens each, {took_s:.1f} s"
    return ran + " (part of the engine start)" + ("" if emptied else "; vLLM did not empty the prefix cache after it")


def counters_since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each counter's growth (a counter absent before counts from 0)."""
    return {k: v - before.get(k, 0) for k, v in after.items()}


# vLLM renames AWQ/GPTQ requests to the kernel it picks (config/model.py _verify_quantization)
QUANT_ALIASES = {"awq": "auto_awq", "awq_marlin": "auto_awq", "gptq": "auto_gptq", "gptq_marlin": "auto_gptq"}

_LOAD_RE = re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds")
_KV_RE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_OFFLOAD_RE = re.compile(r"Total CPU offloaded parameters: ([\d.]+)")
_KV_GIB_RE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_COMPILE_RE = re.compile(r"torch\.compile (?:and initial profiling/warmup run together )?took ([\d.]+) s in total")
_CAPTURE_RE = re.compile(r"Graph capturing finished in ([\d.]+) secs")
_CACHE_DIR_RE = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
_CACHE_HIT = ("Directly load the compiled graph", "Directly load AOT compilation")


@dataclass(frozen=True)
class VLLMFacts:
    """The engine's effective settings, as read from vLLM's configs and log after start."""

    quantization: str | None = None
    prefix_caching: bool = False
    gpu_memory_utilization: float | None = 0.9  # None: not known (a server log without the worker's line)
    enforce_eager: bool = False
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    cache_dtype: str = "auto"
    load_format: str = ""
    weights_gib: float | None = None
    unquantized_gib: float | None = None  # bf16 size of the same parameters, for quantization/offload
    model_runner: str = "unknown"
    kv_cache_tokens: int | None = None
    version: str = ""
    swap_space: float | None = None  # as the engine's cache config holds it, when it has one
    dropped: dict[str, Any] = field(default_factory=dict)  # recipe arguments this vLLM has no field for
    # engine_args as held: dotted key -> (the config it was found in, its value); None: not read back (served engine)
    engine_args: dict[str, tuple[str, Any]] | None = None
    compile_cache_dir: str | None = None  # where vLLM's log says torch.compile's cache is (None: nothing compiled)


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
    if "V2 Model Runner" in text:
        out["v2_runner"] = 1.0
    if m := _COMPILE_RE.search(text):
        out["compile_s"] = float(m.group(1))
    if m := _CAPTURE_RE.search(text):
        out["capture_s"] = float(m.group(1))
    if any(s in text for s in _CACHE_HIT):
        out["compile_cache_hit"] = 1.0
    return out


def compile_cache_dir(text: str) -> str | None:
    """The compile cache folder vLLM's log names (None: nothing compiled, or the cache is off)."""
    m = _CACHE_DIR_RE.search(text)
    return m.group(1) if m else None


def start_parts(parsed: dict[str, float], cache_dir: str | None, total_s: float, warmup_s: float | None) -> dict:
    """The engine start split as vLLM's log accounts for it (StartParts' fields): weights, compile (or loading it
    from the cache), CUDA graph capture, the recipe's warm-up, and the rest of `total_s`; `cold` from whether the
    compiled graphs came from the cache."""
    parts = {"load_s": parsed.get("weights_load_s"), "compile_s": parsed.get("compile_s")}
    parts |= {"capture_s": parsed.get("capture_s"), "warmup_s": warmup_s}
    known = sum(v for v in parts.values() if v is not None)
    cold = None if parts["compile_s"] is None and cache_dir is None else not parsed.get("compile_cache_hit")
    # the cache folder as the recipe names it: vLLM's log gives <root>/torch_compile_cache/<hash>/rank_0_0/...
    root = cache_dir.split("/torch_compile_cache/")[0] if cache_dir else None
    return parts | {"other_s": max(total_s - known, 0.0), "cold": cold, "compile_cache": root}


def compile_cache_knob(spec: Any, cache_dir: str | None) -> Knob | None:
    """`compile_cache`: applied when vLLM's log names a cache folder inside it."""
    if not getattr(spec, "compile_cache", None):
        return None
    want = str(Path(spec.compile_cache).resolve())
    if cache_dir is None:
        why = "nothing compiled (enforce_eager) or vLLM's log names no cache folder"
        return _knob("compile_cache", spec.compile_cache, None, "unverified", why)
    took = str(Path(cache_dir).resolve()).startswith(want + "/")
    return _knob("compile_cache", spec.compile_cache, cache_dir, "applied" if took else "ignored", "vLLM's log")


def served_facts(spec: Any, model: Any, log: str, version: str) -> VLLMFacts | None:
    """VLLMFacts from a `vllm serve` log: its `Initializing a V1 LLM engine (vX) with config: k=v, ...` line
    (VllmConfig.__str__), the worker's `Desired GPU memory utilization is (u, ...)` and the weights and KV cache
    lines; None without the config line."""
    line, parsed = next((x for x in reversed(log.splitlines()) if "with config:" in x), None), parse_engine_log(log)
    if line is None:
        return None
    cfg = {k: v.strip("'") for k, v in re.findall(r"(\w+)=('[^']*'|[^,\s]+)", line.split("with config:", 1)[1])}
    desired = re.findall(r"Desired GPU memory utilization is \(([0-9.]+),", log)
    full = unquantized_gib(model.id, model.trust_remote_code) if spec.quantization or spec.cpu_offload_gb > 0 else None
    kv = int(parsed["kv_cache_tokens"]) if parsed.get("kv_cache_tokens") else None
    return VLLMFacts(
        quantization=None if cfg.get("quantization", "None") == "None" else cfg["quantization"],
        prefix_caching=cfg.get("enable_prefix_caching") == "True",
        gpu_memory_utilization=float(desired[-1]) if desired else None,
        enforce_eager=cfg.get("enforce_eager") == "True",
        max_model_len=int(cfg["max_seq_len"]) if cfg.get("max_seq_len", "").isdigit() else None,
        tensor_parallel_size=int(cfg.get("tensor_parallel_size", "1")),
        cache_dtype=cfg.get("kv_cache_dtype", "auto"),
        load_format=cfg.get("load_format", "").rsplit(".", 1)[-1].lower(),
        weights_gib=parsed.get("weights_gib"),
        unquantized_gib=full,
        model_runner="V2" if parsed.get("v2_runner") else "unknown",
        kv_cache_tokens=kv,
        version=version,
    )


def crash_evidence(log_text: str) -> EngineInfo:
    found = parse_engine_log(log_text)
    notes = []
    if "weights_gib" in found:
        notes.append(f"from engine.log before the run ended: weights on the GPU {found['weights_gib']} GiB")
    if "cpu_offloaded_gib" in found:
        off = f"{found['cpu_offloaded_gib']} GiB of parameters were offloaded to CPU memory"
        notes.append(f"from engine.log: {off} (cpu_offload_gb took effect)")
    kv = found.get("kv_cache_tokens")
    return EngineInfo(weights_gib=found.get("weights_gib"), kv_cache_tokens=int(kv) if kv else None, notes=notes)


def _knob(name: str, requested: Any, effective: Any, status: str, evidence: str) -> Knob:
    return Knob(name=name, requested=requested, effective=effective, status=status, evidence=evidence)


def _quantization(spec: Any, f: VLLMFacts) -> Knob:
    w = f.weights_gib
    if spec.quantization is None:
        ev = "from the checkpoint config" + (f"; weights {w} GiB" if w else "")
        return _knob("quantization", None, f.quantization, "default", ev)
    want = QUANT_ALIASES.get(spec.quantization, spec.quantization)
    ok = f.quantization is not None and f.quantization in (want, spec.quantization)
    full = f" vs {f.unquantized_gib:.1f} GiB unquantized bf16" if f.unquantized_gib else ""
    ev = f"engine loaded {f.quantization}; weights {w} GiB" + full
    return _knob("quantization", spec.quantization, f.quantization, "applied" if ok else "ignored", ev)


def _prefix_caching(spec: Any, f: VLLMFacts, cached: int, prompt: int) -> Knob:
    ev = f"{cached:,} of {prompt:,} prompt tokens served from cache ({cached / max(prompt, 1):.1%})"
    want = spec.enable_prefix_caching
    if want is None:
        status = "default"
    elif want:
        status = "applied" if f.prefix_caching and cached > 0 else ("unverified" if f.prefix_caching else "ignored")
    else:
        status = "applied" if not f.prefix_caching and cached == 0 else "ignored"
    return _knob("enable_prefix_caching", want, f.prefix_caching, status, ev)


def _offload(spec: Any, f: VLLMFacts) -> Knob:
    w, full, asked = f.weights_gib, f.unquantized_gib, spec.cpu_offload_gb
    if w is None or full is None:
        return _knob("cpu_offload_gb", asked, None, "unverified", "weight memory not reported by the engine")
    expected = max(full - asked, 0)
    took = w <= full - 0.5 * asked  # at least half the asked amount left the GPU
    ev = f"weights on GPU {w} GiB (full model {full:.1f} GiB, expected ~{expected:.1f}); model runner {f.model_runner}"
    return _knob("cpu_offload_gb", asked, round(max(full - w, 0), 2), "applied" if took else "ignored", ev)


def _swap_space(spec: Any, f: VLLMFacts) -> Knob | None:
    if "swap_space" in f.dropped:
        ev = f"vLLM {f.version} has no swap_space argument (V1 engine: no CPU swap); not passed"
        return _knob("swap_space", f.dropped["swap_space"], None, "ignored", ev)
    if spec.swap_space is not None:
        ev = "accepted by this vLLM; the V1 engine preempts by recomputation"
        return _knob("swap_space", spec.swap_space, f.swap_space, "unverified", ev)
    return None


def _same(name: str, requested: Any, effective: Any, evidence: str) -> Knob:
    return _knob(name, requested, effective, "applied" if requested == effective else "ignored", evidence)


def vllm_knobs(spec: Any, load_format: str, f: VLLMFacts, cached: int, prompt: int) -> list[Knob]:
    """Every knob of a vLLM recipe with its verdict. `cached`/`prompt`: prompt tokens served from
    the prefix cache and in all, over the run's generations."""
    knobs = [_quantization(spec, f), _prefix_caching(spec, f, cached, prompt)]
    if spec.cpu_offload_gb > 0:
        knobs.append(_offload(spec, f))
    if (swap := _swap_space(spec, f)) is not None:
        knobs.append(swap)
    kv = f"KV cache {f.kv_cache_tokens:,} tokens" if f.kv_cache_tokens else ""
    if f.gpu_memory_utilization is None:
        gmu_status, kv = "unverified", "not in the server's log" + (f"; {kv}" if kv else "")
    else:
        gmu_ok = abs(f.gpu_memory_utilization - spec.gpu_memory_utilization) < 1e-9
        gmu_status = "applied" if gmu_ok else "ignored"
    knobs.append(_knob("gpu_memory_utilization", spec.gpu_memory_utilization, f.gpu_memory_utilization, gmu_status, kv))
    knobs.append(_same("enforce_eager", spec.enforce_eager, f.enforce_eager, "model_config.enforce_eager"))
    if spec.max_model_len is not None:
        knobs.append(_same("max_model_len", spec.max_model_len, f.max_model_len, "model_config"))
    knobs.append(_same("tensor_parallel_size", spec.tensor_parallel_size, f.tensor_parallel_size, "parallel_config"))
    kv_ok = str(f.cache_dtype).startswith(spec.kv_cache_dtype)
    kv_status = "default" if spec.kv_cache_dtype == "auto" else ("applied" if kv_ok else "ignored")
    knobs.append(_knob("kv_cache_dtype", spec.kv_cache_dtype, f.cache_dtype, kv_status, "cache_config"))
    knobs.append(_same("load_format", load_format, f.load_format, "load_config"))
    if (cache := compile_cache_knob(spec, f.compile_cache_dir)) is not None:
        knobs.append(cache)
    return knobs + engine_arg_knobs(spec.engine_args, f.engine_args)


def effective_engine_args(vllm_config: Any, args: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Where each engine_args key lives in the engine's config and its value there: a top-level key in
    whichever `*_config` (or VllmConfig itself) has a field of that name, a dotted one by walking from its
    head: a config (compilation_config.…) or a mapping field (hf_overrides.…).
    Keys found nowhere are left out (their knob reads "unverified")."""
    names = [n for n in dir(vllm_config) if n.endswith("_config")]
    configs = {n: c for n in names if (c := _attr(vllm_config, n)) is not None and not callable(c)}
    order = sorted(configs, key=lambda n: (_FIRST.index(n) if n in _FIRST else len(_FIRST), n))
    found: dict[str, tuple[str, Any]] = {}
    for key in flat_dotted(args):
        head, *path = key.split(".")
        if head in configs:  # compilation_config.cudagraph_capture_sizes
            where, value = head, configs[head]
        else:  # the first config with a field of that name; VllmConfig's own fields last (optimization_level)
            held = ((n, _attr(configs[n], head)) for n in order)
            own = ("vllm_config", _attr(vllm_config, head))
            where, value = next(((n, v) for n, v in held if v is not _MISSING), own)
        for part in path:  # a mapping field walked key by key (hf_overrides.rope_theta)
            value = _attr(value, part)
        if value is not _MISSING and not callable(value):
            found[key] = (where, value)
    return found


_MISSING = object()
# where an engine argument's name is looked for first: a few names recur in sub-configs (max_model_len in
# the scheduler's, model's and speculative config; quantization, enforce_eager in the speculative one)
_FIRST = ("scheduler_config", "cache_config", "model_config", "parallel_config", "load_config")


def _attr(obj: Any, name: str) -> Any:
    """obj.name, or obj[name] in a mapping field (hf_overrides, inductor_compile_config); _MISSING if neither."""
    if obj is _MISSING or obj is None:
        return _MISSING
    if isinstance(obj, dict):
        return obj.get(name, _MISSING)
    try:
        return getattr(obj, name, _MISSING)
    except Exception:  # a property that cannot be read on this config
        return _MISSING


def _verdict(requested: Any, effective: Any) -> tuple[str, str]:
    """(status, a note on how they matched) for one engine argument and the value the engine holds."""
    if requested is None:
        return "default", "left to vLLM"
    if isinstance(effective, Enum) and isinstance(requested, str):
        same = requested.lower() in (effective.name.lower(), str(effective.value).lower())
        return ("applied" if same else "ignored"), ""
    req, eff = _plain(requested), _plain(effective)
    if req == eff:
        return "applied", ""
    if isinstance(req, list) and isinstance(eff, list) and all(isinstance(x, (int, float, str)) for x in req + eff):
        if set(req) == set(eff):
            return "applied", "the same values, in vLLM's order"
        if set(req) < set(eff):
            return "applied", f"vLLM added {sorted(set(eff) - set(req), key=str)}"
    return "ignored", ""


def _plain(v: Any) -> Any:
    """A config value as results.json can hold it (paths as text, enums by name, tuples as lists)."""
    if isinstance(v, Enum):
        return v.name
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


def engine_arg_knobs(engine_args: dict[str, Any], held: dict[str, tuple[str, Any]] | None) -> list[Knob]:
    """One knob per engine_args key (nested mappings by dotted key), checked against what the engine holds
    (`effective_engine_args`; None where it was not read back)."""
    knobs = []
    for key, requested in flat_dotted(engine_args).items():
        name = f"engine_args.{key}"
        if held is None or key not in held:
            why = "not read back (a served engine)" if held is None else "not found in the engine's config"
            knobs.append(_knob(name, requested, None, "unverified", why))
            continue
        where, effective = held[key]
        try:
            status, note = _verdict(requested, effective)
        except Exception as e:  # evidence, not the result: a value that does not compare is unverified
            status, note = "unverified", f"could not compare ({type(e).__name__})"
        if where == "compilation_config":  # the engine core may still adjust CUDA-graph settings on its side
            where = "compilation_config, as the front end holds it"
        evidence = f"{where}; {note}" if note else where
        knobs.append(_knob(name, requested, _plain(effective), status, evidence))
    return knobs
