"""benchmarks/core_sampler.py: the engine core's phase from a real stack, the sampler thread's lines, and
the summary over a round's window."""

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "core_sampler.py"
_spec = importlib.util.spec_from_file_location("core_sampler", _PATH)
cs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cs)


def schedule(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(200))


def step_with_batch_queue(seconds: float) -> None:
    schedule(seconds)


def run_busy_loop(seconds: float) -> None:
    step_with_batch_queue(seconds)


def test_describe_names_the_function_called_from_the_innermost_step(monkeypatch):
    captured = {}

    def update_from_output():
        captured["frame"] = sys._getframe()

    def step_with_batch_queue():
        update_from_output()

    def run_busy_loop():
        step_with_batch_queue()

    run_busy_loop()
    # not vLLM's engine/core.py: no phase
    assert cs.describe(captured["frame"]) == ("-", "tests/test_core_sampler.py:update_from_output")
    monkeypatch.setattr(cs, "_CORE_FILE", "tests/test_core_sampler.py")
    phase, leaf = cs.describe(captured["frame"])
    assert phase == "update_from_output"
    assert leaf == "tests/test_core_sampler.py:update_from_output"


def test_sampler_thread_records_the_main_threads_phase(tmp_path, monkeypatch):
    monkeypatch.setattr(cs, "_CORE_FILE", "tests/test_core_sampler.py")  # this file's loop stands in for vLLM's
    path = tmp_path / "core.jsonl"
    stop = threading.Event()
    args = (threading.get_ident(), str(path), 0.002, stop)
    sampler = threading.Thread(target=cs._sample_forever, args=args, daemon=True)
    sampler.start()
    t0 = time.time()
    run_busy_loop(0.8)
    t1 = time.time()
    stop.set()
    sampler.join(5)
    assert not sampler.is_alive()  # stopped, and wrote what it had left (less than 0.5 s of it here)
    s = cs.summarize(str(path), t0, t1)
    assert s["samples"] > 20
    phases = dict(s["phases"])
    assert phases["schedule"] > 0.5
    assert dict(s["leaves"])["tests/test_core_sampler.py:schedule"] > 0.5


def test_summarize_keeps_the_window_and_splits_segments(tmp_path):
    path = tmp_path / "core.jsonl"
    rows = [
        {"t": 100.0 + i * 0.5, "phase": "result" if i % 2 else "schedule", "leaf": "x:y", "others": {}}
        for i in range(20)
    ]
    rows.append({"t": 50.0, "phase": "outside", "leaf": "x:y", "others": {"input": "a:b"}})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    s = cs.summarize(str(path), 100.0, 110.0)
    assert s["samples"] == 20
    assert dict(s["phases"]) == {"schedule": 0.5, "result": 0.5}
    assert s["segments"]["first 1.25 s"] == [("schedule", pytest.approx(2 / 3, abs=1e-3)), ("result", 0.333)]
    assert s["other_threads"] == []
    assert cs.summarize(str(path), 0.0, 1.0) == {"samples": 0}
