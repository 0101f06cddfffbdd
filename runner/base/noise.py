"""How busy the machine was while a run measured its time: load average, CPU pressure (Linux PSI),
the process's own CPU time, other processes on the GPU and the GPU's clocks. `Probe` is started
before a generation and stopped after it; `busy_reasons` says in words what would make the time move
(the clocks are recorded, not judged: read right after a generation they may already be falling).
Everything is optional: a fact this machine does not expose is None."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from runner.base.nvml import gpu_processes, sm_clocks

PRESSURE = Path("/proc/pressure/cpu")
# above these a timing is marked as taken on a busy machine
BUSY_LOAD_PER_CPU, BUSY_PRESSURE = 1.0, 0.10


def cpus() -> int:
    with contextlib.suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _pressure_us() -> int | None:
    """/proc/pressure/cpu's `some ... total=` (microseconds some task waited for a CPU), where the
    kernel has PSI."""
    try:
        some = PRESSURE.read_text().splitlines()[0].split()
        return int(next(f for f in some if f.startswith("total=")).split("=")[1])
    except (OSError, IndexError, StopIteration, ValueError):
        return None


def _cpu_s() -> float:
    """CPU time of this process and the children it has waited for, plus its live descendants where
    psutil can see them (the engine's own processes)."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    with contextlib.suppress(Exception):
        import psutil

        for c in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                ct = c.cpu_times()
                total += ct.user + ct.system
    return total


def peak_rss() -> float | None:
    """Peak resident memory (GiB) of this process or the children it has waited for, whichever is
    larger."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    kib = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    return round(kib / 2**20, 3)  # Linux reports KiB


def _ours(pid: int) -> bool | None:
    """The process is this run's (its process group), another's (False), or not visible from here
    (None)."""
    try:
        return os.getpgid(pid) == os.getpgrp() or pid == os.getpid()
    except (ProcessLookupError, PermissionError):
        return None


class Probe:
    """`start()` just before a generation, `stop()` just after it: `facts` are that window's (with
    `busy`)."""

    def start(self) -> None:
        self.t0, self.p0, self.c0 = time.perf_counter(), _pressure_us(), _cpu_s()

    def stop(self) -> None:
        wall = max(time.perf_counter() - self.t0, 1e-9)
        p1, pressure = _pressure_us(), None
        if p1 is not None and self.p0 is not None:
            pressure = round(min(max((p1 - self.p0) / 1e6 / wall, 0.0), 1.0), 3)
        try:
            load: float | None = round(os.getloadavg()[0], 2)
        except OSError:
            load = None
        facts = dict(
            load_avg=load,
            cpus=cpus(),
            cpu_pressure=pressure,
            process_cpu_s=round(_cpu_s() - self.c0, 2),
        )
        pids = gpu_processes()
        if pids is not None:
            seen = {p: _ours(p) for p in pids}
            # another PID namespace: cannot tell whose they are
            unknown = seen and all(v is None for v in seen.values())
            facts["gpu_other_processes"] = (
                None if unknown else sorted(p for p, v in seen.items() if v is False)
            )
        clocks = sm_clocks()
        if clocks is not None:
            facts["gpu_sm_clock_mhz"], facts["gpu_max_sm_clock_mhz"] = clocks
        self.facts = dict(facts, busy=busy_reasons(facts))


def busy_reasons(noise: dict) -> list[str]:
    """What in these facts would make a timing move, in words (empty: the machine looked quiet)."""
    out = []
    load, n = noise.get("load_avg"), noise.get("cpus") or 1
    if load is not None and load > BUSY_LOAD_PER_CPU * n:
        out.append(f"load average {load:.1f} on {n} CPUs")
    if (p := noise.get("cpu_pressure")) is not None and p > BUSY_PRESSURE:
        out.append(f"tasks waited for a CPU {p:.0%} of the time")
    if others := noise.get("gpu_other_processes"):
        out.append(
            f"{len(others)} other process(es) used the GPU (pid {', '.join(map(str, others[:5]))})"
        )
    return out
