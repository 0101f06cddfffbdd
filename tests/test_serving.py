"""The serving wing (recipes with `load:`) on a CPU: `runner go` against the fake engine's server
under vLLM 0.26.0's own benchmark client (its one file, taken from the vLLM wheel: see
conftest.vllm_client), a server that fails before it is ready, a sweep that saturates at its second
rate (the fake server answers one request at a time, each taking `delay_s`), a `runner go` killed by
SIGKILL whose server must not outlive it, and the arithmetic.

Only process groups these tests can name are checked (the pgid the fake server prints); nothing
scans the machine."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from runner.base.procs import session_members
from runner.base.types import Sampling
from runner.cli import cli
from runner.engines.fake import DEFAULT_REPLY, served_reply
from runner.recipe import LoadSpec
from runner.results import RunResult
from runner.serve.fake_server import reply_words
from runner.serve.run import (
    RateRun,
    Record,
    arrival_offsets,
    peak_concurrency,
    rate_point,
    request_body,
    saturation,
)
from runner.serve.server import Server, ServerError, counters, exit_status, free_port
from tests.cli_output import user_error

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


def group_gone(pgid: int, wait_s: float = 10.0) -> bool:
    """No live (non-zombie) member of the group, within wait_s."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
            state = Path(f"/proc/{pgid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                return True
        except (ProcessLookupError, OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


def server_pgid(log: Path) -> int:
    return int(re.findall(r"fake server pid \d+ \(process group (\d+)\)", log.read_text())[-1])


@pytest.fixture(scope="module")
def call(tmp_path_factory, vllm_client_dir):
    """One `runner go`: `crash` (its server exits before /health answers), then `serve` (a 3-rate
    sweep)."""
    tmp = tmp_path_factory.mktemp("serving")
    crash = write(tmp / "crash.yaml", recipe("crash", serve_fail=True))
    serve = write(tmp / "serve.yaml", recipe("serve"))
    out = tmp / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(vllm_client_dir))
        res = CliRunner().invoke(
            cli, ["go", str(crash), str(serve), "--out", str(out), "--no-progress"]
        )
    return res, out


def result(out: Path, name: str) -> RunResult:
    return RunResult.model_validate_json((out / name / "results.json").read_bytes())


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
        assert (
            p.ttft_ms.p50 > 0
            and p.tpot_ms.p50 > 0
            and p.e2e_ms.p99 >= p.e2e_ms.p50
            and p.itl_ms is not None
        )
        assert (
            p.output_tokens == 8 * 4
            and p.prompt_tokens > 0
            and p.good is not None
            and p.goodput is not None
        )
        # no cache to report
        assert set(p.scores) == {"exact_match", "char_f1"} and p.cached_tokens is None
        # the measured requests only, not the warmup
        assert p.server_counters["fake:requests_total"] == 8
    assert high.request_throughput < 0.9 * 200 and high.ttft_ms.p50 > 2 * low.ttft_ms.p50
    assert sv.headline_rate == 20 and sv.command[:3] == [
        sys.executable,
        "-m",
        "runner.serve.fake_server",
    ]
    # the top-level figures are the headline rate's
    assert r.throughput.requests_per_s == pytest.approx(low.request_throughput)
    assert (
        r.timings.generate_s == pytest.approx(low.wall_s)
        and r.n_samples == 8
        and r.estimate is None
    )
    assert r.latency.ttft_s.p50 * 1000 == pytest.approx(low.ttft_ms.p50)
    assert r.scores == low.scores and r.timings.load_s == sv.server_start_s > 0
    assert {k.name: k.status for k in r.knobs} == {"reply": "applied", "delay_s": "applied"}
    raw = json.loads((out / "serve" / "results.json").read_text())
    assert raw["serving"]["skipped_rates"] == ["inf"]  # JSON has no infinity


def test_report_has_latency_per_rate_formulas_and_chart(call):
    _, out = call
    report = (out / "serve" / "report.md").read_text()
    section = report[report.index("## Serving under load") :]
    assert (
        "### Latency per rate (ms)" in section
        and "### Throughput, accuracy and errors per rate" in section
    )
    assert "TPOT = (E2E − TTFT) / (N − 1)" in section and "TTFT = t(first streamed chunk" in section
    assert "prefix cache was emptied (`POST /reset_prefix_cache`)" in section
    assert "**Headline: 20 req/s**" in section and "**Saturated at 200 req/s**" in section
    assert "Higher rates were not run: inf." in section
    assert (
        "![TTFT p50/p99 and TPOT p50 against achieved requests/s](latency_throughput.png)"
        in section
    )
    assert (out / "serve" / "latency_throughput.png").read_bytes()[:4] == b"\x89PNG"
    summary = (out / "summary.md").read_text()
    assert "## Serving under load" in summary and "at 20 req/s (serving)" in summary
    assert "## Failures" in summary and "**crash**" in summary


def test_samples_hold_per_request_timings(call):
    _, out = call
    lines = [json.loads(x) for x in (out / "serve" / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and [d["request"] for d in lines] == list(range(8))
    for d in lines:
        assert (
            d["rate"] == "20"
            and d["error"] is None
            and d["output"] == REPLY
            and d["output_tokens"] == 4
        )
        assert (
            0 < d["ttft_s"] <= d["latency_s"] == d["e2e_s"]
            and d["tpot_s"] > 0
            and d["queue_s"] >= 0
        )
        assert (
            "exact_match" in d and "char_f1" in d and d["prompt"].startswith("<|im_start|>system")
        )


def test_server_is_gone_and_a_crashing_one_fails_its_recipe_only(call):
    res, out = call
    assert res.exit_code == 1, res.output
    assert group_gone(server_pgid(out / "serve" / "engine.log"))
    crash = result(out, "crash")
    assert crash.status == "failed" and crash.serving is None
    assert "the server exited with code 1 before it was ready" in crash.error
    assert "failing before it is ready" in crash.error  # the server's own last words
    assert (
        "FAILED crash" in res.output and "ok serve" in res.output and "Traceback" not in res.output
    )


@pytest.mark.slow
def test_a_killed_runner_takes_its_server_with_it(tmp_path, vllm_client_dir):
    """SIGKILL `runner go` mid-sweep: the server's watcher ends the server's session."""
    d = recipe("slow", load={"request_rate": [2], "num_requests": 40, "warmup_requests": 0})
    out, env = (
        tmp_path / "out",
        {**os.environ, "PYTHONPATH": f"{vllm_client_dir}{os.pathsep}{ROOT}"},
    )
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "go",
        str(write(tmp_path / "slow.yaml", d)),
        "--out",
        str(out),
    ]
    go = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        log, deadline = out / "slow" / "engine.log", time.monotonic() + 60
        while not (log.exists() and "listening" in log.read_text()):
            assert time.monotonic() < deadline and go.poll() is None, "the server never started"
            time.sleep(0.1)
        pgid = server_pgid(log)
        time.sleep(1.0)
        go.kill()
        go.wait(10)
        assert group_gone(pgid)
    finally:
        if go.poll() is None:
            go.kill()


def test_load_needs_an_engine_with_a_server_mode(tmp_path):
    d = recipe("hf")
    d["engine"] = {"kind": "transformers", "device": "cpu"}
    res = CliRunner().invoke(
        cli, ["go", str(write(tmp_path / "hf.yaml", d)), "--out", str(tmp_path / "out")]
    )
    assert user_error(res) == (
        "Error: {tmp}/hf.yaml: invalid recipe\n"
        "  line 1, (top level): `load` runs the engine as a server; engine kind 'transformers' has "
        "no server mode (kinds with one: vllm, fake)\n"
    )
    assert (
        "`load` runs the engine as a server" in res.output
        and "'transformers' has no server mode" in res.output
    )
    assert not (tmp_path / "out" / "hf").exists()


def test_fake_server_reply_and_request_body():
    assert (
        served_reply("{{ answers[0] }}") == DEFAULT_REPLY
        and served_reply("東京 です") == "東京 です"
    )
    assert reply_words("a b c d", {"max_tokens": 2}) == (["a", " b"], "length")
    assert reply_words("a b. c", {"stop": ["."], "max_tokens": 9}) == (["a", " b"], "stop")
    greedy = request_body(Sampling(temperature=0, top_p=0.5, top_k=5, max_tokens=7, stop=["\n"]))
    assert greedy == {
        "max_tokens": 7,
        "temperature": 0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "stop": ["\n"],
    }
    hot = request_body(Sampling(temperature=0.7, top_p=0.5, top_k=5, ignore_eos=True, seed=3))
    assert (hot["top_p"], hot["top_k"], hot["ignore_eos"], hot["seed"], "stop" in hot) == (
        0.5,
        5,
        True,
        3,
        False,
    )


def test_counters_sum_label_sets_of_totals_only():
    text = textwrap.dedent("""\
        # TYPE vllm:prefix_cache_queries counter
        vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200.0
        vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9
        # TYPE vllm:prompt_tokens counter
        vllm:prompt_tokens_total{engine="0",model_name="m"} 1200.0
        vllm:prompt_tokens_total{engine="1",model_name="a {b} \\"c\\" d"} 300.0
        # TYPE vllm:num_requests_running gauge
        vllm:num_requests_running{engine="0"} 2.0
        """)
    assert counters(text) == {
        "vllm:prefix_cache_queries_total": 1200.0,
        "vllm:prompt_tokens_total": 1500.0,
    }


# --- the server process
# ---------------------------------------------------------------------------------

STANDIN = textwrap.dedent("""\
    import json, os, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port, mode = int(sys.argv[1]), sys.argv[2]
    print("stand-in", os.getpid(), "group", os.getpgrp(), flush=True)
    if mode == "crash":
        print("boom: failing on purpose", flush=True)
        sys.exit(3)
    if mode == "never-ready":
        time.sleep(120)
    if mode == "stubborn":  # ignores SIGTERM: only the SIGKILL after the grace ends it
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    resets = []
    class H(BaseHTTPRequestHandler):
        def reply(self, code, body):
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            body = b"fake:x_total 3.0\\n" if self.path == "/metrics" else b""
            self.reply(200 if self.path in ("/health", "/metrics") else 404, body)
        def do_POST(self):
            if mode == "dies":  # dies as a server out of memory would, mid warm-up
                print("CUDA out of memory: the stand-in dies", flush=True)
                os._exit(9)
            if self.path == "/reset_prefix_cache" and os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
                resets.append(1)
                self.reply(200, json.dumps({"success": mode != "busy" or len(resets) > 1}).encode())
            else:
                self.reply(404, b'{"detail":"Not Found"}')
        def log_message(self, *a):
            pass
    HTTPServer(("127.0.0.1", port), H).serve_forever()
    """)


@pytest.fixture
def standin(tmp_path):
    script, log, made = tmp_path / "standin.py", tmp_path / "server.log", []
    script.write_text(STANDIN)

    def make(mode: str = "ok", env: dict | None = None, timeout_s: float = 30.0) -> Server:
        port = free_port()
        srv = Server(
            [sys.executable, str(script), str(port), mode],
            f"http://127.0.0.1:{port}",
            log,
            env or {},
            timeout_s,
        )
        srv.grace_s = 2.0
        made.append(srv)
        return srv

    make.log = log
    yield make
    for srv in made:  # a failed test must not leave its stand-in running
        if srv.proc is not None and not group_gone(srv.proc.pid, 0.1):
            os.killpg(srv.proc.pid, signal.SIGKILL)


def test_healthy_start_reset_counters_and_clean_stop(standin):
    srv = standin(env={"VLLM_SERVER_DEV_MODE": "1"})
    with srv:
        assert srv.alive() and srv.startup_s > 0 and srv.reset_prefix_cache() is True
        assert srv.counters() == {"fake:x_total": 3.0}
        pgid = srv.proc.pid
    assert group_gone(pgid) and not srv.alive()


def test_reset_without_dev_mode_and_a_busy_cache(standin):
    with standin() as srv, pytest.raises(ServerError, match="only with VLLM_SERVER_DEV_MODE=1"):
        srv.reset_prefix_cache()
    with standin("busy", env={"VLLM_SERVER_DEV_MODE": "1"}) as srv:
        assert srv.reset_prefix_cache() is True  # refused once (busy), then done


def test_crash_before_ready_and_health_timeout_name_what_happened(standin):
    with pytest.raises(
        ServerError, match=r"(?s)exited with code 3 before it was ready.*boom: failing on purpose"
    ):
        with standin("crash"):
            pass
    srv = standin("never-ready", timeout_s=1.0)
    with pytest.raises(ServerError, match="did not answer /health within 1 s"):
        with srv:
            pass
    assert group_gone(srv.proc.pid)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_ctrl_c_or_an_error_inside_ends_the_whole_group_even_a_stubborn_one(standin, exc):
    srv = standin("stubborn")
    with pytest.raises(exc):
        with srv:
            raise exc()
    assert group_gone(srv.proc.pid)


# --- the arithmetic
# ----------------------------------------------------------------------------------


def vllm_get_request_delays(n, rate, burstiness, seed):
    """vLLM 0.26.0 vllm/benchmarks/serve.py: main_async seeds, get_request draws, sums and
    rescales."""
    np.random.seed(seed)
    delay_ts = [
        0
        if rate == float("inf")
        else np.random.gamma(shape=burstiness, scale=1.0 / (rate * burstiness))
        for _ in range(n)
    ]
    for i in range(1, len(delay_ts)):
        delay_ts[i] += delay_ts[i - 1]
    if delay_ts[-1] != 0:
        delay_ts = [delay * ((n / rate) / delay_ts[-1]) for delay in delay_ts]
    return delay_ts


@pytest.mark.parametrize(
    "rate,burstiness,seed", [(10.0, 1.0, 0), (3.5, 0.3, 42), (100.0, 4.0, 7), (math.inf, 1.0, 0)]
)
def test_schedule_is_vllm_bench_serves_bit_for_bit(rate, burstiness, seed):
    assert arrival_offsets(500, rate, burstiness, seed) == vllm_get_request_delays(
        500, rate, burstiness, seed
    )


def test_schedule_seeds_spread_and_even_spacing():
    a = arrival_offsets(100, 20.0, 1.0, seed=3)
    assert a == arrival_offsets(100, 20.0, 1.0, seed=3) and a != arrival_offsets(
        100, 20.0, 1.0, seed=4
    )
    assert a == sorted(a) and a[-1] == pytest.approx(100 / 20.0)
    gaps = np.diff([0.0, *arrival_offsets(40_000, 8.0, 0.25, seed=1)])
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)  # gamma CV = 1/sqrt(burstiness)
    assert (
        arrival_offsets(4, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])
        and arrival_offsets(0, 5.0) == []
    )


def rec(
    i: int,
    sent: float,
    ttft: float,
    latency: float,
    tokens: int,
    ok: bool = True,
    itl=(),
    due: float = 0.0,
):
    out = SimpleNamespace(
        success=ok, ttft=ttft, latency=latency, output_tokens=tokens, prompt_len=10, itl=list(itl)
    )
    out.error = "" if ok else "Traceback ...\nClientConnectorError: refused"
    return Record(i, due, sent, out)


def test_rate_figures_exact():
    records = [
        rec(0, 0.0, 0.1, 0.5, 5, itl=[0.1, 0.1, 0.1, 0.1]),
        rec(1, 0.2, 0.3, 1.3, 11, itl=[0.1] * 10, due=0.1),
        rec(2, 0.4, 0.0, 0.0, 0, ok=False),
    ]
    p = rate_point(
        RateRun(5.0, records, 0.0), [], ["exact_match"], {"ttft_ms": 200, "tpot_ms": 100}
    )
    assert (p.requests, p.completed, p.errors, p.wall_s) == (3, 2, 1, pytest.approx(1.5))
    assert p.request_throughput == pytest.approx(2 / 1.5) and p.output_throughput == pytest.approx(
        16 / 1.5
    )
    assert p.ttft_ms.mean == pytest.approx(200) and p.ttft_ms.p50 == pytest.approx(200)
    assert p.tpot_ms.p50 == pytest.approx(100) and p.e2e_ms.p99 == pytest.approx(1292)
    assert p.good == 1 and p.goodput == pytest.approx(1 / 1.5)  # the second misses the TTFT SLO
    assert p.queue_ms.p99 == pytest.approx(394) and p.error_samples == [
        "ClientConnectorError: refused"
    ]
    # [0, .5), [.2, 1.5), [.4, .4): the failed one ends as it starts
    assert peak_concurrency(records) == 2


def _point(rate: float, achieved: float, ttft: float):
    run = RateRun(rate, [rec(0, 0.0, ttft / 1000, 1.0, 2)], 0.0)
    return rate_point(run, [], [], {}).model_copy(update={"request_throughput": achieved})


def test_saturation_needs_stalled_throughput_and_growing_ttft():
    assert saturation([_point(10, 9.9, 50), _point(20, 12.0, 400)])[-1].startswith(
        "TTFT p50 400.0 ms > 2 x 50.0 ms"
    )
    # throughput stalls, TTFT does not grow
    assert saturation([_point(10, 9.9, 50), _point(20, 12.0, 90)]) == []
    # TTFT grows, throughput keeps up
    assert saturation([_point(10, 9.9, 50), _point(20, 19.5, 400)]) == []
    inf = saturation([_point(10, 9.9, 50), _point(math.inf, 10.2, 900)])
    assert "gains less than 5% on 9.90 req/s at 10 req/s" in inf[0]


def test_load_spec_from_yaml_with_inf_and_round_trip():
    spec = LoadSpec.model_validate(
        yaml.safe_load(
            "request_rate: [10, 25, 50, .inf]\nmax_concurrency: 64\nslo: {ttft_ms: 200, tpot_ms: "
            "50}\n"
        )
    )
    assert (
        spec.request_rate == [10, 25, 50, math.inf]
        and spec.burstiness == 1.0
        and spec.warmup_requests == 20
    )
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
        # true is no number here either (pydantic would read it as 1 ms)
        ({"request_rate": [1], "slo": {"ttft_ms": True}}, "slo", "input_value='true'"),
        ({"request_rate": [True]}, "request_rate", "not 'true'"),
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


def test_load_with_replicas_is_refused(tmp_path):
    """A sweep of one server would report one replica's requests while offering each replica the
    rates."""
    path = write(tmp_path / "s.yaml", recipe("s"))
    res = CliRunner().invoke(cli, ["check", str(path), "--set", "replicas=2", "--no-tokens"])
    assert user_error(res) == (
        "Error: {tmp}/s.yaml: invalid recipe\n"
        "  line 1, (top level): `load` measures one server under load; replicas: 2 would offer "
        "each replica the rates and report one replica's requests: set replicas: 1 (one server per "
        "serving run)\n"
    )


def test_a_server_left_running_by_a_killed_call_is_ended_by_the_next_start(standin):
    """kill -9 of the runner and of the server's watcher leaves the server in its session: the next
    start ends it."""
    srv = standin()
    srv.__enter__()
    sid = srv.proc.pid
    server = next(p for p in session_members(sid) if p != sid)  # the stand-in under the watcher
    # the watcher (and the runner before it) killed: the server runs on
    os.kill(sid, signal.SIGKILL)
    srv.proc.wait()
    assert server in session_members(sid) and srv.session_file.is_file()
    again = standin()
    assert (
        again.end_leftover() == sid and not session_members(sid) and not again.session_file.exists()
    )
    assert again.end_leftover() is None  # nothing left: nothing to end


def test_a_leftover_session_file_of_another_command_ends_nothing(standin):
    """A session id taken since by other processes (here: this test's own session) is left alone."""
    srv = standin()
    srv.session_file.write_text(json.dumps({"session": os.getsid(0), "cmd": ["not", "this"]}))
    assert os.getpid() in session_members(os.getsid(0))
    assert srv.end_leftover() is None and not srv.session_file.exists()


def test_a_server_that_dies_during_warm_up_is_reported_as_its_death_with_its_log(
    standin, monkeypatch
):
    """Not as the `Connection refused` its client then sees."""
    import runner.serve.run as sr

    srv = standin("dies", env={"VLLM_SERVER_DEV_MODE": "1"})
    with srv:

        def run_rate(url, recipe, prompts, rate, warmed):
            warmed()  # the prefix-cache reset after the warm-up: the server dies answering it
            raise AssertionError("not reached")

        monkeypatch.setattr(sr, "run_rate", run_rate)
        load, model = SimpleNamespace(request_indices=lambda n: [0]), SimpleNamespace(id="m")
        recipe = SimpleNamespace(load=load, model=model, sampling=None)
        unit = SimpleNamespace(loaded=SimpleNamespace(recipe=recipe), prepared=None)
        with pytest.raises(sr.ServerError) as e:
            sr.Sweep(srv, unit, ["t"], [[1, 2]], None).rate(10.0)
    assert e.value.message.startswith(
        f"the server (pid {srv.pid}) died during the warm-up of rate 10 req/s: it exited with code "
        f"9; last lines of {srv.log}:\n"
    )
    assert (
        "CUDA out of memory: the stand-in dies" in e.value.message
        and "refused" not in e.value.message
    )
    assert e.value.hint.startswith("GPU memory ran out")  # from the log's `out of memory`


def killed(monkeypatch, tmp_path, vllm_client_dir, die_at: int) -> tuple:
    """`runner go` of a 2-rate sweep (2 and 4 req/s, evenly spaced: each request is answered before
    the next is due; per rate 1 warm-up request and 3 measured ones) whose fake server kills itself
    with SIGKILL on its `die_at`th request."""
    monkeypatch.setenv("RUNNER_FAKE_SERVER_DIE_AT", str(die_at))
    monkeypatch.syspath_prepend(str(vllm_client_dir))
    load = {"request_rate": [2, 4], "num_requests": 3, "warmup_requests": 1, "burstiness": "inf"}
    path, out = write(tmp_path / "k.yaml", recipe("k", load=load)), tmp_path / "out"
    res = CliRunner().invoke(cli, ["go", str(path), "--out", str(out), "--no-progress"])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    log = out / "k" / "engine.log"
    pid = int(re.findall(r"fake server pid (\d+)", log.read_text())[-1])
    lines = log.read_text().strip().splitlines()[-15:]
    assert f"fake server: killing itself on request {die_at}, as asked" in lines
    tail = f"; last lines of {log}:\n" + "\n".join(lines)
    return res, result(out, "k"), pid, tail


HINT = (
    "SIGKILL is what the kernel's out-of-memory killer sends (`dmesg` shows it): ask the server "
    "for less memory or free some; its log says why: {}"
)


def test_a_server_killed_during_warm_up_is_its_death_not_a_client_error(
    monkeypatch, tmp_path, vllm_client_dir
):
    res, r, pid, tail = killed(monkeypatch, tmp_path, vllm_client_dir, 1)
    error = (
        f"the server (pid {pid}) died during the warm-up of rate 2 req/s: it was killed by SIGKILL"
    )
    assert r.status == "failed" and r.error == error + tail
    assert r.hint == HINT.format(tmp_path / "out" / "k" / "engine.log")
    assert r.serving.rates == []  # nothing measured before it
    assert f"FAILED k: {error + tail}\n  hint: {r.hint}\n" in res.output


def test_a_server_killed_during_a_rate_keeps_the_rates_before_it(
    monkeypatch, tmp_path, vllm_client_dir
):
    # requests 1-4: rate 2 (warm-up, 3 measured); 5: rate 4's warm-up; 7: its second measured
    res, r, pid, tail = killed(monkeypatch, tmp_path, vllm_client_dir, 7)
    assert r.error == (
        f"the server (pid {pid}) died at rate 4 req/s (1 of 3 measured requests completed): it was "
        "killed by SIGKILL (the rates before it are kept: 2 req/s)" + tail
    )
    assert r.hint == HINT.format(tmp_path / "out" / "k" / "engine.log")
    [kept] = r.serving.rates
    assert (kept.rate, kept.completed, kept.errors, r.serving.headline_rate) == (2, 3, 0, None)
    report = (tmp_path / "out" / "k" / "report.md").read_text()
    assert (
        "**The sweep did not finish** (the run failed: above): below are the rates measured before "
        "it failed, with no headline rate."
        in report
        and "**Headline" not in report
        and "| 2 " in report
    )


def test_a_client_error_with_a_live_server_stays_a_client_error(tmp_path, vllm_client_dir):
    """The first measured request goes to a port nobody listens on: its client's error is the
    rate's, the server lives, the sweep goes on."""
    import runner.serve.run as sr

    load = {"request_rate": [2, 4], "num_requests": 3, "warmup_requests": 1, "burstiness": "inf"}
    path, out = write(tmp_path / "c.yaml", recipe("c", load=load)), tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(vllm_client_dir))
        c, calls, port = sr.client(), [], free_port()
        send = c.async_request_openai_completions

        async def one_astray(args, session):
            calls.append(args)
            if len(calls) == 2:
                args = replace(args, api_url=f"http://127.0.0.1:{port}/v1/completions")
            return await send(args, session)

        mp.setattr(c, "async_request_openai_completions", one_astray)
        res = CliRunner().invoke(cli, ["go", str(path), "--out", str(out), "--no-progress"])
    r = result(out, "c")
    assert res.exit_code == 0 and r.status == "ok" and "died" not in res.output, res.output
    first, second = r.serving.rates
    assert (first.completed, first.errors, second.completed, second.errors) == (2, 1, 3, 0)
    assert first.error_samples == [
        f"aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 127.0.0.1:{port} "
        f"ssl:default [Connect call failed ('127.0.0.1', {port})]"
    ]


def test_exit_status_in_words():
    assert [exit_status(c) for c in (0, 3, -9, -15, -40)] == [
        "exited with code 0",
        "exited with code 3",
        "was killed by SIGKILL",
        "was killed by SIGTERM",
        "was killed by signal 40",  # a real-time signal has no name
    ]


def test_the_calls_timeout_ends_a_sweep_after_the_rate_that_passes_it(tmp_path, vllm_client_dir):
    """Found by a tester: --timeout was ignored for a `load:` recipe (it runs in the call's own
    process, not a job's, so the job's timeout never applied)."""
    # each request streams 4 chunks 0.3 s apart: the first rate alone outlasts the 1-s limit
    load = {"request_rate": [5, 10, 20], "num_requests": 4, "warmup_requests": 0}
    d = recipe("slow", load=load, delay_s=0.3)
    path, out = write(tmp_path / "slow.yaml", d), tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(vllm_client_dir))
        args = ["go", str(path), "--out", str(out), "--no-progress", "--timeout", "1"]
        r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    res = result(out, "slow")
    assert [p.rate for p in res.serving.rates] == [5]
    assert (
        "--timeout (1 s) ends the sweep after 5 req/s; higher rates not run (10, 20)" in res.notes
    )
