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
