"""A small table of GPUs: memory, bandwidth and dense tensor-core peaks, each with its datasheet.

Peaks are DENSE (the datasheets' headline figures with an asterisk are 2:4 sparsity, twice these). bf16 is with
FP32 accumulation (what inference kernels use); fp8 likewise (on GeForce cards FP16 accumulation doubles the
figure, kernels do not use it). ``memory_gib`` is what the CUDA runtime reports as total, the figure vLLM's
``gpu_memory_utilization`` multiplies: on the H200 used by this project NVML reports 143,771 MiB (140.4 GiB) and
CUDA 150,109,880,320 bytes (139.8 GiB), a gap of 616 MiB; the other rows are nvidia-smi's usual total less that
same 616 MiB (not measured here). Bandwidth in GB/s (10^9 bytes/s), PCIe per direction in GB/s.

NVML is optional: ``gpu_from_nvml`` imports ``pynvml`` lazily and returns None without it or without a GPU.
"""

from __future__ import annotations

import re

from pydantic import Field

from ..strict import StrictModel

CUDA_RESERVED_MIB = 616  # NVML total minus CUDA's total, measured on the H200 (see module docstring)


class GPU(StrictModel):
    """One GPU model."""

    name: str = Field(description="Display name.")
    memory_gib: float = Field(description="Total memory as the CUDA runtime reports it, GiB.")
    bandwidth_gbs: float | None = Field(description="Memory bandwidth, GB/s (10^9 bytes/s).")
    bf16_tflops: float | None = Field(description="Dense bf16/fp16 tensor peak (FP32 accumulate), TFLOP/s.")
    fp8_tflops: float | None = Field(description="Dense fp8 tensor peak, TFLOP/s; None = no fp8 tensor cores.")
    pcie_gbs: float | None = Field(description="Host link bandwidth per direction, GB/s (PCIe x16).")
    source: str = Field(description="Where the figures come from.")


def _mib(nvml_mib: int) -> float:
    return round((nvml_mib - CUDA_RESERVED_MIB) / 1024, 2)


_ADA = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf (Appendix A)"

GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU(
            name="H100 SXM",
            memory_gib=_mib(81559),
            bandwidth_gbs=3350,
            bf16_tflops=989.5,
            fp8_tflops=1979,
            pcie_gbs=64,
            source="https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM column)",
        ),
        GPU(
            name="H200",
            memory_gib=_mib(143771),
            bandwidth_gbs=4800,
            bf16_tflops=989.5,
            fp8_tflops=1979,
            pcie_gbs=64,
            source="https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM column); memory measured",
        ),
        GPU(
            name="A100-80G",
            memory_gib=_mib(81920),
            bandwidth_gbs=2039,
            bf16_tflops=312,
            fp8_tflops=None,
            pcie_gbs=32,
            source="https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM column)",
        ),
        GPU(
            name="L40S",
            memory_gib=_mib(46068),
            bandwidth_gbs=864,
            bf16_tflops=362.05,
            fp8_tflops=733,
            pcie_gbs=32,
            source="https://www.nvidia.com/en-us/data-center/l40s/",
        ),
        GPU(
            name="L4",
            memory_gib=_mib(23034),
            bandwidth_gbs=300,
            bf16_tflops=121,
            fp8_tflops=242,
            pcie_gbs=32,
            source="https://www.nvidia.com/en-us/data-center/l4/",
        ),
        GPU(
            name="RTX 4090",
            memory_gib=_mib(24564),
            bandwidth_gbs=1008,
            bf16_tflops=165.2,
            fp8_tflops=330.3,
            pcie_gbs=32,
            source=_ADA + "; https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/",
        ),
    )
}

# normalized alias -> table name (normalized = lower case, letters and digits only)
_ALIASES = {
    "h100": "H100 SXM",
    "h100sxm": "H100 SXM",
    "h100sxm5": "H100 SXM",
    "h10080gbhbm3": "H100 SXM",
    "h200": "H200",
    "h200sxm": "H200",
    "h200141gb": "H200",
    "a100": "A100-80G",
    "a10080g": "A100-80G",
    "a10080gb": "A100-80G",
    "a100sxm480gb": "A100-80G",
    "a100sxm80gb": "A100-80G",
    "l40s": "L40S",
    "l4": "L4",
    "rtx4090": "RTX 4090",
    "4090": "RTX 4090",
    "geforcertx4090": "RTX 4090",
}

# exact NVML device names (lower case) of the table's models; other variants (H100 PCIe/NVL, H200 NVL,
# A100 40GB or PCIe) have other peaks or bandwidth and are left unmatched on purpose
_NVML_NAMES = {
    "nvidia h100 80gb hbm3": "H100 SXM",
    "nvidia h200": "H200",
    "nvidia a100-sxm4-80gb": "A100-80G",
    "nvidia l40s": "L40S",
    "nvidia l4": "L4",
    "nvidia geforce rtx 4090": "RTX 4090",
}


def _norm(name: str) -> str:
    s = re.sub(r"[^a-z0-9]", "", name.lower())
    return s.removeprefix("nvidia")


def find_gpu(name: str) -> GPU | None:
    """The table's entry for a name or alias, case and punctuation ignored ("h200", "NVIDIA H200", "a100-80g")."""
    key = _norm(name)
    for g in GPUS.values():
        if _norm(g.name) == key:
            return g
    hit = _ALIASES.get(key) or _NVML_NAMES.get(name.strip().lower())
    return GPUS[hit] if hit else None


def get_gpu(name: str) -> GPU:
    """Like ``find_gpu`` but an unknown name is an error listing the known ones."""
    g = find_gpu(name)
    if g is None:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return g


def gpu_from_nvml(index: int = 0) -> GPU | None:
    """The local GPU from NVML: its name and total memory, the table's peaks when its name matches exactly.
    None without ``pynvml``, a driver or a device."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        raw = pynvml.nvmlDeviceGetName(h)
        total = pynvml.nvmlDeviceGetMemoryInfo(h).total
    except Exception:  # noqa: BLE001  no library, no driver, no device: the GPU is simply not known
        return None
    name = raw.decode() if isinstance(raw, bytes) else str(raw)
    memory_gib = round((total / 2**20 - CUDA_RESERVED_MIB) / 1024, 2)
    known = _NVML_NAMES.get(name.strip().lower())
    if known:
        return GPUS[known].model_copy(update={"memory_gib": memory_gib})
    return GPU(
        name=name,
        memory_gib=memory_gib,
        bandwidth_gbs=None,
        bf16_tflops=None,
        fp8_tflops=None,
        pcie_gbs=None,
        source="NVML (not in the table: no peaks known)",
    )
