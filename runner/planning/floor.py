"""The time no engine can beat: FLOPs at the GPU's peak, bytes at its bandwidth.

Notation: P = decoder-layer matmul weights (``ParamCount.linear``), H hidden, V vocab, L layers, nh attention
heads, d head dim; per request i: n_i prompt tokens, c_i of them served from the prefix cache, m output tokens
(every request is assumed to produce ``max_tokens``, as with ``ignore_eos``); R requests; B the batch (sequences
decoded together); W weight bytes on the GPU; kvb KV bytes per token; T max_num_batched_tokens.

FLOPs (a multiply-add = 2 FLOPs; embedding lookups, norms, activations and softmax are left out):
  matmuls: 2P per token computed; logits 2HV per forward position that is sampled (vLLM computes logits only
    for the last prompt position and for each decode step).
  attention (causal, only the pairs computed): a token at 0-based position p attends to p + 1 keys,
    QK^T and AV = 4 * L * nh * d * (p + 1) FLOPs.
  prefill_i = 2P (n_i - c_i) + 2HV + 4 L nh d [n_i (n_i + 1) - c_i (c_i + 1)] / 2
  decode_i  = (m - 1) (2P + 2HV) + 4 L nh d [(m - 1) n_i + (m - 1) m / 2]
    (the first output token comes from the prefill; decode step j = 1..m-1 attends to n_i + j keys)
  compute_s = (sum of prefill_i + decode_i) / peak; peak = the GPU's dense fp8 peak for fp8 (W8A8) weights
    where the GPU has fp8 tensor cores, half the bf16 peak for float32 (TF32), else the bf16 peak (AWQ, GPTQ
    and bitsandbytes dequantize to 16-bit for the matmul).

Bytes (memory_s, a lower bound for any schedule that keeps at most B sequences in flight):
  decode steps S = ceil(R / B) * (m - 1); every step reads all GPU weights once; every decode token reads the
  KV of its context: memory_s = [S * W + kvb * sum_i ((m - 1) n_i + (m - 1) m / 2)] / bandwidth.
  (Prefill steps, ceil(sum (n_i - c_i) / T), also read W once each; that is added to memory_s too.)
With ``cpu_offload_gb``: each forward pass (prefill and decode steps) brings the offloaded bytes over PCIe:
  pcie_s = (S + prefill steps) * offloaded bytes / PCIe bandwidth. A loose floor: vLLM's UVA offload reads
  host memory inside the matmul kernels, which re-read weights per tile (measured on the H200: ~1,200 tokens/s
  with 8 GiB offloaded, far below this floor's rate).
floor_s = max(compute_s, memory_s, pcie_s); bound = the name of the largest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from ..strict import StrictModel
from .gpus import GPU
from .shape import count_parameters, model_shape


class Floor(StrictModel):
    """Lower bounds on the generation time of a workload on one GPU."""

    prefill_flops: float = Field(description="FLOPs of the uncached prefill.")
    decode_flops: float = Field(description="FLOPs of the decode steps.")
    peak_tflops: float = Field(description="Peak used, TFLOP/s (dense, for the compute dtype).")
    compute_s: float = Field(description="(prefill_flops + decode_flops) / peak.")
    prefill_steps: int = Field(description="Prefill forward passes: ceil(uncached tokens / max_num_batched_tokens).")
    decode_steps: int = Field(description="Decode forward passes: ceil(requests / batch) * (max_tokens - 1).")
    weight_read_bytes: float = Field(description="Weights read: (prefill + decode steps) * weight bytes on GPU.")
    kv_read_bytes: float = Field(description="KV read by the decode steps.")
    memory_s: float | None = Field(description="(weight + KV reads) / bandwidth; None if bandwidth unknown.")
    pcie_s: float = Field(description="Offloaded weights over PCIe per forward pass; 0 without offload.")
    floor_s: float = Field(description="max(compute_s, memory_s, pcie_s).")
    bound: str = Field(description="Which of them sets the floor: compute, memory or pcie.")
    batch: int = Field(description="Sequences decoded together (B).")


def peak_tflops(gpu: GPU, quantization: str, dtype: str) -> float | None:
    """The dense peak for the dtype the matmuls run in (see the module docstring)."""
    if gpu.bf16_tflops is None:
        return None
    if quantization == "fp8" and gpu.fp8_tflops is not None:
        return gpu.fp8_tflops
    if dtype in ("float32", "float") and quantization == "none":
        return gpu.bf16_tflops / 2
    return gpu.bf16_tflops


def workload_flops(
    config: Mapping[str, Any], prompt_lens: Sequence[int], cached: Sequence[int], max_tokens: int
) -> tuple[float, float]:
    """(prefill FLOPs, decode FLOPs) for the workload (formulas in the module docstring)."""
    s, p = model_shape(config), count_parameters(config)
    att = 4 * s.layers * s.heads * s.head_dim
    logits = 2 * s.hidden * s.vocab
    m1 = max(0, max_tokens - 1)
    prefill = decode = 0.0
    for n, c in zip(prompt_lens, cached, strict=True):
        prefill += 2 * p.linear * (n - c) + logits + att * (n * (n + 1) - c * (c + 1)) / 2
        decode += m1 * (2 * p.linear + logits) + att * (m1 * n + m1 * max_tokens / 2)
    return prefill, decode


def compute_floor(
    config: Mapping[str, Any],
    prompt_lens: Sequence[int],
    cached: Sequence[int] | None,
    max_tokens: int,
    *,
    gpu: GPU,
    quantization: str,
    dtype: str,
    weight_gpu_bytes: float,
    kv_bytes_per_token: int,
    batch: int,
    max_num_batched_tokens: int,
    offload_bytes: float = 0.0,
) -> Floor | None:
    """The floor for the workload; None when the GPU's peak is unknown (a GPU outside the table)."""
    peak = peak_tflops(gpu, quantization, dtype)
    if peak is None:
        return None
    cached = list(cached) if cached is not None else [0] * len(prompt_lens)
    r, m1 = len(prompt_lens), max(0, max_tokens - 1)
    b = max(1, min(batch, r)) if r else 1
    prefill, decode = workload_flops(config, prompt_lens, cached, max_tokens)
    compute_s = (prefill + decode) / (peak * 1e12)
    uncached = sum(prompt_lens) - sum(cached)
    prefill_steps = math.ceil(uncached / max_num_batched_tokens) if uncached > 0 else 0
    decode_steps = math.ceil(r / b) * m1
    weights_read = (prefill_steps + decode_steps) * weight_gpu_bytes
    kv_read = kv_bytes_per_token * sum(m1 * n + m1 * max_tokens / 2 for n in prompt_lens)
    memory_s = (weights_read + kv_read) / (gpu.bandwidth_gbs * 1e9) if gpu.bandwidth_gbs else None
    pcie_s = 0.0
    if offload_bytes > 0 and gpu.pcie_gbs:
        pcie_s = (prefill_steps + decode_steps) * offload_bytes / (gpu.pcie_gbs * 1e9)
    bounds = {"compute": compute_s, "memory": memory_s or 0.0, "pcie": pcie_s}
    bound = max(bounds, key=lambda k: bounds[k])
    return Floor(
        prefill_flops=prefill,
        decode_flops=decode,
        peak_tflops=peak,
        compute_s=compute_s,
        prefill_steps=prefill_steps,
        decode_steps=decode_steps,
        weight_read_bytes=weights_read,
        kv_read_bytes=kv_read,
        memory_s=memory_s,
        pcie_s=pcie_s,
        floor_s=bounds[bound],
        bound=bound,
        batch=b,
    )
