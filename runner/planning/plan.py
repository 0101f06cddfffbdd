"""One recipe's plan: prompt tokens, prefix-cache reuse, memory, the compute floor and layout advice.

Pure: token ids and a config.json dict in, a ``Plan`` out; no torch, no vLLM, no GPU needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ..strict import StrictModel
from .floor import Floor, compute_floor
from .gpus import GPU, get_gpu
from .layout import LayoutAdvice, LayoutInputs, advise_layout
from .memory import GIB, MemoryPlan, batch_defaults, plan_memory
from .prefix_cache import DEFAULT_BLOCK_SIZE, simulate_prefix_cache


class TokenStats(StrictModel):
    """Distribution of prompt lengths, tokens per example."""

    mean: float = Field(description="Mean.")
    p50: float = Field(description="Median.")
    p90: float = Field(description="90th percentile.")
    max: int = Field(description="Longest.")


class Plan(StrictModel):
    """What a recipe will need and can reach on a GPU, before running it."""

    name: str = Field(description="Recipe name.")
    gpu: str = Field(description="GPU planned for.")
    requests: int = Field(description="Prompts.")
    prompt_tokens: int = Field(description="All prompt tokens.")
    prompt_tokens_per_example: TokenStats | None = Field(
        description="Prompt length distribution; None without prompts."
    )
    max_tokens: int = Field(description="Output tokens per request assumed (sampling.max_tokens).")
    max_model_len: int = Field(description="Context length (the recipe's, else the model's).")
    over_context: int = Field(description="Prompts whose length + max_tokens exceeds max_model_len.")
    prefix_caching: bool = Field(description="Whether prefix caching is on.")
    cached_prompt_tokens: int = Field(
        description="Prompt tokens served from the prefix cache (0 when off); exact "
        "for vLLM V1 unless cache_upper_bound."
    )
    cached_share: float = Field(description="cached_prompt_tokens / prompt_tokens.")
    block_size: int = Field(description="KV-cache block size, tokens.")
    kv_blocks_needed: int = Field(description="Distinct full prompt blocks a cache must hold for all the reuse.")
    cache_upper_bound: bool = Field(
        description="The KV cache holds fewer blocks than kv_blocks_needed: blocks get "
        "evicted and cached_prompt_tokens is an upper bound."
    )
    cached_prompt_tokens_lru: int | None = Field(
        description="When cache_upper_bound: an LRU estimate at the KV "
        "capacity (ignores blocks held by running requests)."
    )
    weights_gib: float = Field(description="Weights, GiB.")
    kv_bytes_per_token: int = Field(description="KV-cache bytes per token.")
    kv_capacity_tokens: int = Field(description="KV-cache capacity, tokens.")
    fits: bool = Field(description="Fits without CPU offload (weights, overheads, one max_model_len sequence).")
    cpu_offload_gb_needed: float = Field(description="cpu_offload_gb needed to fit (GiB, vLLM's unit); 0 if it fits.")
    memory: MemoryPlan = Field(description="The memory budget in detail.")
    batch: int = Field(description="Sequences decoded together assumed for the floor.")
    floor_s: float | None = Field(
        description="Lower bound on generation time, seconds; None if the GPU's peaks are unknown."
    )
    bound: str | None = Field(description="What sets the floor: compute, memory or pcie.")
    floor: Floor | None = Field(description="The floor in detail.")
    layout_advice: list[LayoutAdvice] = Field(description="Template layout advice (empty without layout inputs).")
    notes: list[str] = Field(description="Caveats in words.")


def _percentile(s: Sequence[int], q: float) -> float:
    """Linear-interpolated percentile of sorted values (q in 0..100), as numpy's default."""
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _stats(lens: Sequence[int]) -> TokenStats | None:
    if not lens:
        return None
    s = sorted(lens)
    return TokenStats(mean=sum(s) / len(s), p50=_percentile(s, 50), p90=_percentile(s, 90), max=s[-1])


def _default_batch(n: int, max_num_seqs: int, capacity_tokens: int, mean_len: float, max_tokens: int) -> int:
    """min(requests, max_num_seqs, KV capacity / (mean prompt + max_tokens)), at least 1."""
    per_seq = max(1, math.ceil(mean_len + max_tokens))
    return max(1, min(n, max_num_seqs, capacity_tokens // per_seq))


def _notes(p: dict[str, Any], gpu: GPU, caching_would: int) -> list[str]:
    notes = []
    if not p["prefix_caching"] and caching_would:
        notes.append(f"prefix caching is off; on, it would serve {caching_would:,} prompt tokens.")
    if p["cache_upper_bound"]:
        notes.append(
            f"the KV cache holds {p['memory'].kv_capacity_blocks:,} blocks but full reuse needs "
            f"{p['kv_blocks_needed']:,}: blocks get evicted, the cached count is an upper bound."
        )
    if not p["fits"]:
        notes.append(f"does not fit without offload: cpu_offload_gb >= {p['cpu_offload_gb_needed']} needed.")
    if p["over_context"]:
        notes.append(f"{p['over_context']:,} prompts + max_tokens exceed max_model_len {p['max_model_len']:,}.")
    if gpu.bf16_tflops is None:
        notes.append(f"{gpu.name}: peak FLOP/s unknown, no floor.")
    return notes


def make_plan(
    name: str,
    prompt_ids: Sequence[Sequence[int]],
    config: Mapping[str, Any],
    *,
    gpu: GPU | str,
    dtype: str = "auto",
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_tokens: int = 64,
    batch: int | None = None,
    cpu_offload_gb: float = 0.0,
    enable_prefix_caching: bool = True,
    enforce_eager: bool = False,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    layout: LayoutInputs | None = None,
) -> Plan:
    """Plan one recipe. ``prompt_ids``: the token ids in the order the engine receives them; ``config``: the
    model's config.json; the keyword arguments mirror the recipe's engine settings (vLLM defaults).
    ``max_num_batched_tokens``/``max_num_seqs``: vLLM's defaults for the GPU when None. ``batch``: sequences
    decoded together; default min(requests, max_num_seqs, KV capacity / (mean prompt + max_tokens))."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    d_tokens, d_seqs = batch_defaults(g.memory_gib, g.name)
    t, seqs = max_num_batched_tokens or d_tokens, max_num_seqs or d_seqs
    mem = plan_memory(
        config,
        gpu_memory_gib=g.memory_gib,
        gpu_memory_utilization=gpu_memory_utilization,
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        max_model_len=max_model_len,
        block_size=block_size,
        cpu_offload_gb=cpu_offload_gb,
        max_num_batched_tokens=t,
        max_num_seqs=seqs,
        enforce_eager=enforce_eager,
    )
    lens = [len(p) for p in prompt_ids]
    reuse = _reuse(prompt_ids, block_size, mem.kv_capacity_blocks, enable_prefix_caching)
    b = batch or _default_batch(len(lens), seqs, mem.kv_capacity_tokens, sum(lens) / max(1, len(lens)), max_tokens)
    fl = _floor(config, lens, reuse.used, max_tokens, g, mem, b, t)
    advice = []
    if layout is not None:
        advice = advise_layout(layout, block_size, mem.kv_capacity_blocks if reuse.upper else None)
    return _assemble(name, g, lens, max_tokens, block_size, reuse, mem, b, fl, advice)


@dataclass(frozen=True)
class _Reuse:
    """What the prefix cache serves of the prompts."""

    enabled: bool
    hits: list[int]  # cached tokens per request with room for every block (what caching would serve)
    needed: int  # distinct full prompt blocks all that reuse needs
    upper: bool  # caching is on and the KV cache holds fewer blocks: hits are an upper bound
    lru: int | None  # when upper: an LRU estimate at the KV capacity
    used: list[int]  # cached tokens per request as planned (zeros when caching is off)


def _reuse(prompt_ids: Sequence[Sequence[int]], block_size: int, capacity_blocks: int, enabled: bool) -> _Reuse:
    hits, needed, _ = simulate_prefix_cache(prompt_ids, block_size, None)
    upper = enabled and needed > capacity_blocks
    lru = None
    if upper and capacity_blocks > 0:
        lru = sum(simulate_prefix_cache(prompt_ids, block_size, capacity_blocks)[0])
    used = hits if enabled else [0] * len(prompt_ids)
    return _Reuse(enabled=enabled, hits=hits, needed=needed, upper=upper, lru=lru, used=used)


def _floor(
    config: Mapping[str, Any],
    lens: Sequence[int],
    cached: Sequence[int],
    max_tokens: int,
    g: GPU,
    mem: MemoryPlan,
    batch: int,
    max_num_batched_tokens: int,
) -> Floor | None:
    """The compute floor with the weights, offload and KV layout the memory plan found."""
    return compute_floor(
        config,
        lens,
        cached,
        max_tokens,
        gpu=g,
        quantization=mem.quantization,
        dtype=mem.dtype,
        weight_gpu_bytes=mem.weights_gpu_gib * GIB,
        kv_bytes_per_token=mem.kv_bytes_per_token,
        batch=batch,
        max_num_batched_tokens=max_num_batched_tokens,
        offload_bytes=(mem.weights_gib - mem.weights_gpu_gib) * GIB,
    )


def _assemble(
    name: str,
    g: GPU,
    lens: Sequence[int],
    max_tokens: int,
    block_size: int,
    reuse: _Reuse,
    mem: MemoryPlan,
    batch: int,
    fl: Floor | None,
    advice: list[LayoutAdvice],
) -> Plan:
    total = sum(lens)
    fields: dict[str, Any] = {
        "name": name,
        "gpu": g.name,
        "requests": len(lens),
        "prompt_tokens": total,
        "prompt_tokens_per_example": _stats(lens),
        "max_tokens": max_tokens,
        "max_model_len": mem.max_model_len,
        "over_context": sum(1 for n in lens if n + max_tokens > mem.max_model_len) if mem.max_model_len else 0,
        "prefix_caching": reuse.enabled,
        "cached_prompt_tokens": sum(reuse.used),
        "cached_share": sum(reuse.used) / total if total else 0.0,
        "block_size": block_size,
        "kv_blocks_needed": reuse.needed,
        "cache_upper_bound": reuse.upper,
        "cached_prompt_tokens_lru": reuse.lru,
        "weights_gib": mem.weights_gib,
        "kv_bytes_per_token": mem.kv_bytes_per_token,
        "kv_capacity_tokens": mem.kv_capacity_tokens,
        "fits": mem.fits,
        "cpu_offload_gb_needed": mem.cpu_offload_gb_needed,
        "memory": mem,
        "batch": batch,
        "floor_s": fl.floor_s if fl else None,
        "bound": fl.bound if fl else None,
        "floor": fl,
        "layout_advice": advice,
    }
    return Plan(**fields, notes=_notes(fields, g, sum(reuse.hits)))
