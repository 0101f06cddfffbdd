"""Serving runs end to end on the CPU: `runner go` on recipes with `load:` and the fake engine's server
(runner/engines/fake_server.py), each recipe in its own process as usual. One call runs a server that fails
before it is ready, then a sweep that saturates at its second rate (the fake server answers one request at
a time, each taking `delay_s`); the tests read what that call left behind. Also: `load:` on an engine with
no server mode, the parent ending a server whose recipe process was SIGKILLed, and the small pure parts.

Only process groups these tests can name are checked (the pgid the fake server prints, the one a test
starts); nothing scans the machine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runner.cli import cli
from runner.config.common import ModelSpec, Sampling
from runner.engines.fake import DEFAULT_REPLY, served_reply
from runner.engines.fake_server import reply_words
from runner.engines.vllm import VLLMSpec
from runner.execution.layout import RunFolder
from runner.execution.serve_run import end_recorded_server, request_sampling
from runner.reporting.results import RunResult

ROOT = Path(__file__).resolve().parents[1]
DEMO_DATA = ROOT / "runner" / "demo" / "demo-ja.json"
REPLY = "東京 です よ ね"  # four words: four streamed chunks, so TPOT is defined


def recipe(name: str, *, load: dict | None = None, **engine) -> dict:
    return {
        "name": name,
        "model": {"id": "builtin:demo"},
        "engine": {"kind": "fake", "reply": REPLY, "delay_s": 0.02, **engine},
        "dataset": {"format": "squad", "path": str(DEMO_DATA)},
        "prompt": {"template": "jsquad.j2", "system_template": "jsquad-system.j2"},
        "sampling": {"temperature": 0, "max_tokens": 16},
        "metrics": ["exact_match", "char_f1"],
        "load": load
        or {
            "request_rate": [20, 200, "inf"],
            "num_requests": 8,
            "warmup_requests": 2,
            "slo": {"ttft_ms": 50, "tpot_ms": 50},
        },
    }


def write(path: Path, d: dict) -> Path:
    path.write_text(yaml.safe_dump(d, allow_unicode=True), encoding="utf-8")
    return path


def group_gone(pgid: int, wait_s: float = 5.0) -> bool:
    """No live (non-zombie) member of the group, within wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        try:
            state = Path(f"/proc/{pgid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                return True
        except (OSError, IndexError):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def server_pgid(log: Path) -> int:
    return int(re.findall(r"fake server pid \d+ \(process group (\d+)\)", log.read_text())[-1])


@pytest.fixture(scope="module")
def call(tmp_path_factory):
    """One `runner go`: `crash` (its server exits before /health answers), then `serve` (a 3-rate sweep)."""
    tmp = tmp_path_factory.mktemp("serving")
    crash = write(tmp / "crash.yaml", recipe("crash", serve_fail=True))
    serve = write(tmp / "serve.yaml", recipe("serve"))
    out = tmp / "out"
    res = CliRunner().invoke(cli, ["go", str(crash), str(serve), "--out", str(out), "--no-progress"])
    return res, out


def result(out: Path, name: str) -> RunResult:
    return RunResult.model_validate_json((out / name / "results.json").read_bytes())


@pytest.mark.slow
def test_per_rate_figures_saturation_and_headline(call):
    res, out = call
    r = result(out, "serve")
    assert r.status == "ok", r.error
    sv = r.serving
    assert [p.rate for p in sv.rates] == [20, 200] and sv.skipped_rates == [float("inf")]
    assert sv.saturated_rate == 200 and [p.saturated for p in sv.rates] == [False, True]
    assert any("TTFT p50" in x for x in sv.saturation_reasons)
    low, high = sv.rates
    for p in sv.rates:
        assert p.requests == p.completed == 8 and p.errors == 0 and p.cache_reset is True
        assert p.ttft_ms.p50 > 0 and p.tpot_ms.p50 > 0 and p.e2e_ms.p99 >= p.e2e_ms.p50 and p.itl_ms is not None
        assert p.output_tokens == 8 * 4 and p.prompt_tokens > 0 and p.good is not None and p.goodput is not None
        assert set(p.scores) == {"exact_match", "char_f1"} and p.cached_tokens is None  # no cache to report
        assert p.server_counters["fake:requests_total"] == 8  # the measured requests only, not the warmup
    assert high.request_throughput < 0.9 * 200 and high.ttft_ms.p50 > 2 * low.ttft_ms.p50
    assert sv.headline_rate == 20 and sv.command[:3] == [sys.executable, "-m", "runner.engines.fake_server"]
    # the top-level figures are the headline rate's
    assert r.throughput.requests_per_s == pytest.approx(low.request_throughput)
    assert r.timings.generate_s == pytest.approx(low.wall_s) and r.n_samples == 8
    assert r.latency.ttft_s.p50 * 1000 == pytest.approx(low.ttft_ms.p50)
    assert r.scores == low.scores and r.timings.load_s == sv.server_start_s > 0
    assert {k.name: k.status for k in r.knobs} == {"reply": "applied", "delay_s": "applied"}
    raw = json.loads((out / "serve" / "results.json").read_text())
    assert raw["serving"]["skipped_rates"] == ["inf"]  # JSON has no infinity


@pytest.mark.slow
def test_report_has_latency_per_rate_formulas_and_chart(call):
    _, out = call
    report = (out / "serve" / "report.md").read_text()
    section = report[report.index("## Serving under load") :]
    assert "### Latency per rate (ms)" in section and "### Throughput, accuracy and errors per rate" in section
    assert "TPOT = (E2E − TTFT) / (N − 1)" in section and "TTFT = t(first streamed chunk" in section
    assert "prefix cache was emptied (`POST /reset_prefix_cache`)" in section
    assert "**Headline: 20 req/s**" in section and "**Saturated at 200 req/s**" in section
    assert "Higher rates were not run: inf." in section
    assert "![TTFT p50/p99 and TPOT p50 against achieved requests/s](latency_throughput.png)" in section
    assert (out / "serve" / "latency_throughput.png").read_bytes()[:4] == b"\x89PNG"
    summary = (out / "summary.md").read_text()
    assert "## Serving under load" in summary and "at 20 req/s (serving)" in summary
    assert "## Failures" in summary and "**crash**" in summary


@pytest.mark.slow
def test_samples_hold_per_request_timings(call):
    _, out = call
    lines = [json.loads(x) for x in (out / "serve" / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and [d["request"] for d in lines] == list(range(8))
    for d in lines:
        assert d["rate"] == "20" and d["error"] is None and d["output"] == REPLY and d["output_tokens"] == 4
        assert 0 < d["ttft_s"] <= d["latency_s"] == d["e2e_s"] and d["tpot_s"] > 0
        assert "exact_match" in d and "char_f1" in d and d["prompt"].startswith("<|im_start|>system")


@pytest.mark.slow
def test_server_is_gone_and_a_crashing_one_fails_its_recipe_only(call):
    res, out = call
    assert res.exit_code == 1, res.output
    folder = RunFolder.of(out, "serve")
    assert group_gone(server_pgid(folder.engine_log)) and not folder.server_pgid.exists()
    crash = result(out, "crash")
    assert crash.status == "failed" and crash.serving is None
    assert "the server exited with code 1 before it was ready" in crash.error
    assert "failing before it is ready" in crash.error  # the server's own last words
    assert group_gone(server_pgid(out / "crash" / "engine.log"))
    assert "FAILED crash" in res.output and "ok serve" in res.output and "Traceback" not in res.output


def test_load_needs_an_engine_with_a_server_mode(tmp_path):
    d = recipe("hf")
    d["engine"] = {"kind": "transformers", "device": "cpu"}
    res = CliRunner().invoke(cli, ["go", str(write(tmp_path / "hf.yaml", d)), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "`load` runs the engine as a server" in res.output and "'transformers' has no server mode" in res.output
    assert not (tmp_path / "out" / "hf").exists()


def test_parent_ends_a_recorded_server_group(tmp_path):
    folder = RunFolder.of(tmp_path, "r")
    folder.root.mkdir()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        folder.server_pgid.write_text(f"{p.pid}\n")
        end_recorded_server(folder)
        assert p.wait(5) == -signal.SIGKILL and not folder.server_pgid.exists()
    finally:
        if p.poll() is None:
            p.kill()
    folder.server_pgid.write_text(str(os.getpgrp()))  # never this process's own group
    end_recorded_server(folder)
    assert not folder.server_pgid.exists()
    end_recorded_server(folder)  # nothing recorded: nothing to do


@pytest.mark.slow
def test_server_of_a_killed_recipe_process_is_ended_by_the_parent(tmp_path):
    """SIGKILL the recipe's process mid-sweep: its server (own session) is ended by `runner go` after it."""
    d = recipe("slow", load={"request_rate": [2], "num_requests": 40, "warmup_requests": 0})
    out = tmp_path / "out"
    go = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "go",
            str(write(tmp_path / "slow.yaml", d)),
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        log, deadline = out / "slow" / "engine.log", time.monotonic() + 30
        while not (log.exists() and "server ready" in log.read_text()):
            assert time.monotonic() < deadline and go.poll() is None, "the server never became ready"
            time.sleep(0.1)
        pgid = server_pgid(log)
        assert int((out / "slow" / ".server.pgid").read_text()) == pgid
        os.kill(int(re.findall(r"runner worker pid (\d+)", log.read_text())[-1]), signal.SIGKILL)
        assert go.wait(30) == 1
        assert group_gone(pgid) and not (out / "slow" / ".server.pgid").exists()
        assert result(out, "slow").status == "failed"
    finally:
        if go.poll() is None:
            go.kill()


def test_fake_server_reply_and_request_sampling():
    assert served_reply("{{ answers[0] }}") == DEFAULT_REPLY and served_reply("東京 です") == "東京 です"
    assert reply_words("a b c d", {"max_tokens": 2}) == (["a", " b"], "length")
    assert reply_words("a b. c", {"stop": ["."], "max_tokens": 9}) == (["a", " b"], "stop")
    greedy = request_sampling(Sampling(temperature=0, top_p=0.5, top_k=5, max_tokens=7, stop=["\n"]))
    assert greedy == {
        "max_tokens": 7,
        "temperature": 0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "stop": ["\n"],
        "ignore_eos": None,
        "seed": None,
    }
    hot = request_sampling(Sampling(temperature=0.7, top_p=0.5, top_k=5, ignore_eos=True, seed=3))
    assert (hot["top_p"], hot["top_k"], hot["ignore_eos"], hot["seed"], hot["stop"]) == (0.5, 5, True, 3, None)


VLLM_LOG = (
    "(EngineCore_DP0 pid=9) INFO [core.py:93] Initializing a V1 LLM engine (v0.26.0) with config: model='m', "
    "tokenizer='m', dtype=torch.bfloat16, max_seq_len=32768, load_format=dummy, tensor_parallel_size=1, "
    "quantization=None, enforce_eager=True, kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name=m, "
    'enable_prefix_caching=False, chunked_prefill_enabled=True, compilation_config={"level": 0}\n'
    "(EngineCore_DP0 pid=9) INFO Model loading took 14.25 GiB memory and 3.1 seconds\n"
    "(EngineCore_DP0 pid=9) INFO GPU KV cache size: 1,234,567 tokens\n"
)


def test_vllm_serve_evidence_from_the_server_log_and_counters():
    spec = VLLMSpec(kind="vllm", enable_prefix_caching=True, enforce_eager=True)
    counters = {"vllm:prefix_cache_hits_total": 0.0, "vllm:prefix_cache_queries_total": 1000.0}
    ev = spec.serve_evidence(ModelSpec(id="m", load_format="dummy"), VLLM_LOG, counters)
    knobs = {k.name: k for k in ev.knobs}
    assert knobs["enable_prefix_caching"].status == "ignored" and knobs["enable_prefix_caching"].effective is False
    assert knobs["enforce_eager"].status == "applied" and knobs["load_format"].status == "applied"
    assert knobs["gpu_memory_utilization"].status == "unverified"  # no worker memory line in this log
    assert (ev.cached_tokens, ev.weights_gib, ev.kv_cache_tokens) == (0, 14.25, 1234567)
    none = spec.serve_evidence(ModelSpec(id="m"), "", {"vllm:prefix_cache_hits_total": 7.0})
    assert none.knobs == () and none.cached_tokens == 7 and "not verified" in none.notes[0]


def test_vllm_serve_reads_the_utilization_the_worker_sized_the_kv_cache_for():
    # vLLM 0.26.0's gpu_worker.py line, as the H200 server logged it (reports/h200-serve/bench/server.log.gz)
    worker = (
        "(EngineCore pid=2032) INFO 12-03 03:36:58 [gpu_worker.py:857] Free memory on device (139.29/139.8 GiB) "
        "on startup. Desired GPU memory utilization is ({}, 125.82 GiB). Actual usage is 14.29 GiB for weight\n"
    )
    spec = VLLMSpec(kind="vllm", gpu_memory_utilization=0.9)
    knob = {k.name: k for k in spec.serve_evidence(ModelSpec(id="m"), VLLM_LOG + worker.format(0.9), {}).knobs}
    assert knob["gpu_memory_utilization"].status == "applied" and knob["gpu_memory_utilization"].effective == 0.9
    knob = {k.name: k for k in spec.serve_evidence(ModelSpec(id="m"), VLLM_LOG + worker.format(0.5), {}).knobs}
    assert knob["gpu_memory_utilization"].status == "ignored" and knob["gpu_memory_utilization"].effective == 0.5
