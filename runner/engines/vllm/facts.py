"""What vLLM reports back, as plain data, and what it shows took effect. `VLLMFacts` (the engine's
effective settings) is read from its configs after start (`effective_engine_args` walks a VllmConfig
duck-typed, so tests pass plain objects), from its log (weights, KV cache, compile and CUDA-graph
times, the compile cache), from a `vllm serve` log (`served_facts`), or from the log of a run that
ended early (`crash_evidence`). Every knob's verdict (applied / ignored / default / unverified) is a
pure function of (spec, facts, the generations' prefix-cache counts), so every row is unit-tested on
the CPU with facts given as plain data."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from runner.base.dotted import flat_dotted
from runner.base.types import EngineInfo, Knob


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


_LOAD_RE = re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds")
_KV_RE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_NUMBERS = {  # a figure of vLLM's log, by the key parse_engine_log gives it
    # measured by the memory profiling, or reserved as given (kv_cache_memory_bytes, a startup plan)
    "kv_cache_gib": re.compile(
        r"Available KV cache memory: ([\d.]+) GiB|reserved ([\d.]+) GiB memory for KV Cache"
    ),
    "cpu_offloaded_gib": re.compile(r"Total CPU offloaded parameters: ([\d.]+)"),
    "compile_s": re.compile(
        r"torch\.compile (?:and initial profiling/warmup run together )?took ([\d.]+) s in total"
    ),
    "capture_s": re.compile(r"Graph capturing finished in ([\d.]+) secs"),
    # the engine process's memory profiling, KV cache and warm-up, compile and capture included
    "init_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}
_CACHE_DIR_RE = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
_CACHE_HIT = ("Directly load the compiled graph", "Directly load AOT compilation")


@dataclass(frozen=True)
class VLLMFacts:
    """The engine's effective settings, as read from vLLM's configs and log after start."""

    quantization: str | None = None
    prefix_caching: bool = False
    # None: not known (a server log without the worker's line)
    gpu_memory_utilization: float | None = 0.9
    enforce_eager: bool = False
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    cache_dtype: str = "auto"
    load_format: str = ""
    weights_gib: float | None = None
    # bf16 size of the same parameters, for quantization/offload
    unquantized_gib: float | None = None
    model_runner: str = "unknown"
    kv_cache_tokens: int | None = None
    version: str = ""
    swap_space: float | None = None  # as the engine's cache config holds it, when it has one
    # recipe arguments this vLLM has no field for
    dropped: dict[str, Any] = field(default_factory=dict)
    # engine_args as held: dotted key -> (the config it was found in, its value); None: not read
    # back (served engine)
    engine_args: dict[str, tuple[str, Any]] | None = None
    # where vLLM's log says torch.compile's cache is (None: nothing compiled)
    compile_cache_dir: str | None = None
    # the KV cache size was given (kv_cache_memory_bytes, vLLM's startup plan), not measured
    profiling_skipped: bool = False


def parse_engine_log(text: str) -> dict[str, float]:
    out: dict[str, float] = {
        k: float(m.group(m.lastindex)) for k, rx in _NUMBERS.items() if (m := rx.search(text))
    }
    if m := _LOAD_RE.search(text):
        out["weights_gib"], out["weights_load_s"] = float(m.group(1)), float(m.group(2))
    if m := _KV_RE.search(text):
        out["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
    if "V2 Model Runner" in text:
        out["v2_runner"] = 1.0
    if any(s in text for s in _CACHE_HIT):
        out["compile_cache_hit"] = 1.0
    if "skipped memory profiling" in text:  # the KV cache size was given, not measured
        out["profiling_skipped"] = 1.0
    # FlashInfer's autotuning in the start's kernel warm-up: nothing to tune, or tactics loaded
    if "No FlashInfer autotune cache entries found" in text:
        out["autotune_found_none"] = 1.0
    if "FlashInfer autotune cache loaded" in text:
        out["autotune_loaded"] = 1.0
    return out


def compile_cache_dir(text: str) -> str | None:
    """The compile cache folder vLLM's log names (None: nothing compiled, or the cache is off)."""
    m = _CACHE_DIR_RE.search(text)
    return m.group(1) if m else None


def start_parts(
    parsed: dict[str, float], cache_dir: str | None, total_s: float, warmup_s: float | None
) -> dict:
    """The engine start split as vLLM's log accounts for it (StartParts' fields): weights, compile
    (or loading it from the cache), CUDA graph capture, memory profiling with the KV cache and
    vLLM's kernel warm-up (its "init engine" time, which holds compile and capture, less them), the
    recipe's warm-up, and the rest of `total_s`; `cold` from whether the compiled graphs came from
    the cache, `profiled` from whether the memory was measured or the KV cache size given."""
    compile_s, capture_s, init_s = (parsed.get(k) for k in ("compile_s", "capture_s", "init_s"))
    parts = {
        "load_s": parsed.get("weights_load_s"),
        "compile_s": compile_s,
        "capture_s": capture_s,
        "profile_kv_s": None
        if init_s is None
        else max(init_s - (compile_s or 0.0) - (capture_s or 0.0), 0.0),
        "warmup_s": warmup_s,
    }
    known = sum(v for v in parts.values() if v is not None)
    cold = (
        None
        if parts["compile_s"] is None and cache_dir is None
        else not parsed.get("compile_cache_hit")
    )
    # the cache folder as the recipe names it: vLLM's log gives
    # <root>/torch_compile_cache/<hash>/rank_0_0/...
    root = cache_dir.split("/torch_compile_cache/")[0] if cache_dir else None
    profiled = (
        False if parsed.get("profiling_skipped") else True if "kv_cache_gib" in parsed else None
    )
    return parts | {
        "other_s": max(total_s - known, 0.0),
        "cold": cold,
        "compile_cache": root,
        "profiled": profiled,
    }


def served_facts(spec: Any, model: Any, log: str, version: str) -> VLLMFacts | None:
    """VLLMFacts from a `vllm serve` log: its `Initializing a V1 LLM engine (vX) with config: k=v,
    ...` line (VllmConfig.__str__), the worker's `Desired GPU memory utilization is (u, ...)` and
    the weights and KV cache lines; None without the config line."""
    line = next((x for x in reversed(log.splitlines()) if "with config:" in x), None)
    if line is None:
        return None
    parsed = parse_engine_log(log)
    cfg = {
        k: v.strip("'")
        for k, v in re.findall(r"(\w+)=('[^']*'|[^,\s]+)", line.split("with config:", 1)[1])
    }
    desired = re.findall(r"Desired GPU memory utilization is \(([0-9.]+),", log)
    full = (
        unquantized_gib(model.id, model.trust_remote_code)
        if spec.quantization or spec.cpu_offload_gb > 0
        else None
    )
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
        kv_cache_tokens=parsed.get("kv_cache_tokens") or None,
        version=version,
        profiling_skipped=bool(parsed.get("profiling_skipped")),
    )


def crash_evidence(log_text: str) -> EngineInfo:
    found = parse_engine_log(log_text)
    notes = []
    if "weights_gib" in found:
        notes.append(
            f"from engine.log before the run ended: weights on the GPU {found['weights_gib']} GiB"
        )
    if "cpu_offloaded_gib" in found:
        off = f"{found['cpu_offloaded_gib']} GiB of parameters were offloaded to CPU memory"
        notes.append(f"from engine.log: {off} (cpu_offload_gb took effect)")
    kv = found.get("kv_cache_tokens") or None
    return EngineInfo(weights_gib=found.get("weights_gib"), kv_cache_tokens=kv, notes=notes)


def effective_engine_args(vllm_config: Any, args: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Where each engine_args key lives in the engine's config and its value there: a top-level key
    in whichever `*_config` (or VllmConfig itself) has a field of that name, a dotted one by walking
    from its head: a config (compilation_config.…) or a mapping field (hf_overrides.…).
    Keys found nowhere are left out (their knob reads "unverified")."""
    names = [n for n in dir(vllm_config) if n.endswith("_config")]
    configs = {n: c for n in names if (c := _attr(vllm_config, n)) is not None and not callable(c)}
    order = sorted(configs, key=lambda n: (_FIRST.index(n) if n in _FIRST else len(_FIRST), n))
    found: dict[str, tuple[str, Any]] = {}
    for key in flat_dotted(args):
        head, *path = key.split(".")
        if head in configs:  # compilation_config.cudagraph_capture_sizes
            where, value = head, configs[head]
        # the first config with a field of that name; VllmConfig's own fields last
        # (optimization_level)
        else:
            held = ((n, _attr(configs[n], head)) for n in order)
            own = ("vllm_config", _attr(vllm_config, head))
            where, value = next(((n, v) for n, v in held if v is not _MISSING), own)
        for part in path:  # a mapping field walked key by key (hf_overrides.rope_theta)
            value = _attr(value, part)
        if value is not _MISSING and not callable(value):
            found[key] = (where, value)
    return found


_MISSING = object()
# where an engine argument's name is looked for first: a few names recur in sub-configs
# (max_model_len in
# the scheduler's, model's and speculative config; quantization, enforce_eager in the speculative
# one)
_FIRST = ("scheduler_config", "cache_config", "model_config", "parallel_config", "load_config")


def _attr(obj: Any, name: str) -> Any:
    """obj.name, or obj[name] in a mapping field (hf_overrides, inductor_compile_config); _MISSING
    if neither."""
    if obj is _MISSING or obj is None:
        return _MISSING
    if isinstance(obj, dict):
        return obj.get(name, _MISSING)
    try:
        return getattr(obj, name, _MISSING)
    except Exception:  # a property that cannot be read on this config
        return _MISSING


# vLLM renames AWQ/GPTQ requests to the kernel it picks (config/model.py _verify_quantization)
QUANT_ALIASES = {
    "awq": "auto_awq",
    "awq_marlin": "auto_awq",
    "gptq": "auto_gptq",
    "gptq_marlin": "auto_gptq",
}


def compile_cache_knob(spec: Any, cache_dir: str | None) -> Knob | None:
    """`compile_cache`: applied when vLLM's log names a cache folder inside it."""
    if not spec.compile_cache:
        return None
    if cache_dir is None:
        why = "nothing compiled (enforce_eager) or vLLM's log names no cache folder"
        return _knob("compile_cache", spec.compile_cache, None, "unverified", why)
    took = Path(spec.compile_cache).resolve() in Path(cache_dir).resolve().parents
    return _knob(
        "compile_cache",
        spec.compile_cache,
        cache_dir,
        "applied" if took else "ignored",
        "vLLM's log",
    )


def _knob(name: str, requested: Any, effective: Any, status: str, evidence: str) -> Knob:
    return Knob(
        name=name, requested=requested, effective=effective, status=status, evidence=evidence
    )


def _quantization(spec: Any, f: VLLMFacts) -> Knob:
    w = f.weights_gib
    if spec.quantization is None:
        ev = f"from the checkpoint config{f'; weights {w} GiB' if w else ''}"
        return _knob("quantization", None, f.quantization, "default", ev)
    want = QUANT_ALIASES.get(spec.quantization, spec.quantization)
    ok = f.quantization is not None and f.quantization in (want, spec.quantization)
    full = f" vs {f.unquantized_gib:.1f} GiB unquantized bf16" if f.unquantized_gib else ""
    ev = f"engine loaded {f.quantization}; weights {w} GiB" + full
    return _knob(
        "quantization", spec.quantization, f.quantization, "applied" if ok else "ignored", ev
    )


def _prefix_caching(spec: Any, f: VLLMFacts, cached: int, prompt: int) -> Knob:
    ev = f"{cached:,} of {prompt:,} prompt tokens served from cache ({cached / max(prompt, 1):.1%})"
    want = spec.enable_prefix_caching
    if want is None:
        status = "default"
    elif want:
        status = (
            "applied"
            if f.prefix_caching and cached > 0
            else ("unverified" if f.prefix_caching else "ignored")
        )
    else:
        status = "applied" if not f.prefix_caching and cached == 0 else "ignored"
    return _knob("enable_prefix_caching", want, f.prefix_caching, status, ev)


def _offload(spec: Any, f: VLLMFacts) -> Knob | None:
    w, full, asked = f.weights_gib, f.unquantized_gib, spec.cpu_offload_gb
    if not asked:
        return None
    if w is None or full is None:
        return _knob(
            "cpu_offload_gb", asked, None, "unverified", "weight memory not reported by the engine"
        )
    took = w <= full - 0.5 * asked  # at least half the asked amount left the GPU
    ev = (
        f"weights on GPU {w} GiB (full model {full:.1f} GiB, expected "
        f"~{max(full - asked, 0):.1f}); model runner {f.model_runner}"
    )
    return _knob(
        "cpu_offload_gb", asked, round(max(full - w, 0), 2), "applied" if took else "ignored", ev
    )


def _swap_space(spec: Any, f: VLLMFacts) -> Knob | None:
    if "swap_space" in f.dropped:
        ev = f"vLLM {f.version} has no swap_space argument (V1 engine: no CPU swap); not passed"
        return _knob("swap_space", f.dropped["swap_space"], None, "ignored", ev)
    if spec.swap_space is not None:
        ev = "accepted by this vLLM; the V1 engine preempts by recomputation"
        return _knob("swap_space", spec.swap_space, f.swap_space, "unverified", ev)
    return None


def _same(name: str, requested: Any, effective: Any, evidence: str) -> Knob:
    return _knob(
        name, requested, effective, "applied" if requested == effective else "ignored", evidence
    )


def vllm_knobs(spec: Any, load_format: str, f: VLLMFacts, cached: int, prompt: int) -> list[Knob]:
    """Every knob of a vLLM recipe with its verdict. `cached`/`prompt`: prompt tokens served from
    the prefix cache and in all, over the run's generations."""
    kv = f"KV cache {f.kv_cache_tokens:,} tokens" if f.kv_cache_tokens else ""
    if f.profiling_skipped:
        gmu_status = "ignored"
        why = (
            "vLLM skipped its memory profiling: the KV cache size was given "
            "(kv_cache_memory_bytes or vLLM's startup plan), not taken from it"
        )
    elif f.gpu_memory_utilization is None:
        gmu_status, why = "unverified", "not in the server's log"
    else:
        gmu_ok = abs(f.gpu_memory_utilization - spec.gpu_memory_utilization) < 1e-9
        gmu_status, why = ("applied" if gmu_ok else "ignored"), ""
    gmu_evidence = "; ".join(x for x in (why, kv) if x)
    kv_ok = str(f.cache_dtype).startswith(spec.kv_cache_dtype)
    kv_status = "default" if spec.kv_cache_dtype == "auto" else ("applied" if kv_ok else "ignored")
    knobs = [
        _quantization(spec, f),
        _prefix_caching(spec, f, cached, prompt),
        _offload(spec, f),
        _swap_space(spec, f),
        _knob(
            "gpu_memory_utilization",
            spec.gpu_memory_utilization,
            f.gpu_memory_utilization,
            gmu_status,
            gmu_evidence,
        ),
        _same("enforce_eager", spec.enforce_eager, f.enforce_eager, "model_config.enforce_eager"),
        None
        if spec.max_model_len is None
        else _same("max_model_len", spec.max_model_len, f.max_model_len, "model_config"),
        _same(
            "tensor_parallel_size",
            spec.tensor_parallel_size,
            f.tensor_parallel_size,
            "parallel_config",
        ),
        _knob("kv_cache_dtype", spec.kv_cache_dtype, f.cache_dtype, kv_status, "cache_config"),
        _same("load_format", load_format, f.load_format, "load_config"),
        compile_cache_knob(spec, f.compile_cache_dir),
    ]
    return [k for k in knobs if k is not None] + engine_arg_knobs(spec.engine_args, f.engine_args)


def _verdict(requested: Any, effective: Any) -> tuple[str, str]:
    """(status, a note on how they matched) for one engine argument and the value the engine
    holds."""
    if requested is None:
        return "default", "left to vLLM"
    if isinstance(effective, Enum) and isinstance(requested, str):
        same = requested.lower() in (effective.name.lower(), str(effective.value).lower())
        return ("applied" if same else "ignored"), ""
    req, eff = _plain(requested), _plain(effective)
    if req == eff:
        return "applied", ""
    if (
        isinstance(req, list)
        and isinstance(eff, list)
        and all(isinstance(x, (int, float, str)) for x in req + eff)
    ):
        if set(req) == set(eff):
            return "applied", "the same values, in vLLM's order"
        if set(req) < set(eff):
            return "applied", f"vLLM added {sorted(set(eff) - set(req), key=str)}"
    return "ignored", ""


def _plain(v: Any) -> Any:
    """A config value as results.json can hold it (paths as text, enums by name, tuples as
    lists)."""
    if isinstance(v, Enum):
        return v.name
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


def engine_arg_knobs(
    engine_args: dict[str, Any], held: dict[str, tuple[str, Any]] | None
) -> list[Knob]:
    """One knob per engine_args key (nested mappings by dotted key), checked against what the engine
    holds (`effective_engine_args`; None where it was not read back)."""
    knobs = []
    for key, requested in flat_dotted(engine_args).items():
        name = f"engine_args.{key}"
        if held is None or key not in held:
            why = (
                "not read back (a served engine)"
                if held is None
                else "not found in the engine's config"
            )
            knobs.append(_knob(name, requested, None, "unverified", why))
            continue
        where, effective = held[key]
        try:
            status, note = _verdict(requested, effective)
        # evidence, not the result: a value that does not compare is unverified
        except Exception as e:
            status, note = "unverified", f"could not compare ({type(e).__name__})"
        # the engine core may still adjust CUDA-graph settings on its side
        if where == "compilation_config":
            where = "compilation_config, as the front end holds it"
        evidence = f"{where}; {note}" if note else where
        knobs.append(_knob(name, requested, _plain(effective), status, evidence))
    return knobs
