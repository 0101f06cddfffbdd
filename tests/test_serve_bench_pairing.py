"""benchmarks/serve_vs_vllm_bench.py compares the two clients request by request: per-request figures from
vllm bench's `--save-detailed` result and from the runner's records, and their paired differences."""

import importlib.util
from pathlib import Path

import pytest

from runner.serving.client import RequestRecord

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "serve_vs_vllm_bench.py"
_spec = importlib.util.spec_from_file_location("serve_vs_vllm_bench", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_bench_detail_uses_vllm_bench_tpot_definition():
    res = {
        "start_times": [100.0, 100.5, 101.0],
        "ttfts": [0.05, 0.06, None],  # the third request failed
        "itls": [[0.02] * 15, [0.03] * 15, []],
        "output_lens": [16, 16, 0],
    }
    d = bench.bench_detail(res)
    assert d["start_s"] == [0.0, 0.5, 1.0] and d["ttft_ms"] == [50.0, 60.0, None]
    assert d["tpot_ms"][0] == pytest.approx(20.0) and d["tpot_ms"][1] == pytest.approx(30.0) and d["tpot_ms"][2] is None
    assert bench.bench_detail({"start_times": []}) == {}


def _records(shift_s: float = 0.0, ttft_s: float = 0.07, tokens: int = 16) -> list[RequestRecord]:
    return [
        RequestRecord(
            index=i,
            prompt_tokens=10,
            scheduled_s=i * 0.5,
            sent_s=2 + i * 0.5 + (shift_s if i == 2 else 0.0),
            first_token_s=2 + i * 0.5 + ttft_s,
            end_s=2 + i * 0.5 + ttft_s + 0.45,
            output_tokens=tokens,
        )
        for i in range(3)
    ]


def test_runner_detail_and_paired_differences():
    d = bench.runner_detail(_records())
    assert d["start_s"] == [0.0, 0.5, 1.0] and d["tpot_ms"] == pytest.approx([30.0] * 3)
    b = {"start_s": [0.0, 0.5, 1.0], "ttft_ms": [50.0, 60.0, 70.0], "tpot_ms": [30.0, 30.0, 25.0]}
    text = bench.paired(b, d)
    assert "send time: runner - bench median +0.00 ms" in text
    assert "TTFT: runner - bench median +10.00 ms" in text and "2/3 requests later/higher" in text
    assert "TPOT: runner - bench median +0.00 ms" in text
    late = bench.paired(b, bench.runner_detail(_records(shift_s=0.25)))  # the third request went out 250 ms late
    assert "send time: runner - bench median +0.00 ms (10th +0.00, 90th +" in late and "1/3 requests later" in late
    assert bench.paired({}, d).startswith("paired: no per-request data")


def _round(ttft: float, tpot: float, rps: float = 50.0, detail_ttft=(50.0, 60.0)) -> dict:
    return {
        "ttft_p50_ms": ttft,
        "tpot_p50_ms": tpot,
        "request_throughput": rps,
        "detail": {"start_s": [0.0, 0.5], "ttft_ms": list(detail_ttft), "tpot_ms": [20.0, None]},
    }


def test_pooled_takes_the_median_of_each_rounds_ratio():
    # the server drifts: bench's own TTFT moves 40 -> 80 ms; the runner tracks it within each round
    done = {
        "bench": [_round(40, 10), _round(80, 20), _round(60, 15)],
        "runner": [_round(42, 10.2), _round(76, 22), _round(60, 15, detail_ttft=(52.0, 61.0))],
    }
    text = bench.pooled(done)
    assert "runner: median over 3 rounds" in text
    assert "TTFT p50 (ms)       1.000  ok   rounds: 1.050 0.950 1.000" in text
    assert "TPOT p50 (ms)       1.020  ok   rounds: 1.020 1.100 1.000" in text
    assert "TTFT: runner - bench, median over 6 requests +0.00 ms" in text  # 0, 0, 0, 0, +2, +1
    assert "TPOT: runner - bench, median over 3 requests +0.00 ms" in text  # None is left out
    drift_missed = [_round(36, 10), _round(72, 20), _round(54, 15)]  # 0.9 in every round
    assert "TTFT p50 (ms)       0.900  MISSED" in bench.pooled({"bench": done["bench"], "runner": drift_missed})


def test_combine_pools_the_rounds_of_several_files(tmp_path, capsys):
    import gzip
    import json

    a = tmp_path / "a.json"
    a.write_text(json.dumps({"bench": [_round(40, 10)], "runner": [_round(44, 10)], "rate": 50}))
    b = tmp_path / "b.json.gz"
    with gzip.open(b, "wt") as f:
        json.dump({"bench": [_round(80, 20)], "runner": [_round(80, 21)], "rate": 50}, f)
    assert bench.combine([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "runner: median over 2 rounds" in out and "rounds: 1.100 1.000" in out
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"rate": 50}))
    assert bench.combine([str(empty)]) == 1
