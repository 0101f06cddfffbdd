"""GPU busy: NVML's utilization counter sampled during generation, with a stand-in NVML (no GPU
here)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from runner.base import nvml as gpumem
from runner.cli import cli


class FakeNVML:
    """The two NVML calls the sampler makes; utilization follows `util` (a number or a callable)."""

    def __init__(self, util=40.0, used_gib=1.0):
        self.util, self.used_gib = util, used_gib

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=int(self.used_gib * 2**30), total=int(80 * 2**30))

    def nvmlDeviceGetUtilizationRates(self, h):
        if isinstance(self.util, Exception):
            raise self.util
        return SimpleNamespace(gpu=self.util() if callable(self.util) else self.util, memory=0)


_SAMPLER = gpumem.PeakSampler  # the class (tests replace the module's name with a factory)


def sampler(nv: FakeNVML, interval: float = 0.005) -> gpumem.PeakSampler:
    s = _SAMPLER(interval=interval)
    s.nv, s.h = nv, "handle"
    return s


def test_busy_share_is_the_mean_of_the_samples_inside_the_window():
    s = sampler(FakeNVML())
    for t, u in [(1.0, 100.0), (2.0, 50.0), (3.0, 0.0), (4.0, 30.0), (5.0, 100.0)]:
        s.record(t, u)
    assert s.busy_share(2.0, 4.0) == pytest.approx(80 / 3 / 100, abs=1e-3)  # 50, 0, 30
    assert s.busy_share(1.0, 5.0) == 0.56
    assert s.busy_share(2.5, 4.5) is None  # two samples: too short a window to say
    assert s.busy_share(2.5, 4.5, min_samples=2) == 0.15


def test_busy_parts_show_where_in_the_window_the_gpu_waited():
    s = sampler(FakeNVML())
    # 0..10 s, a sample every 0.1 s: idle for the first 2 s, then busy, half busy in the last second
    for i in range(100):
        s.record(i / 10, 0.0 if i < 20 else 50.0 if i >= 90 else 100.0)
    parts = s.busy_parts(0.0, 10.0)
    assert parts is not None and len(parts) == 10
    assert parts[:2] == [0.0, 0.0] and parts[2:9] == [1.0] * 7 and parts[9] == 0.5
    assert s.busy_parts(0.0, 0.5) is None  # tenths of 50 ms: too few samples each


def test_the_sampler_thread_records_utilization_and_the_peak():
    level = {"u": 20.0}
    nv = FakeNVML(util=lambda: level["u"])
    with sampler(nv) as s:
        t0 = time.perf_counter()
        time.sleep(0.1)
        t1 = time.perf_counter()
        level["u"] = 90.0
        nv.used_gib = 5.0
        time.sleep(0.1)
        t2 = time.perf_counter()
    assert s.busy_share(t0, t1) == pytest.approx(0.2, abs=0.01)
    assert s.busy_share(t1 + 0.02, t2) == pytest.approx(0.9, abs=0.01)
    assert s.peak == 5.0 and s.start_gib == 1.0


def test_a_device_without_the_counter_has_no_busy_share_but_keeps_its_peak():
    nv = FakeNVML(util=RuntimeError("NVML_ERROR_NOT_SUPPORTED"), used_gib=2.0)
    with sampler(nv) as s:
        time.sleep(0.05)
        nv.used_gib = 3.0
        time.sleep(0.05)
    assert s.has_counter is False and s.busy_share(0, time.perf_counter()) is None and s.peak == 3.0


def test_a_run_records_gpu_busy_in_results_and_report(
    write_recipe, base_recipe, tmp_path, monkeypatch
):
    from runner.run import loop as run

    monkeypatch.setattr(run, "PeakSampler", lambda: sampler(FakeNVML(util=65.0)))
    d = {
        **base_recipe,
        "model": {"id": "none"},
        "engine": {"kind": "fake", "reply": "{{ answers[0] }}", "delay_s": 0.03},
    }
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli, ["go", str(write_recipe(d)), "--out", str(out), "--no-progress", "--in-process"]
    )
    assert r.exit_code == 0, r.output
    res = json.loads((out / "t" / "results.json").read_text())
    assert res["timings"]["gpu_busy"] == 0.65
    tenths = res["timings"]["gpu_busy_tenths"]
    assert tenths == [0.65] * 10  # 36 requests x 30 ms: a tenth lasts ~100 ms, ~20 samples at 5 ms
    report = (out / "t" / "report.md").read_text()
    assert "| GPU busy" in report and "65%" in report and "NVML's utilization counter" in report
    assert (
        "By tenth of the generation time: "
        + " ".join(["65%"] * 10)
        + " (NVML averages over its own"
        in report
    )


def test_without_a_gpu_there_is_no_busy_figure(write_recipe, base_recipe, tmp_path, monkeypatch):
    from runner.run import loop as run

    monkeypatch.setattr(gpumem, "_handle", lambda index=0: (None, None))
    monkeypatch.setattr(run, "PeakSampler", lambda: _SAMPLER())
    d = {**base_recipe, "model": {"id": "none"}, "engine": {"kind": "fake", "reply": "x"}}
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli, ["go", str(write_recipe(d)), "--out", str(out), "--no-progress", "--in-process"]
    )
    assert r.exit_code == 0, r.output
    timings = json.loads((out / "t" / "results.json").read_text())["timings"]
    assert timings["gpu_busy"] is None and timings["gpu_busy_tenths"] is None
    assert "GPU busy" not in (out / "t" / "report.md").read_text()


@pytest.mark.slow
def test_a_serving_run_records_gpu_busy_per_rate(tmp_path, monkeypatch, vllm_client_dir):
    import yaml

    from runner.results import RunResult
    from runner.serve import run as serve_run
    from tests.test_serving import recipe

    monkeypatch.syspath_prepend(str(vllm_client_dir))
    monkeypatch.setattr(serve_run, "PeakSampler", lambda: sampler(FakeNVML(util=30.0)))
    d = recipe("busy", load={"request_rate": [20, "inf"], "num_requests": 6, "warmup_requests": 1})
    path = tmp_path / "busy.yaml"
    path.write_text(yaml.safe_dump(d, allow_unicode=True), encoding="utf-8")
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli, ["go", str(path), "--out", str(out), "--no-progress", "--in-process"]
    )
    assert r.exit_code == 0, r.output
    res = RunResult.model_validate_json((out / "busy" / "results.json").read_bytes())
    assert [p.gpu_busy for p in res.serving.rates] == [0.3, 0.3]
    assert res.timings.gpu_busy == 0.3  # the headline rate's
    report = (out / "busy" / "report.md").read_text()
    assert "GPU busy" in report and "| 30%" in report
