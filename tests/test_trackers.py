"""The measurements around a generation, one tracker each (run/trackers.py), with stand-in NVML,
clocks and /proc (no GPU here): the figure each gives, what it gives when the machine cannot tell,
and, through a fake engine, which window each covers in the loop."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from click.testing import CliRunner

from runner.base import noise, nvml
from runner.cli import cli
from runner.engines.fake import FakeEngine
from runner.results import Noise, Repeat, Timings
from runner.run import trackers
from runner.run.trackers import Energy, GpuBusy, Latency, MachineNoise, parts, timed


def clock(monkeypatch, module, *ticks: float) -> None:
    """`module`'s time.perf_counter() returns `ticks` in turn."""
    it = iter(ticks)
    monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=lambda: next(it)))


class FakeEnergyNVML:
    """NVML's total-energy counters (millijoules), one list of readings a device index."""

    def __init__(self, readings: dict[int, list[float]]):
        self.readings, self.calls = {i: iter(r) for i, r in readings.items()}, 0

    def handle(self, index: int = 0):
        return (self, index) if index in self.readings else (None, None)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.calls += 1
        r = next(self.readings[h])
        if isinstance(r, Exception):
            raise r
        return r


def fake_energy(monkeypatch, readings: dict[int, list]) -> FakeEnergyNVML:
    nv = FakeEnergyNVML(readings)
    monkeypatch.setattr(nvml, "_handle", nv.handle)
    return nv


def measure(tracker):
    with tracker:
        pass
    return tracker.part()


# --- energy ---


def test_energy_is_the_counter_after_minus_before_over_its_window(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_energy(monkeypatch, {0: [100_000, 130_000]})  # 100 J, then 130 J
    clock(monkeypatch, trackers, 5.0, 7.5)
    assert measure(Energy(gpus=1)) == {"energy_j": 30.0, "energy_s": 2.5}


def test_energy_sums_the_engines_gpus_as_cuda_visible_devices_names_them(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    # 0 is not the engine's
    fake_energy(monkeypatch, {3: [100_000, 130_000], 5: [50_000, 60_000], 0: [0, 999_000]})
    clock(monkeypatch, trackers, 1.0, 2.0)
    assert measure(Energy(gpus=2)) == {"energy_j": 40.0, "energy_s": 1.0}


def test_energy_without_a_counter_leaves_the_repeats_fields_null(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = fake_energy(monkeypatch, {0: [100_000, 130_000]})
    assert measure(Energy(gpus=0)) == {} and nv.calls == 0  # a CPU engine: nothing read
    fake_energy(monkeypatch, {})  # no NVML
    assert measure(Energy(gpus=1)) == {}
    nv = fake_energy(monkeypatch, {0: [RuntimeError("NVML_ERROR_NOT_SUPPORTED")]})  # before Volta
    assert measure(Energy(gpus=1)) == {} and nv.calls == 1  # not read again after the generation
    fake_energy(monkeypatch, {0: [100_000, RuntimeError("GPU is lost")]})
    part = measure(Energy(gpus=1))
    assert part == {} and Repeat(index=1, generate_s=1.0, **part).energy_j is None


# --- latency and GPU busy ---


def sink(reused_s: float = 0.0):
    return SimpleNamespace(clock=0.0, new={}, reused_s=reused_s)


def test_generation_time_ends_with_the_last_output_not_when_generate_returns(monkeypatch):
    s = sink(reused_s=4.0)
    clock(monkeypatch, trackers, 10.0, 13.0)
    with Latency(s) as latency:
        assert s.clock == 10.0  # the per-example clock starts with the window
        # the last output came back at 12.5; generate returned at 13
        s.clock, s.new = 12.5, {"a": object()}
    assert latency.part() == {"generate_s": 2.5 + 4.0}  # with the reused samples' recorded 4 s


def test_generation_time_without_outputs_runs_until_generate_returns(monkeypatch):
    clock(monkeypatch, trackers, 10.0, 13.0)
    assert measure(Latency(sink())) == {"generate_s": 3.0}


def test_gpu_busy_is_the_utilization_over_the_generation_time(monkeypatch):
    sampler = nvml.PeakSampler()
    for k in range(200):  # every 20 ms from 10.0 s: 60% until the last output (12.49 s), idle after
        sampler.record(10.0 + k / 50, 60.0 if k < 125 else 0.0)
    s = sink()
    clock(monkeypatch, trackers, 9.99, 13.9)
    latency = Latency(s)
    busy = GpuBusy(sampler, latency)
    with latency, busy:
        s.clock, s.new = 12.49, {"a": object()}
    assert busy.into == "timings" and busy.part() == {
        "gpu_busy": 0.6,
        "gpu_busy_tenths": [0.6] * 10,
    }
    sampler.has_counter = False  # a device without the utilization counter
    assert busy.part() == {"gpu_busy": None, "gpu_busy_tenths": None}


# --- noise ---


def quiet_machine(monkeypatch, tmp_path) -> None:
    """No NVML, no PSI, no load average: every probe but the process's own CPU time unavailable."""
    monkeypatch.setattr(nvml, "_handle", lambda index=0: (None, None))
    monkeypatch.setattr(noise, "PRESSURE", tmp_path / "no-psi")
    monkeypatch.setattr(
        noise.os, "getloadavg", lambda: (_ for _ in ()).throw(OSError("no loadavg"))
    )
    monkeypatch.setattr(noise, "cpus", lambda: 2)


def test_noise_when_the_machine_cannot_tell_is_null_and_not_busy(monkeypatch, tmp_path):
    quiet_machine(monkeypatch, tmp_path)
    n = measure(MachineNoise())["noise"]
    assert n.model_dump(exclude={"process_cpu_s"}) == Noise(cpus=2).model_dump(
        exclude={"process_cpu_s"}
    )
    assert (
        n.load_avg is n.cpu_pressure is n.gpu_other_processes is n.gpu_sm_clock_mhz is None
        and n.busy == []
    )


def test_noise_names_the_load_and_the_cpu_pressure_of_its_window(monkeypatch, tmp_path):
    quiet_machine(monkeypatch, tmp_path)
    psi = tmp_path / "psi"
    monkeypatch.setattr(noise, "PRESSURE", psi)
    monkeypatch.setattr(noise.os, "getloadavg", lambda: (9.0, 1.0, 1.0))
    clock(monkeypatch, noise, 100.0, 102.0)
    tracker = MachineNoise()
    psi.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n")
    with tracker:
        # 0.7 s waited in 2 s
        psi.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1700000\n")
    n = tracker.part()["noise"]
    assert n.load_avg == 9.0 and n.cpu_pressure == 0.35
    assert n.busy == ["load average 9.0 on 2 CPUs", "tasks waited for a CPU 35% of the time"]


# --- the parts together, and the windows in the loop ---


def test_each_part_lands_in_the_repeat_or_the_timings(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_energy(monkeypatch, {0: [100_000, 130_000]})
    s = sink()
    ts = [MachineNoise(), *timed(1, s, nvml.PeakSampler())]
    for t in ts:
        t.start()
    s.clock, s.new = time.perf_counter(), {"a": object()}
    for t in reversed(ts):
        t.stop()
    repeat, timings = parts(ts)
    assert (
        set(repeat) == {"noise", "energy_j", "energy_s", "generate_s"}
        and repeat["energy_j"] == 30.0
    )
    assert set(timings) == {"gpu_busy", "gpu_busy_tenths"}
    Repeat(index=1, **repeat), Timings(**timings)  # fields of theirs (extra fields are refused)


def test_the_engines_setup_is_outside_the_timed_window_and_inside_the_noise_one(
    tmp_path, write_recipe, base_recipe, monkeypatch
):
    """prepare(sampling) burns 0.3 s of CPU: not in the generation time nor the energy window, but
    in the process CPU time the noise probe counts; the energy counter is read after it."""
    events = []

    def prepare(self, sampling):
        events.append("prepare")
        c0 = time.process_time()
        while time.process_time() - c0 < 0.3:
            pass

    readings = iter([100.0, 130.0])

    def energy(indices):
        events.append("energy")
        return next(readings)

    monkeypatch.setattr(FakeEngine, "prepare", prepare, raising=False)
    monkeypatch.setattr(trackers, "energy_j", energy)
    d = {
        **base_recipe,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "x", "delay_s": 0.001},
    }
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli, ["go", str(write_recipe(d)), "--out", str(out), "--no-progress", "--in-process"]
    )
    assert r.exit_code == 0, r.output
    [rep] = [json.loads(x) for x in (out / "t" / "repeats.jsonl").read_text().splitlines()[1:]]
    assert events == ["prepare", "energy", "energy"]
    assert rep["energy_j"] == 30.0
    # the repeat's wall time has the setup, the timed windows do not (a loaded machine only widens
    # the gap)
    assert rep["wall_s"] - rep["generate_s"] >= 0.3 and rep["wall_s"] - rep["energy_s"] >= 0.3
    assert rep["noise"]["process_cpu_s"] >= 0.3
