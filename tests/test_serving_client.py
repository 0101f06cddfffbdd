"""The streaming load client against a local stand-in server (tests/sse_server.py): timings, the
concurrency cap, errors, warmup, token counts, and the SSE parser on awkward byte boundaries."""

from __future__ import annotations

import json

import pytest

from runner.serving.client import SSEParser, build_payload, run_rate
from runner.serving.latency import peak_concurrency, summarize, tpot_s
from runner.serving.server import free_port
from tests.sse_server import Plan, SSEServer

SAMPLING = {"max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "ignore_eos": True, "stop": None, "seed": None}


def by_first_id(plans: dict[int, Plan], default: Plan):
    return lambda body: plans.get(body["prompt"][0], default)


# --- SSE parsing ---------------------------------------------------------------------------------


def test_sse_parser_reassembles_events_across_any_split():
    events = ['{"choices": [{"text": "日本語"}]}', '{"choices": [], "usage": {"completion_tokens": 3}}', "[DONE]"]
    raw = (": keep-alive comment\n\n" + "".join(f"data: {e}\r\n\r\n" for e in events)).encode()
    for step in (1, 2, 3, 7, len(raw)):  # every split, including inside a multi-byte character
        p = SSEParser()
        got = [x for i in range(0, len(raw), step) for x in p.feed(raw[i : i + step])]
        assert got == events


def test_sse_parser_multiline_data_and_other_fields():
    p = SSEParser()
    assert p.feed(b"event: message\nid: 3\ndata: a\ndata:b\n") == []  # not complete before the blank line
    assert p.feed(b"\n") == ["a\nb"]
    assert p.feed(b"data: x\r") == []  # a CR may be half of CRLF
    assert p.feed(b"\n\r\n") == ["x"]
    assert p.feed(b"data: {}\r") == [] and p.close() == ["{}"]  # cut off before its blank line


def test_payload_sends_token_ids_and_streams_with_usage():
    body = build_payload("m", [5, 6, 7], SAMPLING)
    assert body["prompt"] == [5, 6, 7] and body["model"] == "m"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 8 and body["ignore_eos"] is True and body["temperature"] == 0.0
    assert "stop" not in body and "seed" not in body  # None: the server's default applies
    json.dumps(body)


def test_payload_sends_text_as_text():
    # the benchmarks also send the rendered text (as vllm bench does), which the server tokenizes
    body = build_payload("m", "<|im_start|>user\n問題", SAMPLING)
    assert body["prompt"] == "<|im_start|>user\n問題" and body["max_tokens"] == 8


def test_text_prompts_take_their_token_count_from_the_usage_event():
    with SSEServer(lambda body: Plan(first_delay_s=0.01, gap_s=0.005, chunks=2)) as srv:
        run = run_rate(srv.base_url, "m", ["abcd", "xy"], SAMPLING, rate=float("inf"), warmup=1)
    assert [s.body["prompt"] for s in srv.seen] == ["abcd", "abcd", "xy"]  # the warmup repeats the first
    # the stand-in counts a text prompt's characters as its tokens; before the answer the count is unknown (0)
    assert sorted(r.prompt_tokens for r in run.records) == [2, 4] and all(r.ok for r in run.records)


# --- one rate against the stand-in -----------------------------------------------------------------


def test_timings_follow_the_servers_own_chunk_times():
    plan = Plan(first_delay_s=0.10, gap_s=0.05, chunks=5, tokens_per_chunk=2)
    with SSEServer(lambda body: plan) as srv:
        run = run_rate(srv.base_url, "m", [[1, 2, 3], [4, 5]], SAMPLING, rate=float("inf"))
    assert [r.error for r in run.records] == [None, None]
    for rec in run.records:
        seen = next(s for s in srv.seen if s.body["prompt"][0] == [1, 4][rec.index])
        assert seen.body["prompt"] == [[1, 2, 3], [4, 5]][rec.index]
        first = run.t0 + rec.first_token_s
        assert rec.ttft_s >= plan.first_delay_s  # the server slept that long first
        assert seen.writes[0] <= first < seen.writes[0] + 0.05  # seen right after it was written
        last = run.t0 + rec.end_s
        assert seen.writes[-1] <= last < seen.writes[-1] + 0.05
        assert len(rec.itl_s) == plan.chunks - 1  # one gap per chunk, not per token
        assert sum(rec.itl_s) == pytest.approx(rec.e2e_s - rec.ttft_s)
        assert sum(rec.itl_s) == pytest.approx(seen.writes[-1] - seen.writes[0], abs=0.05)
        assert (rec.output_tokens, rec.tokens_from, rec.chunks) == (10, "usage", 5)
        assert rec.prompt_tokens == len(seen.body["prompt"])
        assert rec.output_text == "あ" * 10 and rec.finish_reason == "length"
        assert tpot_s(rec) == pytest.approx((rec.e2e_s - rec.ttft_s) / 9)


def test_max_concurrency_caps_requests_in_flight():
    n, cap = 8, 2
    with SSEServer(lambda body: Plan(first_delay_s=0.05, gap_s=0.01, chunks=3)) as srv:
        run = run_rate(srv.base_url, "m", [[i] for i in range(n)], SAMPLING, rate=float("inf"), max_concurrency=cap)
    assert all(r.ok for r in run.records) and len(srv.seen) == n
    assert peak_concurrency(run.records) == cap
    assert summarize(run.records, rate=float("inf")).peak_concurrency == cap
    waited = sorted(r.queue_s for r in run.records)
    assert all(q < 0.04 for q in waited[:cap])  # the first `cap` go out at once
    assert all(q >= 0.05 for q in waited[cap:])  # the others wait for a request to finish


def test_errors_are_counted_and_kept():
    plans = {500: Plan(status=500), 77: Plan(chunks=4, error_after=2)}
    prompts = [[1], [500], [2], [77]]
    with SSEServer(by_first_id(plans, Plan(first_delay_s=0.01, gap_s=0.005))) as srv:
        run = run_rate(srv.base_url, "m", prompts, SAMPLING, rate=float("inf"))
    errors = {r.index: r.error for r in run.records if r.error}
    assert set(errors) == {1, 3}
    assert errors[1].startswith("HTTP 500") and "injected failure" in errors[1]
    assert "injected mid-stream error" in errors[3]
    s = summarize(run.records, rate=float("inf"), slo={"ttft_ms": 10_000})
    assert (s.requests, s.completed, s.errors, s.good) == (4, 2, 2, 2)
    assert run.records[1].e2e_s is None and tpot_s(run.records[1]) is None


def test_connection_refused_is_an_error_per_request():
    url = f"http://127.0.0.1:{free_port()}"
    run = run_rate(url, "m", [[1], [2]], SAMPLING, rate=float("inf"), warmup=1)
    assert all(r.error and "Connect" in r.error for r in run.records)
    assert len(run.warmup_errors) == 1


def test_warmup_requests_are_sent_first_and_not_measured():
    calls = []
    with SSEServer(lambda body: Plan(first_delay_s=0.01, gap_s=0.005, chunks=2)) as srv:

        def warmed():
            calls.append(len(srv.seen))

        run = run_rate(srv.base_url, "m", [[7, 7], [8], [9]], SAMPLING, rate=float("inf"), warmup=3, on_warmed=warmed)
    assert calls == [3]  # after the 3 warmups, before any measured one
    assert [s.body["prompt"] for s in srv.seen[:3]] == [[7, 7]] * 3
    assert len(srv.seen) == 6 and len(run.records) == 3
    assert sorted(r.index for r in run.records) == [0, 1, 2] and run.warmup == 3 and not run.warmup_errors


def test_without_usage_the_chunks_are_counted():
    with SSEServer(
        lambda body: Plan(first_delay_s=0.01, gap_s=0.005, chunks=3, tokens_per_chunk=2, usage=False)
    ) as srv:
        run = run_rate(srv.base_url, "m", [[1]], SAMPLING, rate=float("inf"))
    (rec,) = run.records
    assert (rec.output_tokens, rec.tokens_from, rec.chunks) == (3, "chunks", 3)


def test_requests_go_out_on_schedule():
    with SSEServer(lambda body: Plan(first_delay_s=0.005, gap_s=0.001, chunks=1)) as srv:
        run = run_rate(srv.base_url, "m", [[i] for i in range(6)], SAMPLING, rate=40.0, seed=1)
    due = [r.scheduled_s for r in run.records]
    assert due == sorted(due) and due[-1] == pytest.approx(6 / 40)  # vLLM's rescaling: last at n / rate
    assert all(r.sent_s >= r.scheduled_s - 0.005 for r in run.records)
    assert all(r.output_tokens == 1 and r.itl_s == [] for r in run.records)
