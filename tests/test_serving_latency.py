"""The pure parts of serving mode: metric arithmetic on hand-made records, saturation, arrival
schedules (against vLLM 0.26.0's get_request, restated below), and the `load:` section's validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from runner.serving.arrivals import arrival_offsets, inter_arrivals
from runner.serving.client import RequestRecord
from runner.serving.latency import (
    RateSummary,
    find_saturation,
    meets_slo,
    peak_concurrency,
    stats_ms,
    summarize,
    tpot_s,
    wall_time_s,
)
from runner.serving.spec import LoadSpec


def rec(i, sent, ttft, itl, tokens, error=None, scheduled=None):
    """A finished request: sent at `sent`, first chunk ttft later, then chunks `itl` apart (seconds)."""
    r = RequestRecord(index=i, prompt_tokens=10, scheduled_s=sent if scheduled is None else scheduled, sent_s=sent)
    if error:
        r.error, r.end_s = error, sent + ttft
        return r
    r.first_token_s = sent + ttft
    r.itl_s = list(itl)
    r.end_s = r.first_token_s + sum(itl)
    r.output_tokens, r.chunks = tokens, len(itl) + 1
    return r


# --- per request and per rate -------------------------------------------------------------------------


def test_tpot_is_decode_time_over_tokens_after_the_first():
    r = rec(0, 0.0, 0.100, [0.02, 0.03, 0.05], tokens=6)  # 4 chunks carrying 6 tokens
    assert r.e2e_s == pytest.approx(0.2)
    assert tpot_s(r) == pytest.approx((0.2 - 0.1) / 5)
    assert tpot_s(rec(1, 0.0, 0.1, [], tokens=1)) is None  # one token: undefined
    assert tpot_s(rec(2, 0.0, 0.1, [], tokens=0, error="HTTP 500")) is None


def test_stats_are_mean_and_linear_percentiles_in_ms():
    s = stats_ms([0.001 * x for x in range(1, 11)])  # 1..10 ms
    assert s == pytest.approx({"mean": 5.5, "p50": 5.5, "p90": 9.1, "p99": 9.91})
    assert s["p90"] == pytest.approx(np.percentile(range(1, 11), 90))
    assert stats_ms([]) is None


def test_summary_of_one_rate_exact():
    records = [
        rec(0, 0.0, 0.100, [0.05, 0.05], tokens=3),  # e2e 0.2, tpot 0.05
        rec(1, 0.5, 0.300, [0.10], tokens=2),  # e2e 0.4, tpot 0.1
        rec(2, 1.0, 0.050, [], tokens=1),  # e2e 0.05, tpot undefined
        rec(3, 1.5, 0.010, [], tokens=0, error="HTTP 500"),
    ]
    s = summarize(records, rate=2.0, slo={"ttft_ms": 200, "tpot_ms": 60})
    assert (s.requests, s.completed, s.errors, s.output_tokens) == (4, 3, 1, 6)
    assert s.wall_s == pytest.approx(1.51)  # first send 0.0 -> last end 1.51 (the error)
    assert s.request_throughput == pytest.approx(3 / 1.51)
    assert s.output_throughput == pytest.approx(6 / 1.51)
    # request 0 meets both; 1 misses TTFT; 2 has no TPOT (counted as met, as vLLM); 3 failed
    assert s.good == 2 and s.goodput == pytest.approx(2 / 1.51)
    assert s.ttft_ms == pytest.approx({"mean": 150.0, "p50": 100.0, "p90": 260.0, "p99": 296.0})
    assert s.tpot_ms == pytest.approx({"mean": 75.0, "p50": 75.0, "p90": 95.0, "p99": 99.5})
    assert s.itl_ms == pytest.approx({"mean": 200 / 3, "p50": 50.0, "p90": 90.0, "p99": 99.0})
    assert s.e2e_ms["p50"] == pytest.approx(200.0) and s.e2e_ms["mean"] == pytest.approx(650 / 3)
    assert s.peak_concurrency == 1 and s.error_samples == ["HTTP 500"]
    assert summarize(records, rate=2.0).goodput is None  # no SLOs, no goodput


def test_slos_each_metric():
    r = rec(0, 0.0, 0.100, [0.02, 0.08], tokens=3)  # e2e 0.2, tpot 0.05, largest gap 0.08
    assert meets_slo(r, {"ttft_ms": 100, "tpot_ms": 50, "itl_ms": 80, "e2e_ms": 200})
    for k, v in {"ttft_ms": 99, "tpot_ms": 49, "itl_ms": 79, "e2e_ms": 199}.items():
        assert not meets_slo(r, {k: v})
    assert meets_slo(rec(1, 0, 0.05, [], tokens=1), {"tpot_ms": 1, "itl_ms": 1})  # nothing to miss
    with pytest.raises(ValueError, match="allowed"):
        meets_slo(r, {"latency_ms": 1})


def test_peak_concurrency_half_open_intervals():
    records = [
        rec(0, 0.0, 0.5, [], 1),
        rec(1, 0.1, 0.5, [], 1),
        rec(2, 0.6, 0.1, [], 1),  # 0 ends at 0.5
        rec(3, 0.5, 0.2, [], 1),
    ]  # 3 starts at 0.5
    assert peak_concurrency(records) == 2
    assert peak_concurrency([rec(i, 0.0, 1.0, [], 1) for i in range(5)]) == 5
    assert peak_concurrency([]) == 0 and wall_time_s([]) == 0.0


# --- saturation ---------------------------------------------------------------------------------------


def point(rate, achieved, ttft_p50):
    return RateSummary(
        rate=rate,
        requests=100,
        completed=100,
        errors=0,
        wall_s=1.0,
        request_throughput=achieved,
        output_throughput=0.0,
        output_tokens=0,
        goodput=None,
        good=None,
        peak_concurrency=1,
        ttft_ms={"mean": ttft_p50, "p50": ttft_p50, "p90": ttft_p50, "p99": ttft_p50},
    )


def test_saturation_needs_stalled_throughput_and_growing_ttft():
    sweep = [point(10, 9.8, 50), point(25, 24.5, 55), point(50, 38.0, 400), point(math.inf, 39.0, 2000)]
    sat = find_saturation(sweep)
    assert sat is not None and (sat.index, sat.rate) == (2, 50)
    assert any("0.9 x offered 50" in r for r in sat.reasons) and any("TTFT p50 400.0" in r for r in sat.reasons)
    assert find_saturation(sweep[:2]) is None  # the same answer on the sweep so far
    assert find_saturation(sweep[:3]).index == 2


def test_no_saturation_when_only_one_signal():
    short_run = [point(10, 8.0, 50), point(25, 20.0, 60)]  # achieved < 0.9 x offered, TTFT flat
    assert find_saturation(short_run) is None
    queueing = [point(10, 9.9, 50), point(25, 24.9, 300)]  # TTFT grew but throughput follows
    assert find_saturation(queueing) is None


def test_saturation_at_infinite_rate_uses_the_gain():
    sweep = [point(10, 9.9, 50), point(math.inf, 10.2, 900)]  # 3 % more for unbounded load
    sat = find_saturation(sweep)
    assert sat.index == 1 and "gains less than 5%" in sat.reasons[0]


# --- arrival schedules --------------------------------------------------------------------------------


def vllm_get_request_delays(n, rate, burstiness, seed):
    """vLLM 0.26.0 vllm/benchmarks/serve.py: main_async seeds, get_request draws, sums and rescales."""
    np.random.seed(seed)
    delay_ts = []
    for _ in range(n):
        if rate == float("inf"):
            delay_ts.append(0)
        else:
            theta = 1.0 / (rate * burstiness)
            delay_ts.append(np.random.gamma(shape=burstiness, scale=theta))
    for i in range(1, len(delay_ts)):
        delay_ts[i] += delay_ts[i - 1]
    if delay_ts[-1] != 0:
        normalize_factor = (n / rate) / delay_ts[-1]
        delay_ts = [delay * normalize_factor for delay in delay_ts]
    return delay_ts


@pytest.mark.parametrize("rate,burstiness,seed", [(10.0, 1.0, 0), (3.5, 0.3, 42), (100.0, 4.0, 7)])
def test_schedule_is_vllm_bench_serves_bit_for_bit(rate, burstiness, seed):
    assert arrival_offsets(500, rate, burstiness, seed) == vllm_get_request_delays(500, rate, burstiness, seed)


def test_same_seed_same_schedule_other_seed_other():
    a = arrival_offsets(100, 20.0, 1.0, seed=3)
    assert a == arrival_offsets(100, 20.0, 1.0, seed=3) and a != arrival_offsets(100, 20.0, 1.0, seed=4)
    assert a == sorted(a) and a[-1] == pytest.approx(100 / 20.0)


def test_gaps_have_mean_one_over_rate_and_gamma_spread():
    for b in (0.25, 1.0, 4.0):
        gaps = np.array(inter_arrivals(40_000, 8.0, b, seed=1))
        assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(b), rel=0.05)  # gamma CV


def test_infinite_rate_and_burstiness():
    assert arrival_offsets(5, math.inf) == [0.0] * 5 and inter_arrivals(3, math.inf, 0.5) == [0.0] * 3
    assert arrival_offsets(4, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert arrival_offsets(0, 5.0) == []
    for bad in [(3, 0.0, 1.0), (3, float("nan"), 1.0), (3, 1.0, 0.0), (-1, 1.0, 1.0)]:
        with pytest.raises(ValueError):
            inter_arrivals(*bad)


# --- the load: section -------------------------------------------------------------------------------


def test_load_spec_from_yaml_with_inf_and_round_trip():
    spec = LoadSpec.model_validate(
        yaml.safe_load("request_rate: [10, 25, 50, .inf]\nmax_concurrency: 64\nslo: {ttft_ms: 200, tpot_ms: 50}\n")
    )
    assert spec.request_rate == [10, 25, 50, math.inf] and spec.burstiness == 1.0 and spec.warmup_requests == 20
    dumped = spec.model_dump(mode="json")
    assert dumped["request_rate"][-1] == "inf"  # JSON has no infinity
    assert LoadSpec.model_validate(dumped) == spec
    assert LoadSpec(request_rate="inf").request_rate == [math.inf]
    assert LoadSpec(request_rate=5, num_requests=5).request_indices(3) == [0, 1, 2, 0, 1]
    assert LoadSpec(request_rate=5).request_indices(3) == [0, 1, 2]


@pytest.mark.parametrize(
    "fields,where,says",
    [
        ({"request_rate": [10, 0]}, "request_rate", "> 0"),
        ({"request_rate": [-1]}, "request_rate", "> 0"),
        ({"request_rate": [float("nan")]}, "request_rate", "> 0"),
        ({"request_rate": ["fast"]}, "request_rate", "`inf`"),
        ({"request_rate": []}, "request_rate", "at least one"),
        ({"request_rate": [50, 10]}, "request_rate", "increase"),
        ({"request_rate": [1], "burstiness": 0}, "burstiness", "greater than 0"),
        ({"request_rate": [1], "burstiness": float("nan")}, "burstiness", "> 0"),
        ({"request_rate": [1], "slo": {"ttfb_ms": 1}}, "slo", "ttft_ms, tpot_ms, itl_ms, e2e_ms"),
        ({"request_rate": [1], "slo": {"ttft_ms": 0}}, "slo", "> 0"),
        ({"request_rate": [1], "max_concurrency": 0}, "max_concurrency", "greater than 0"),
        ({"request_rate": [1], "seed": 2**32}, "seed", "less than or equal"),
        ({"request_rate": [1], "rate": 3}, "rate", "Extra inputs"),
    ],
)
def test_load_spec_rejects(fields, where, says):
    with pytest.raises(ValidationError) as e:
        LoadSpec.model_validate(fields)
    err = e.value.errors()[0]
    assert err["loc"][0] == where and says in str(e.value)
