"""The time no engine can beat: FLOPs at the GPU's peak, bytes at its bandwidth.

Notation: P = decoder-layer matmul weights (``ParamCount.linear``), H hidden, V vocab, L layers, nh
attention heads, d head dim; per request i: n_i prompt tokens, c_i of them served from the prefix
cache, m output tokens (every request is assumed to produce ``max_tokens``, as with ``ignore_eos``);
R requests; B the batch (sequences decoded together); W weight bytes on the GPU; kvb KV bytes per
token; T max_num_batched_tokens.

FLOPs (a multiply-add = 2 FLOPs; embedding lookups, norms, activations and softmax are left out):
  matmuls: 2P per token computed; logits 2HV per forward position that is sampled (vLLM computes
  logits only
    for the last prompt position and for each decode step).
  attention (causal, only the pairs computed): a token at 0-based position p attends to p + 1 keys,
    QK^T and AV = 4 * L * nh * d * (p + 1) FLOPs.
  prefill_i = 2P (n_i - c_i) + 2HV + 4 L nh d [n_i (n_i + 1) - c_i (c_i + 1)] / 2
  decode_i  = (m - 1) (2P + 2HV) + 4 L nh d [(m - 1) n_i + (m - 1) m / 2]
    (the first output token comes from the prefill; decode step j = 1..m-1 attends to n_i + j keys)
  compute_s = (sum of prefill_i + decode_i) / peak; peak = the GPU's dense fp8 peak for fp8 (W8A8)
  weights
    where the GPU has fp8 tensor cores, half the bf16 peak for float32 (TF32), else the bf16 peak
    (AWQ, GPTQ and bitsandbytes dequantize to 16-bit for the matmul).

Bytes (memory_s, a lower bound for any schedule that keeps at most B sequences in flight):
  decode steps S = ceil(R / B) * (m - 1); every step reads all GPU weights once; every decode token
  reads the KV of its context: memory_s = [S * W + kvb * sum_i ((m - 1) n_i + (m - 1) m / 2)] /
  bandwidth. (Prefill steps, ceil(sum (n_i - c_i) / T), also read W once each; that is added to
  memory_s too.)
With ``cpu_offload_gb``: each forward pass (prefill and decode steps) brings the offloaded bytes
over PCIe:
  pcie_s = (S + prefill steps) * offloaded bytes / PCIe bandwidth. A loose floor: vLLM's UVA offload
  reads host memory inside the matmul kernels, which re-read weights per tile (measured on the H200:
  ~1,200 tokens/s with 8 GiB offloaded, far below this floor's rate).
floor_s = max(compute_s, memory_s, pcie_s); bound = the name of the largest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from runner.base.types import StrictModel

from .memory import GIB, MemoryPlan, count_parameters, model_shape

CUDA_RESERVED_MIB = 616  # NVML total minus CUDA's total, measured on the H200 (see GPU's docstring)


@dataclass(frozen=True)
class GPU:
    """One GPU model of the table below: memory, bandwidth and dense tensor-core peaks, each with
    its datasheet.

    Peaks are DENSE (the datasheets' headline figures with an asterisk are 2:4 sparsity, twice
    these). bf16 is with FP32 accumulation (what inference kernels use); fp8 likewise (on GeForce
    cards FP16 accumulation doubles the figure, kernels do not use it). ``memory_gib`` is what the
    CUDA runtime reports as total, the figure vLLM's ``gpu_memory_utilization`` multiplies: on the
    H200 used by this project NVML reports 143,771 MiB (140.4 GiB) and CUDA 150,109,880,320 bytes
    (139.8 GiB), a gap of 616 MiB; the other rows are nvidia-smi's usual total less that same 616
    MiB (not measured here)."""

    name: str  # Display name.
    memory_gib: float  # Total memory as the CUDA runtime reports it, GiB.
    bandwidth_gbs: float | None  # Memory bandwidth, GB/s (10^9 bytes/s).
    bf16_tflops: float | None  # Dense bf16/fp16 tensor peak (FP32 accumulate), TFLOP/s.
    fp8_tflops: float | None  # Dense fp8 tensor peak, TFLOP/s; None = no fp8 tensor cores.
    pcie_gbs: float | None  # Host link bandwidth per direction, GB/s (PCIe x16).
    source: str  # Where the figures come from.


def _gib(nvml_mib: float) -> float:
    return round((nvml_mib - CUDA_RESERVED_MIB) / 1024, 2)


_DC = "https://www.nvidia.com/en-us/data-center/"
_ADA = (
    "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf "
    "(Appendix A)"
)
_RTX = "; https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/"
# GPU's fields in order, memory as NVML's total MiB: name, MiB, GB/s, bf16 and fp8 TFLOP/s, PCIe
# GB/s, source; then its exact NVML device name (lower case; other variants, H100 PCIe/NVL, H200
# NVL, A100 40GB or PCIe, have other peaks or bandwidth and are left unmatched on purpose), then its
# aliases (normalized: lower case, letters and digits only), which include the table name's and the
# NVML name's normalized forms
_ROWS = (
    ("H100 SXM", 81559, 3350, 989.5, 1979, 64, _DC + "h100/ (H100 SXM column)")
    + ("nvidia h100 80gb hbm3", "h100 h100sxm h100sxm5 h10080gbhbm3"),
    ("H200", 143771, 4800, 989.5, 1979, 64, _DC + "h200/ (H200 SXM column); memory measured")
    + ("nvidia h200", "h200 h200sxm h200141gb"),
    ("A100-80G", 81920, 2039, 312, None, 32, _DC + "a100/ (A100 80GB SXM column)")
    + ("nvidia a100-sxm4-80gb", "a100 a10080g a10080gb a100sxm480gb a100sxm80gb"),
    ("L40S", 46068, 864, 362.05, 733, 32, _DC + "l40s/", "nvidia l40s", "l40s"),
    ("L4", 23034, 300, 121, 242, 32, _DC + "l4/", "nvidia l4", "l4"),
    ("RTX 4090", 24564, 1008, 165.2, 330.3, 32, _ADA + _RTX)
    + ("nvidia geforce rtx 4090", "rtx4090 4090 geforcertx4090"),
)
GPUS: dict[str, GPU] = {r[0]: GPU(r[0], _gib(r[1]), *r[2:7]) for r in _ROWS}
_NVML_NAMES = {r[7]: r[0] for r in _ROWS}
_ALIASES = {a: r[0] for r in _ROWS for a in r[8].split()}


def find_gpu(name: str) -> GPU | None:
    """The table's entry for a name or alias, case and punctuation ignored ("h200", "NVIDIA H200",
    "a100-80g")."""
    hit = _ALIASES.get(re.sub(r"[^a-z0-9]", "", name.lower()).removeprefix("nvidia"))
    return GPUS[hit] if hit else None


def get_gpu(name: str) -> GPU:
    if (g := find_gpu(name)) is None:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return g


def gpu_from_nvml() -> GPU | None:
    """The local GPU from NVML: its name and total memory, the table's peaks when its name matches
    exactly. None without ``pynvml``, a driver or a device."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        raw = pynvml.nvmlDeviceGetName(h)
        total = pynvml.nvmlDeviceGetMemoryInfo(h).total
    except Exception:  # noqa: BLE001  no library, no driver, no device: the GPU is simply not known
        return None
    name, memory_gib = raw.decode() if isinstance(raw, bytes) else str(raw), _gib(total / 2**20)
    if known := _NVML_NAMES.get(name.strip().lower()):
        return replace(GPUS[known], memory_gib=memory_gib)
    return GPU(name, memory_gib, None, None, None, None, "NVML (not in the table: no peaks known)")


class Floor(StrictModel):
    """Lower bounds on the generation time of a workload on one GPU."""

    prefill_flops: float  # FLOPs of the uncached prefill.
    decode_flops: float  # FLOPs of the decode steps.
    peak_tflops: float  # Peak used, TFLOP/s (dense, for the compute dtype).
    compute_s: float  # (prefill_flops + decode_flops) / peak.
    prefill_steps: int  # Prefill forward passes: ceil(uncached tokens / max_num_batched_tokens).
    decode_steps: int  # Decode forward passes: ceil(requests / batch) * (max_tokens - 1).
    weight_read_bytes: float  # Weights read: (prefill + decode steps) * weight bytes on GPU.
    kv_read_bytes: float  # KV read by the decode steps.
    memory_s: float | None  # (weight + KV reads) / bandwidth; None if bandwidth unknown.
    pcie_s: float  # Offloaded weights over PCIe per forward pass; 0 without offload.
    floor_s: float  # max(compute_s, memory_s, pcie_s).
    bound: str  # Which of them sets the floor: compute, memory or pcie.
    batch: int  # Sequences decoded together (B).


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
    att, logits, m1 = (
        4 * s.layers * s.heads * s.head_dim,
        2 * s.hidden * s.vocab,
        max(0, max_tokens - 1),
    )
    prefill = decode = 0.0
    for n, c in zip(prompt_lens, cached, strict=True):
        prefill += 2 * p.linear * (n - c) + logits + att * (n * (n + 1) - c * (c + 1)) / 2
        decode += m1 * (2 * p.linear + logits) + att * (m1 * n + m1 * max_tokens / 2)
    return prefill, decode


@dataclass(frozen=True)
class Workload:
    """What the GPU computes: prompt lengths in tokens, of them served from the prefix cache (empty:
    none), output tokens per request, sequences decoded together and tokens per prefill step
    (max_num_batched_tokens)."""

    prompt_lens: Sequence[int]
    cached: Sequence[int]
    max_tokens: int
    batch: int
    max_num_batched_tokens: int


def compute_floor(
    config: Mapping[str, Any],
    work: Workload,
    gpu: GPU,
    mem: MemoryPlan,
) -> Floor | None:
    """The floor for the workload, the weights and KV bytes as ``mem`` plans them; None when the
    GPU's peak is unknown (a GPU outside the table)."""
    peak = peak_tflops(gpu, mem.quantization, mem.dtype)
    if peak is None:
        return None
    lens, m = work.prompt_lens, work.max_tokens
    cached = work.cached or [0] * len(lens)
    m1 = max(0, m - 1)
    prefill, decode = workload_flops(config, lens, cached, m)
    compute_s = (prefill + decode) / (peak * 1e12)
    uncached = sum(lens) - sum(cached)
    pre_steps = math.ceil(uncached / work.max_num_batched_tokens) if uncached > 0 else 0
    dec_steps = math.ceil(len(lens) / work.batch) * m1
    steps = pre_steps + dec_steps
    weights_read = steps * (mem.weights_gpu_gib * GIB)
    kv_read = mem.kv_bytes_per_token * sum(m1 * n + m1 * m / 2 for n in lens)
    memory_s = (weights_read + kv_read) / (gpu.bandwidth_gbs * 1e9) if gpu.bandwidth_gbs else None
    offload = (mem.weights_gib - mem.weights_gpu_gib) * GIB
    pcie_s = steps * offload / (gpu.pcie_gbs * 1e9) if offload > 0 and gpu.pcie_gbs else 0.0
    bounds = {"compute": compute_s, "memory": memory_s or 0.0, "pcie": pcie_s}
    bound = max(bounds, key=bounds.get)
    return Floor(
        prefill_flops=prefill,
        decode_flops=decode,
        peak_tflops=peak,
        compute_s=compute_s,
        prefill_steps=pre_steps,
        decode_steps=dec_steps,
        weight_read_bytes=weights_read,
        kv_read_bytes=kv_read,
        memory_s=memory_s,
        pcie_s=pcie_s,
        floor_s=bounds[bound],
        bound=bound,
        batch=work.batch,
    )
