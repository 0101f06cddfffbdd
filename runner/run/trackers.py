"""What is measured around one generation, a tracker each: started before it, stopped after it, then
`part()` gives the tracker's fields of the repeat (`Repeat`), or of the result's timings (`into =
"timings"`: the last generation's). `untimed` are entered before the engine's setup for the sampling
settings (`prepare`), `timed` after it, around the engine's `generate` alone. A new measurement is a
tracker here (listed in one of the two), its results field and its report section. A `Stage` times
a stage of the run's wall time."""

from __future__ import annotations

import time

from runner.base.noise import Probe
from runner.base.nvml import PeakSampler, energy_j, gpu_indices
from runner.results import Noise


class Tracker:
    """A context manager around its window (`start()`, `stop()`); `part()`, after every tracker has
    stopped, gives its fields of the repeat, or of the timings where `into` says so."""

    into = "repeat"

    def __enter__(self) -> Tracker:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class MachineNoise(Probe, Tracker):
    """How busy the machine was (base/noise.py: load, CPU pressure, CPU time, other GPU processes,
    clocks)."""

    def part(self) -> dict:
        return {"noise": Noise(**self.facts)}


class Energy(Tracker):
    """NVML's energy counters of the engine's GPUs, read just before the prompts go in and once they
    are all out; none without NVML or a counter (the repeat's fields stay null)."""

    def __init__(self, gpus: int):
        self.gpus = gpu_indices(gpus)

    def start(self) -> None:
        self.e0, self.t0 = energy_j(self.gpus), time.perf_counter()

    def stop(self) -> None:
        self.e1, self.t1 = None if self.e0 is None else energy_j(self.gpus), time.perf_counter()

    def part(self) -> dict:
        return (
            {}
            if self.e1 is None
            else {"energy_j": self.e1 - self.e0, "energy_s": self.t1 - self.t0}
        )


class Latency(Tracker):
    """Generation time: from the prompts going in (the sink's per-example clock starts then) until
    the last output is back (the sink's clock), as a plain generate() call would time it: what the
    engine does after handing over its last outputs counts in the repeat's wall time only. Samples
    reused from an interrupted run add their recorded time. The sink: `clock`, `new` (the samples it
    got) and `reused_s`."""

    def __init__(self, sink):
        self.sink = sink

    def start(self) -> None:
        self.t0 = self.sink.clock = time.perf_counter()

    def stop(self) -> None:
        self.t1 = self.sink.clock if self.sink.new else time.perf_counter()

    def part(self) -> dict:
        return {"generate_s": self.t1 - self.t0 + self.sink.reused_s}


class GpuBusy(Tracker):
    """NVML's utilization over the generation time (the engine's sampler, whole device)."""

    into = "timings"

    def __init__(self, sampler: PeakSampler, window: Latency):
        self.sampler, self.window = sampler, window

    def part(self) -> dict:
        t0, t1 = self.window.t0, self.window.t1
        return {
            "gpu_busy": self.sampler.busy_share(t0, t1),
            "gpu_busy_tenths": self.sampler.busy_parts(t0, t1),
        }


class Stage(Tracker):
    """A stage of the run's wall time: the seconds inside it added to `seconds[name]` (a Counter;
    see `Stages`)."""

    def __init__(self, seconds, name: str):
        self.seconds, self.name = seconds, name

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        self.seconds[self.name] += time.perf_counter() - self.t0


def untimed() -> list[Tracker]:
    """Around the engine's setup and the generation."""
    return [MachineNoise()]


def timed(gpus: int, sink, sampler: PeakSampler) -> list[Tracker]:
    """Around the engine's generate: the engine's GPUs, the sink it hands finished generations to,
    the sampler."""
    latency = Latency(sink)
    return [Energy(gpus), latency, GpuBusy(sampler, latency)]


def parts(trackers: list[Tracker]) -> tuple[dict, dict]:
    """The trackers' fields of the repeat and of the timings."""
    out: dict[str, dict] = {"repeat": {}, "timings": {}}
    for t in trackers:
        out[t.into].update(t.part())
    return out["repeat"], out["timings"]
