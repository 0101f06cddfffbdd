"""Whole-device GPU memory through NVML (counts every process, the engine core too).
Optional: without nvidia-ml-py or a GPU every function returns None."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from array import array
from bisect import bisect_left, bisect_right


def _handle(index: int = 0):
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no library, no driver, no device: memory is simply not known
        return None, None


def has_cuda_device() -> bool:
    """An NVIDIA GPU is present (NVML sees one, or the driver's device node exists); no torch
    needed."""
    return (
        _handle()[1] is not None
        or os.path.exists("/dev/nvidia0")
        or os.path.isdir("/proc/driver/nvidia/gpus")
    )


def used_gib() -> float | None:
    nv, h = _handle()
    return None if h is None else nv.nvmlDeviceGetMemoryInfo(h).used / 2**30


def device_facts() -> dict:
    nv, h = _handle()
    if h is None:
        return {}
    text = lambda x: x.decode() if isinstance(x, bytes) else x
    facts = {"gpu": text(nv.nvmlDeviceGetName(h)), "driver": text(nv.nvmlSystemGetDriverVersion())}
    facts["gpu_memory_gib"] = round(nv.nvmlDeviceGetMemoryInfo(h).total / 2**30, 1)
    with contextlib.suppress(Exception):
        v = nv.nvmlSystemGetCudaDriverVersion()
        facts["cuda_driver"] = f"{v // 1000}.{(v % 1000) // 10}"
    return facts


class PeakSampler:
    """Samples whole-device used memory (its peak) and NVML's utilization counter every `interval`
    seconds in a thread; `busy_share(t0, t1)` is the mean utilization over a window of
    time.perf_counter(). The utilization samples are kept as two arrays of doubles (16 bytes a
    sample: ~1 MB an hour)."""

    def __init__(self, interval: float = 0.05):
        self.nv, self.h = _handle()
        self.interval, self.peak, self.start_gib = interval, None, None
        self.has_counter = True  # False once the device refuses the utilization counter
        self._times, self._utils = array("d"), array("d")  # time.perf_counter(), utilization %
        self._stop, self._t = threading.Event(), None

    def _read(self) -> float:
        return self.nv.nvmlDeviceGetMemoryInfo(self.h).used / 2**30

    def record(self, t: float, util: float) -> None:
        """One utilization sample (%), taken at time.perf_counter() `t`, later than every earlier
        one."""
        self._utils.append(util)  # first, so a reader never finds a time without its value
        self._times.append(t)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._read())
            if self.has_counter:
                try:
                    self.record(
                        time.perf_counter(),
                        float(self.nv.nvmlDeviceGetUtilizationRates(self.h).gpu),
                    )
                # a device without the counter: no busy share, the peak still counts
                except Exception:
                    self.has_counter = False

    def __enter__(self) -> PeakSampler:
        if self.h is not None:
            self.start_gib = self.peak = self._read()
            self._t = threading.Thread(target=self._loop, daemon=True)
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._t and not self._stop.is_set():
            self._stop.set()
            self._t.join()
            self.peak = max(self.peak, self._read())

    def busy_share(self, t0: float, t1: float, min_samples: int = 3) -> float | None:
        """Mean utilization (0..1) of the samples taken between t0 and t1; None with fewer than
        `min_samples` (a window too short to say) or without the counter."""
        parts = self.busy_parts(t0, t1, 1, min_samples)
        return parts[0] if parts else None

    def busy_parts(
        self, t0: float, t1: float, parts: int = 10, min_samples: int = 3
    ) -> list[float] | None:
        """The mean utilization (0..1) of each of `parts` equal slices of [t0, t1] (where in the run
        the GPU waited); a sample on a boundary counts in the later slice. None unless every slice
        has `min_samples` samples."""
        if t1 <= t0 or not self.has_counter:
            return None
        step, times = (t1 - t0) / parts, self._times
        edges = [bisect_left(times, t0 + k * step) for k in range(parts)] + [
            bisect_right(times, t1)
        ]
        spans = list(zip(edges, edges[1:]))
        if any(b - a < min_samples for a, b in spans):
            return None
        return [round(sum(self._utils[a:b]) / (b - a) / 100, 3) for a, b in spans]


def wait_for_release(baseline_gib: float | None) -> float | None:
    """Wait (60 s at most) until the device's used memory is back within 1 GiB of `baseline_gib`;
    return the last reading."""
    if baseline_gib is None:
        return None
    deadline = time.monotonic() + 60
    now = used_gib()
    while now is not None and now > baseline_gib + 1.0 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = used_gib()
    return now


def gpu_processes() -> list[int] | None:
    """PIDs of the processes using the GPU (compute and graphics), as NVML lists them; None without
    NVML."""
    nv, h = _handle()
    if h is None:
        return None
    pids: set[int] = set()
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        with contextlib.suppress(Exception):
            pids |= {p.pid for p in getattr(nv, fn)(h)}
    return sorted(pids)


def sm_clocks() -> tuple[int, int] | None:
    """(the SM clock now, its maximum) in MHz; None without NVML."""
    nv, h = _handle()
    with contextlib.suppress(Exception):  # without NVML, nv is None: an AttributeError
        sm = nv.NVML_CLOCK_SM
        return int(nv.nvmlDeviceGetClockInfo(h, sm)), int(nv.nvmlDeviceGetMaxClockInfo(h, sm))
    return None


def gpu_indices(n: int) -> list[int]:
    """NVML indices of the first `n` GPUs this process sees (CUDA_VISIBLE_DEVICES, where it lists
    numbers, maps them; NVML counts every device of the host)."""
    seen = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    if seen and all(x.isdigit() for x in seen):
        return [int(x) for x in seen[:n]]
    return list(range(n))


def energy_j(indices: list[int]) -> float | None:
    """The sum of NVML's total-energy counters of these devices (joules since the driver loaded,
    whole device: every process on it counts); None without NVML, or where a device has no such
    counter (before Volta)."""
    if not indices:
        return None
    try:  # without NVML, nv is None: an AttributeError
        # millijoules
        return sum(
            nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000 for nv, h in map(_handle, indices)
        )
    except Exception:
        return None
