"""vLLM under `vllm serve`: knob verdicts and prefix-cache hits from the server's log and metrics counters,
as `VLLMSpec.serve_evidence` reports them (no vLLM objects in this process)."""

from __future__ import annotations

import re

from runner.config.common import ModelSpec
from runner.engines.base import ServeEvidence
from runner.engines.vllm import VLLMSpec, unquantized_gib
from runner.engines.vllm_knobs import VLLMFacts, parse_engine_log, vllm_knobs


def serve_evidence(spec: VLLMSpec, model: ModelSpec, log_text: str, counters: dict[str, float]) -> ServeEvidence:
    """Knob verdicts as offline (vllm_knobs), from the server log's engine config line instead of the
    engine's objects; prefix-cache hits from the `vllm:prefix_cache_hits`/`queries` counters (tokens)."""
    from runner.serving.server import counter

    hits, queries = counter(counters, "vllm:prefix_cache_hits"), counter(counters, "vllm:prefix_cache_queries")
    cached = None if hits is None else int(hits)
    facts, parsed = _served_facts(spec, model, log_text)
    kv = parsed.get("kv_cache_tokens")
    if facts is None:
        return ServeEvidence(
            cached_tokens=cached,
            weights_gib=parsed.get("weights_gib"),
            kv_cache_tokens=int(kv) if kv else None,
            notes=("the server's log has no engine config line: knobs not verified",),
        )
    knobs = vllm_knobs(spec, model.load_format, facts, cached=cached or 0, prompt=int(queries or 0))
    return ServeEvidence(
        knobs=tuple(knobs),
        cached_tokens=cached,
        weights_gib=facts.weights_gib,
        kv_cache_tokens=facts.kv_cache_tokens,
    )


_DESIRED = re.compile(r"Desired GPU memory utilization is \(([0-9.]+),")


def _desired_utilization(log: str) -> float | None:
    """The utilization the engine's worker sized its KV cache for: vLLM 0.26 logs `Free memory on device
    (...) on startup. Desired GPU memory utilization is (0.9, 125.82 GiB). ...` (gpu_worker.py)."""
    found = _DESIRED.findall(log)
    return float(found[-1]) if found else None


def _served_facts(spec: VLLMSpec, model: ModelSpec, log: str) -> tuple[VLLMFacts | None, dict[str, float]]:
    """VLLMFacts from a server's log: its `Initializing a V1 LLM engine (vX) with config: k=v, ...` line
    (VllmConfig.__str__), weights and KV cache lines; None when the config line is missing."""
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
        gpu_memory_utilization=_desired_utilization(log),  # None: vllm_knobs says unverified
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
