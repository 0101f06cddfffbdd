"""The server lifecycle with a stand-in process (no vLLM): health, crash and timeout before ready,
the whole process group ended on every path (Ctrl-C, exceptions, SIGTERM to the owner), the prefix-cache
reset and /metrics; and the vLLM command line built from a recipe's engine settings.

Only processes these tests start are checked: the stand-in (a group leader) and the one child it starts."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runner.config.common import ModelSpec
from runner.engines.vllm import VLLMSpec
from runner.serving.server import (
    DEV_MODE_ENV,
    Server,
    ServerError,
    cli_args,
    counter,
    free_port,
    parse_prometheus,
    serve_command,
)

PROJECT = Path(__file__).resolve().parents[1]

METRICS = textwrap.dedent("""\
    # HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
    # TYPE vllm:prefix_cache_queries_total counter
    vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200.0
    vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9
    vllm:prefix_cache_hits_total{engine="0",model_name="m"} 800.0
    vllm:prompt_tokens_total{engine="0",model_name="m"} 1200.0
    vllm:prompt_tokens_total{engine="1",model_name="m"} 300.0
    vllm:num_requests_running{engine="0",model_name="a {b} \\"c\\" d"} 2.0
    vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 12.0
    """)

STANDIN = textwrap.dedent("""\
    import json, os, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port, mode, pid_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    print("stand-in starting", mode, "dev mode:", os.environ.get("VLLM_SERVER_DEV_MODE"), flush=True)
    if mode == "crash":
        print("boom: failing on purpose", flush=True)
        sys.exit(3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(pid_file, "w") as f:
        f.write(str(child.pid))
    if mode == "never-ready":
        time.sleep(120)
    if mode == "stubborn":                   # ignores SIGTERM: only the SIGKILL after the grace ends it
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    resets = []
    class H(BaseHTTPRequestHandler):
        def reply(self, code, body, ctype="application/json"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            if self.path == "/health":
                self.reply(200, b"")
            elif self.path == "/metrics":
                self.reply(200, open(os.environ["STANDIN_METRICS"], "rb").read(), "text/plain")
            else:
                self.reply(404, b"{}")
        def do_POST(self):
            if self.path == "/reset_prefix_cache" and os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
                resets.append(1)
                self.reply(200, json.dumps({"success": mode != "busy" or len(resets) > 1}).encode())
            else:
                self.reply(404, b'{"detail":"Not Found"}')
        def log_message(self, *a):
            pass
    HTTPServer(("127.0.0.1", port), H).serve_forever()
    """)


def gone(pid: int) -> bool:
    """Exited (or a zombie nobody reaped): the process no longer runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


@pytest.fixture
def standin(tmp_path):
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    (tmp_path / "metrics.txt").write_text(METRICS)
    started: list[int] = []

    def make(mode: str = "ok", env: dict | None = None, **kw) -> Server:
        port = free_port()
        cmd = [sys.executable, str(script), str(port), mode, str(tmp_path / "child.pid")]
        srv = Server(
            cmd,
            f"http://127.0.0.1:{port}",
            tmp_path / "server.log",
            grace_s=2.0,
            poll_s=0.05,
            env={"STANDIN_METRICS": str(tmp_path / "metrics.txt"), **(env or {})},
            **kw,
        )
        srv.started = started
        return srv

    make.child_pid = lambda: int((tmp_path / "child.pid").read_text())
    make.log = tmp_path / "server.log"
    yield make
    for pid in started:  # a failed test must not leave its stand-in running
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_healthy_start_reset_metrics_and_clean_stop(standin):
    srv = standin(env=DEV_MODE_ENV)
    with srv:
        srv.started.append(srv.pgid)
        assert srv.alive() and srv.startup_s is not None
        leader, child = srv.proc.pid, standin.child_pid()
        assert os.getpgid(child) == srv.pgid == leader  # the stand-in leads its own group
        assert srv.reset_prefix_cache() is True
        m = srv.metrics()
        assert counter(m, "vllm:prefix_cache_queries") == 1200 and counter(m, "vllm:prefix_cache_hits") == 800
        assert counter(m, "vllm:prompt_tokens") == 1500  # summed over both engines
    assert gone(leader) and gone(child) and srv.proc.returncode is not None
    assert "dev mode: 1" in standin.log.read_text()


def test_reset_without_dev_mode_says_what_is_missing(standin):
    with standin() as srv:
        srv.started.append(srv.pgid)
        with pytest.raises(ServerError, match="VLLM_SERVER_DEV_MODE=1"):
            srv.reset_prefix_cache()


def test_reset_retries_while_the_cache_is_busy(standin):
    with standin("busy", env=DEV_MODE_ENV) as srv:
        srv.started.append(srv.pgid)
        assert srv.reset_prefix_cache(retries=3, wait_s=0.01) is True


def test_crash_before_ready_names_exit_code_and_log(standin):
    srv = standin("crash")
    with pytest.raises(ServerError) as e, srv:
        pass
    msg = str(e.value)
    assert "exited with code 3" in msg and "boom: failing on purpose" in msg and "server.log" in msg
    assert gone(srv.proc.pid)


def test_health_timeout_ends_the_group(standin):
    srv = standin("never-ready", startup_timeout_s=0.5)
    t = time.monotonic()
    with pytest.raises(ServerError, match=r"did not answer /health within 0.5 s"), srv:
        pass
    assert time.monotonic() - t < 5
    srv.started.append(srv.pgid)
    assert gone(srv.proc.pid) and gone(standin.child_pid())


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_ctrl_c_or_an_error_inside_ends_the_whole_group(standin, exc):
    before = signal.getsignal(signal.SIGTERM)
    srv = standin()
    with pytest.raises(exc), srv:
        srv.started.append(srv.pgid)
        leader, child = srv.proc.pid, standin.child_pid()
        raise exc("stop")
    assert gone(leader) and gone(child)
    assert signal.getsignal(signal.SIGTERM) == before  # the owner's handler is back


@pytest.mark.parametrize("mode,terms", [("ok", 1), ("stubborn", 2)])
def test_sigterm_to_the_owner_ends_the_group(standin, tmp_path, mode, terms):
    """The owning process (a worker that runner.isolate SIGTERMs) takes its server down with it; a server
    that ignores SIGTERM is SIGKILLed after the grace, and a second SIGTERM meanwhile does not cut that short."""
    port = free_port()
    owner = tmp_path / "owner.py"
    owner.write_text(
        textwrap.dedent(f'''\
        import sys, time
        from runner.serving.server import Server
        cmd = [sys.executable, {str(tmp_path / "standin.py")!r}, "{port}", "{mode}", {str(tmp_path / "child.pid")!r}]
        with Server(cmd, "http://127.0.0.1:{port}", {str(tmp_path / "server.log")!r}, grace_s=1, poll_s=0.05,
                    env={{"STANDIN_METRICS": "-"}}) as s:
            print(s.pgid, flush=True)
            time.sleep(60)
        ''')
    )
    (tmp_path / "standin.py").write_text(STANDIN)
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    proc = subprocess.Popen(
        [sys.executable, str(owner)], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        leader = int(proc.stdout.readline())
        child = int((tmp_path / "child.pid").read_text())
        for _ in range(terms):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
        assert gone(leader) and gone(child)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --- the command line and /metrics parsing ------------------------------------------------------------


def test_serve_command_from_the_recipes_engine_settings():
    spec = VLLMSpec(
        kind="vllm",
        enable_prefix_caching=False,
        enforce_eager=True,
        max_model_len=4096,
        quantization="fp8",
        engine_args={"max_num_seqs": 128, "compilation_config": {"level": 0}, "long_prefill_token_threshold": -1},
    )
    kw = spec.llm_kwargs(ModelSpec(id="org/m", load_format="dummy"))
    cmd = serve_command(kw, port=8011, python="py")
    assert cmd[:8] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "org/m", "--host", "127.0.0.1", "--port"]
    args = cmd[8:]
    assert args[0] == "8011"
    for flag in [
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--no-trust-remote-code",
        "--max-model-len=4096",
        "--quantization=fp8",
        "--load-format=dummy",
        "--tokenizer=org/m",
        "--max-num-seqs=128",
        "--tensor-parallel-size=1",
        "--gpu-memory-utilization=0.9",
        '--compilation-config={"level": 0}',
        "--long-prefill-token-threshold=-1",
    ]:
        assert flag in args, flag
    assert not [a for a in args if "disable-log-stats" in a or "revision" in a or a.startswith("--model")]


def test_cli_args_bools_lists_and_bare_flags():
    assert cli_args({"enable_prefix_caching": True, "enforce_eager": False}) == [
        "--enable-prefix-caching",
        "--no-enforce-eager",
    ]
    assert cli_args({"disable_log_stats": True, "hf_token": False}) == ["--disable-log-stats"]
    assert cli_args({"disable_log_stats": False}) == []  # store_true: no --no- form in vLLM
    assert cli_args({"allowed_local_media_path": None, "served_model_name": ["a", "b"]}) == [
        "--served-model-name",
        "a",
        "b",
    ]


def test_parse_prometheus_sums_label_sets():
    m = parse_prometheus(METRICS)
    assert m["vllm:prompt_tokens_total"] == 1500 and m["vllm:prefix_cache_hits_total"] == 800
    assert m["vllm:num_requests_running"] == 2  # braces and quotes inside a label value
    assert m["vllm:time_to_first_token_seconds_bucket"] == 12
    assert counter(m, "vllm:prefix_cache_hits_total") == 800 and counter(m, "vllm:nothing") is None
    odd = parse_prometheus('# only a comment\n\nbad line\nx NaN\ny 2 1700000000000\nz{a="1"} +Inf\n')
    assert set(odd) == {"x", "y", "z"} and math.isnan(odd["x"]) and odd["y"] == 2 and odd["z"] == math.inf
