"""GPU memory of a dense decoder-only model under vLLM, from its Hugging Face ``config.json`` alone.

Parameters (H hidden, L layers, nh attention heads, kv KV heads, d head dim, I intermediate, V vocab):
  embedding V*H; lm_head V*H unless ``tie_word_embeddings``; per layer: q H*nh*d, k and v H*kv*d each,
  o nh*d*H, MLP gate, up H*I each and down I*H; biases: q/k/v (nh*d + 2*kv*d) when ``attention_bias`` or
  Qwen2 style (model_type qwen2: q/k/v biases, none on o), o (H) with ``attention_bias``, MLP (2I + H) with
  ``mlp_bias``; norms 2H per layer + H final (+ 2d per layer for Qwen3's q/k norms).
  Qwen2.5-7B: 7,615,616,512 (published: 7.62B).

Weight bytes: the decoder-layer matmul weights ("linear") are what quantization shrinks; embedding, lm_head,
biases and norms stay 16-bit (vLLM quantizes neither the embedding nor, unless asked, the lm_head):
  none: all parameters * dtype bytes (bf16/fp16 2, fp32 4);
  fp8 (vLLM online or fp8 checkpoint): linear * 1 byte (per-tensor scales negligible);
  awq/gptq, b bits, group g (-1 = whole input row): per matrix in*out*b/8 + out*ceil(in/g)*(2 + b/8)
    (an fp16 scale and a b-bit zero point per group; AWQ without ``zero_point`` drops the zero);
  bitsandbytes 8-bit: linear * 1 + 4 bytes per output row; 4-bit (NF4, blocks of 64): linear / 2 +
    4 bytes per block, or with double quantization 1 byte per block + 4 bytes per 256 blocks.
  Against vLLM on the H200 (Qwen2.5-7B, "Model loading took"): bf16 14.18 GiB predicted vs 14.29 measured,
  fp8 8.11 vs 8.2, AWQ 5.19 vs 5.38 (vLLM's figure also holds a few non-parameter buffers).

KV cache per token: L * kv * d * 2 (K and V) * kv dtype bytes (``auto`` = model dtype; fp8 = 1).

KV capacity, as vLLM sizes it (``gpu_worker.py``: "Desired GPU memory utilization is (u, X GiB). Actual usage
is W for weight, A for peak activation, N for non-torch memory, G for CUDAGraph memory"):
  KV bytes = u * total - weights on GPU - A - N - G;  tokens = floor(KV bytes / (block_size * kv/token))
  * block_size.  vLLM measures A by profiling a forward pass of ``max_num_batched_tokens`` tokens; here:
  A = max(T * (3I + 4H) * a [+ T * I for fp8's quantized copy of the down-projection input],
          max_num_seqs * V * 4 * 2)
  (T = max_num_batched_tokens, a = activation bytes: gate_up output 2I, its activation I, and about four
  hidden-sized buffers per token; the second term is the sampler's fp32 logits and one working copy).
  Qwen2.5-7B at T = 16,384: 2.17 GiB (measured: bf16 2.2, AWQ 2.17), fp8 2.46 (measured 2.46).
  N = 0.25 GiB (measured 0.22-0.25 on the H200). G = 0 with ``enforce_eager``, else 0.5 GiB: a guess, not
  measured here (vLLM logs a few tenths of a GiB to about 1 GiB of CUDA graphs for 7B models).
vLLM refuses to start when the KV cache cannot hold one ``max_model_len`` sequence: the model "fits" when
  u * total >= weights + A + N + G + max_model_len * kv/token; otherwise ``cpu_offload_gb`` must cover the
  difference (vLLM's cpu_offload_gb counts GiB, and offloads whole parameters, so it may overshoot slightly).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ..strict import StrictModel
from .shape import model_shape
from .weights import DTYPE_BYTES, resolve_dtype, resolve_quantization, weight_bytes

GIB = 2**30
NON_TORCH_GIB = 0.25
CUDA_GRAPH_GIB = 0.5


def kv_bytes_per_token(config: Mapping[str, Any], kv_cache_dtype: str = "auto", dtype: str = "auto") -> int:
    """L * kv heads * head dim * 2 * bytes (``auto`` = the model dtype, ``fp8*`` = 1)."""
    s = model_shape(config)
    if kv_cache_dtype == "auto":
        b = DTYPE_BYTES[resolve_dtype(config, dtype)]
    elif kv_cache_dtype.startswith("fp8"):
        b = 1
    elif kv_cache_dtype in DTYPE_BYTES:
        b = DTYPE_BYTES[kv_cache_dtype]
    else:
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} is not modelled")
    return s.layers * s.kv_heads * s.head_dim * 2 * b


def activation_bytes(
    config: Mapping[str, Any],
    max_num_batched_tokens: int,
    max_num_seqs: int,
    dtype: str = "auto",
    quantization: str | None = None,
) -> int:
    """Peak activation estimate of vLLM's profiling pass (formula in the module docstring)."""
    s = model_shape(config)
    a = DTYPE_BYTES[resolve_dtype(config, dtype)]
    t = max_num_batched_tokens
    forward = t * (3 * s.intermediate + 4 * s.hidden) * a
    if resolve_quantization(config, quantization).method == "fp8":
        forward += t * s.intermediate
    return max(forward, max_num_seqs * s.vocab * 4 * 2)


def batch_defaults(gpu_memory_gib: float, gpu_name: str = "") -> tuple[int, int]:
    """vLLM's offline (LLM class) defaults (max_num_batched_tokens, max_num_seqs): (16384, 1024) on GPUs of at
    least 70 GiB other than the A100, else (8192, 256) (``EngineArgs.get_batch_defaults``)."""
    if gpu_memory_gib >= 70 and "a100" not in gpu_name.lower():
        return 16384, 1024
    return 8192, 256


class MemoryPlan(StrictModel):
    """Where the GPU's memory goes under vLLM, and what is left for the KV cache."""

    quantization: str = Field(description="Resolved method: none, fp8, awq, gptq, bitsandbytes.")
    dtype: str = Field(description="Resolved model dtype.")
    weights_gib: float = Field(description="All weights, GiB.")
    weights_gpu_gib: float = Field(description="Weights left on the GPU after cpu_offload_gb, GiB.")
    activation_gib: float = Field(description="Peak activation estimate (vLLM's profiling pass), GiB.")
    non_torch_gib: float = Field(description="Non-torch allowance, GiB.")
    cuda_graph_gib: float = Field(description="CUDA-graph allowance (0 with enforce_eager), GiB.")
    budget_gib: float = Field(description="gpu_memory_utilization * GPU memory, GiB.")
    kv_bytes_per_token: int = Field(description="KV-cache bytes per token, all layers.")
    kv_cache_gib: float = Field(description="Memory left for the KV cache, GiB (0 when negative).")
    kv_capacity_blocks: int = Field(description="KV blocks that fit.")
    kv_capacity_tokens: int = Field(description="KV tokens that fit (blocks * block size).")
    max_model_len: int = Field(description="Context length the engine must hold one sequence of.")
    fits: bool = Field(description="Without offload: weights, overheads and one max_model_len sequence fit.")
    cpu_offload_gb_needed: float = Field(
        description="cpu_offload_gb (vLLM's unit: GiB) needed to fit; 0 if it fits; "
        "more than weights_gib: offload alone cannot make it fit."
    )
    starts: bool = Field(description="With the given cpu_offload_gb, the KV cache holds one max_model_len sequence.")


def plan_memory(
    config: Mapping[str, Any],
    *,
    gpu_memory_gib: float,
    gpu_memory_utilization: float = 0.9,
    dtype: str = "auto",
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    max_model_len: int | None = None,
    block_size: int = 16,
    cpu_offload_gb: float = 0.0,
    max_num_batched_tokens: int = 16384,
    max_num_seqs: int = 1024,
    enforce_eager: bool = False,
) -> MemoryPlan:
    """vLLM's memory budget for one GPU (formulas in the module docstring)."""
    q = resolve_quantization(config, quantization)
    d = resolve_dtype(config, dtype)
    weights = weight_bytes(config, dtype, quantization)
    gpu_weights = max(0, weights - int(cpu_offload_gb * GIB))
    act = activation_bytes(config, max_num_batched_tokens, max_num_seqs, dtype, quantization)
    extra = (NON_TORCH_GIB + (0.0 if enforce_eager else CUDA_GRAPH_GIB)) * GIB
    budget = gpu_memory_utilization * gpu_memory_gib * GIB
    kvb = kv_bytes_per_token(config, kv_cache_dtype, dtype)
    mml = max_model_len or model_shape(config).max_position or 0
    kv = max(0.0, budget - gpu_weights - act - extra)
    blocks = int(kv // (block_size * kvb))
    short = weights + act + extra + mml * kvb - budget
    return MemoryPlan(
        quantization=q.method,
        dtype=d,
        weights_gib=weights / GIB,
        weights_gpu_gib=gpu_weights / GIB,
        activation_gib=act / GIB,
        non_torch_gib=NON_TORCH_GIB,
        cuda_graph_gib=0.0 if enforce_eager else CUDA_GRAPH_GIB,
        budget_gib=budget / GIB,
        kv_bytes_per_token=kvb,
        kv_cache_gib=kv / GIB,
        kv_capacity_blocks=blocks,
        kv_capacity_tokens=blocks * block_size,
        max_model_len=mml,
        fits=short <= 0,
        cpu_offload_gb_needed=math.ceil(max(0.0, short) / GIB * 10) / 10,
        starts=blocks * block_size >= mml,
    )
