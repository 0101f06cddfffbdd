"""What vLLM shows took effect: pure functions of (spec, facts read from the engine, generations).

The engine reads the facts (its configs, its log, the outputs); these functions decide each
knob's verdict, so every "applied / ignored / default / unverified" row is unit-tested on the
CPU with facts given as plain data."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from runner.engines.base import CrashEvidence, Knob
from runner.engines.vllm_args import engine_arg_knobs

# vLLM renames AWQ/GPTQ requests to the kernel it picks (config/model.py _verify_quantization)
QUANT_ALIASES = {"awq": "auto_awq", "awq_marlin": "auto_awq", "gptq": "auto_gptq", "gptq_marlin": "auto_gptq"}

_LOAD_RE = re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds")
_KV_RE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_OFFLOAD_RE = re.compile(r"Total CPU offloaded parameters: ([\d.]+)")
_KV_GIB_RE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")


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
    # engine_args as the engine holds them: dotted key -> (the config it was found in, its value);
    # None where they were not read back (a served engine: only its log is seen)
    engine_args: dict[str, tuple[str, Any]] | None = None


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
    return out


def crash_evidence(log_text: str) -> CrashEvidence:
    found = parse_engine_log(log_text)
    notes = []
    if "weights_gib" in found:
        notes.append(f"from engine.log before the run ended: weights on the GPU {found['weights_gib']} GiB")
    if "cpu_offloaded_gib" in found:
        notes.append(
            f"from engine.log: {found['cpu_offloaded_gib']} GiB of parameters were offloaded to CPU "
            "memory (cpu_offload_gb took effect)"
        )
    kv = found.get("kv_cache_tokens")
    return CrashEvidence(
        weights_gib=found.get("weights_gib"), kv_cache_tokens=int(kv) if kv else None, notes=tuple(notes)
    )


def _quantization(spec: Any, f: VLLMFacts) -> Knob:
    w = f.weights_gib
    if spec.quantization is None:
        return Knob(
            name="quantization",
            requested=None,
            effective=f.quantization,
            status="default",
            evidence="from the checkpoint config" + (f"; weights {w} GiB" if w else ""),
        )
    want = QUANT_ALIASES.get(spec.quantization, spec.quantization)
    ok = f.quantization is not None and f.quantization in (want, spec.quantization)
    ev = f"engine loaded {f.quantization}; weights {w} GiB" + (
        f" vs {f.unquantized_gib:.1f} GiB unquantized bf16" if f.unquantized_gib else ""
    )
    return Knob(
        name="quantization",
        requested=spec.quantization,
        effective=f.quantization,
        status="applied" if ok else "ignored",
        evidence=ev,
    )


def _prefix_caching(spec: Any, f: VLLMFacts, cached: int, prompt: int) -> Knob:
    ev = f"{cached:,} of {prompt:,} prompt tokens served from cache ({cached / max(prompt, 1):.1%})"
    want = spec.enable_prefix_caching
    if want is None:
        status = "default"
    elif want:
        status = "applied" if f.prefix_caching and cached > 0 else ("unverified" if f.prefix_caching else "ignored")
    else:
        status = "applied" if not f.prefix_caching and cached == 0 else "ignored"
    return Knob(name="enable_prefix_caching", requested=want, effective=f.prefix_caching, status=status, evidence=ev)


def _offload(spec: Any, f: VLLMFacts) -> Knob:
    w, full = f.weights_gib, f.unquantized_gib
    if w is None or full is None:
        return Knob(
            name="cpu_offload_gb",
            requested=spec.cpu_offload_gb,
            status="unverified",
            evidence="weight memory not reported by the engine",
        )
    expected = max(full - spec.cpu_offload_gb, 0)
    took = w <= full - 0.5 * spec.cpu_offload_gb  # at least half the asked amount left the GPU
    return Knob(
        name="cpu_offload_gb",
        requested=spec.cpu_offload_gb,
        effective=round(max(full - w, 0), 2),
        status="applied" if took else "ignored",
        evidence=f"weights on GPU {w} GiB (full model {full:.1f} GiB, expected ~{expected:.1f}); "
        f"model runner {f.model_runner}",
    )


def _swap_space(spec: Any, f: VLLMFacts) -> Knob | None:
    if "swap_space" in f.dropped:
        return Knob(
            name="swap_space",
            requested=f.dropped["swap_space"],
            status="ignored",
            evidence=f"vLLM {f.version} has no swap_space argument (V1 engine: no CPU swap); not passed",
        )
    if spec.swap_space is not None:
        return Knob(
            name="swap_space",
            requested=spec.swap_space,
            effective=f.swap_space,
            status="unverified",
            evidence="accepted by this vLLM; the V1 engine preempts by recomputation",
        )
    return None


def _same(name: str, requested: Any, effective: Any, evidence: str) -> Knob:
    return Knob(
        name=name,
        requested=requested,
        effective=effective,
        status="applied" if requested == effective else "ignored",
        evidence=evidence,
    )


def vllm_knobs(spec: Any, load_format: str, f: VLLMFacts, cached: int, prompt: int) -> list[Knob]:
    """Every knob of a vLLM recipe with its verdict. `cached`/`prompt`: prompt tokens served from
    the prefix cache and in all, over the run's generations."""
    knobs = [_quantization(spec, f), _prefix_caching(spec, f, cached, prompt)]
    if spec.cpu_offload_gb > 0:
        knobs.append(_offload(spec, f))
    swap = _swap_space(spec, f)
    if swap is not None:
        knobs.append(swap)
    kv = f"KV cache {f.kv_cache_tokens:,} tokens" if f.kv_cache_tokens else ""
    if f.gpu_memory_utilization is None:
        gmu_status, kv = "unverified", "not in the server's log" + (f"; {kv}" if kv else "")
    else:
        gmu_ok = abs(f.gpu_memory_utilization - spec.gpu_memory_utilization) < 1e-9
        gmu_status = "applied" if gmu_ok else "ignored"
    knobs.append(
        Knob(
            name="gpu_memory_utilization",
            requested=spec.gpu_memory_utilization,
            effective=f.gpu_memory_utilization,
            status=gmu_status,
            evidence=kv,
        )
    )
    knobs.append(_same("enforce_eager", spec.enforce_eager, f.enforce_eager, "model_config.enforce_eager"))
    if spec.max_model_len is not None:
        knobs.append(_same("max_model_len", spec.max_model_len, f.max_model_len, "model_config"))
    knobs.append(_same("tensor_parallel_size", spec.tensor_parallel_size, f.tensor_parallel_size, "parallel_config"))
    kv_status = (
        "default"
        if spec.kv_cache_dtype == "auto"
        else ("applied" if str(f.cache_dtype).startswith(spec.kv_cache_dtype) else "ignored")
    )
    knobs.append(
        Knob(
            name="kv_cache_dtype",
            requested=spec.kv_cache_dtype,
            effective=f.cache_dtype,
            status=kv_status,
            evidence="cache_config",
        )
    )
    knobs.append(_same("load_format", load_format, f.load_format, "load_config"))
    return knobs + engine_arg_knobs(spec.engine_args, f.engine_args)
