"""benchmarks/step_probe.py reads the GPU timeline of a torch trace: kernel intervals merged, idle gaps and
busy share per quarter second, on the round's clock."""

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "step_probe.py"
_spec = importlib.util.spec_from_file_location("step_probe", _PATH)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)

BASE_NS = 1_700_000_000_000_000_000  # the trace's time origin; event ts are µs after it


def _trace(tmp_path: Path, kernels: list[tuple[float, float]], name: str = "w.pt.trace.json.gz") -> Path:
    events = [{"cat": "kernel", "ts": ts, "dur": dur, "name": "k"} for ts, dur in kernels]
    events.append({"cat": "cpu_op", "ts": 0, "dur": 9_000_000, "name": "not a kernel"})
    d = tmp_path / "trace" / "rank0"
    d.mkdir(parents=True)
    with gzip.open(d / name, "wt") as f:
        json.dump({"baseTimeNanoseconds": BASE_NS, "traceEvents": events}, f)
    return tmp_path / "trace"


def test_timeline_merges_overlaps_and_reports_gaps_on_the_rounds_clock(tmp_path):
    wall0 = BASE_NS / 1e9 + 1.0  # the round started 1 s after the trace's origin
    # two overlapping kernels 1.1-1.3 s and 1.2-1.4 s, then a 100 ms gap, then 1.5-1.6 s
    d = _trace(tmp_path, [(1_100_000, 200_000), (1_200_000, 200_000), (1_500_000, 100_000)])
    t = probe.timeline(str(d), wall0, gen_s=0.75)
    assert t["kernels"] == 3
    assert t["kernel_busy_s"] == pytest.approx(0.4)  # 0.3 merged + 0.1
    assert t["first_kernel_s"] == pytest.approx(0.1) and t["last_kernel_s"] == pytest.approx(0.6)
    assert t["gaps_over_2ms"] == 1 and t["largest_gaps"] == [(0.4, 100.0)]
    # quarters: [0, .25) busy .15; [.25, .5) busy .15; [.5, .75) busy .1
    assert t["busy_per_quarter_s"] == [0.6, 0.6, 0.4, 0.0]


def test_timeline_without_a_trace_says_so(tmp_path):
    assert probe.timeline(str(tmp_path), 0.0, 1.0) == {"trace": "no trace file"}


def test_medians_group_rounds_by_their_settings_in_first_run_order():
    rounds = [
        {"round": {}, "generate_s": 7.0},
        {"round": {"chunk": 512}, "generate_s": 6.0},
        {"round": {}, "generate_s": 7.4},
        {"round": {"chunk": 512}, "generate_s": 6.6},
        {"round": {}, "generate_s": 6.9},
    ]
    assert probe.medians(rounds) == {"{}": [7.0, 7.4, 6.9], '{"chunk": 512}': [6.0, 6.6]}
