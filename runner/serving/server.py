"""An OpenAI-compatible server (vLLM's) as a context manager: start, wait until healthy, stop the group.

Facts from vLLM 0.26.0's source (the wheel's `vllm/`):
- `python -m vllm.entrypoints.cli.main serve MODEL` (cli/main.py has the `__main__` guard; cli/serve.py
  takes the model as the positional `model_tag`).
- Engine arguments are `--kebab-case` of the `EngineArgs` field (engine/arg_utils.py). A bool field is
  an `argparse.BooleanOptionalAction`: `--enforce-eager` / `--no-enforce-eager`,
  `--enable-prefix-caching` / `--no-enable-prefix-caching`, `--trust-remote-code`. Exceptions, plain
  `store_true` flags with no `--no-` form: `--disable-log-stats` and the others in `_BARE_FLAGS`.
  Lists are `nargs="+"`; dict-valued fields take JSON. Values are written `--flag=value`. Checked: 0.26.0's
  own parser (`make_arg_parser`) reads serve_command(llm_kwargs) back into EngineArgs equal to llm_kwargs.
- `GET /health` answers 200 once the engine is up (503 when it has died).
- `POST /reset_prefix_cache` (entrypoints/serve/dev/cache/api_router.py) answers `{"success": bool}`
  (false while running requests hold blocks); it is only mounted when the server runs with
  `VLLM_SERVER_DEV_MODE=1` (api_server.py; vllm bench sweep's server.py sets it for the same reason).
- `GET /metrics` is Prometheus text; counters are exposed with a `_total` suffix and a
  `model_name`/`engine` label per engine: `vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`,
  `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, `vllm:num_preemptions_total`, ...
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from typing_extensions import Self

from runner.errors import RunnerError
from runner.execution.process_group import stop_group

DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
# vLLM 0.26.0 flags with no `--no-` form: `action="store_true"` (arg_utils.py, openai/cli_args.py) and
# `hf_token` (bool | str | None: a bare flag means True). False leaves them out.
_BARE_FLAGS = {
    "disable_log_stats",
    "data_parallel_multi_port_external_lb",
    "aggregate_engine_logging",
    "headless",
    "grpc",
    "hf_token",
}


class ServerError(RunnerError):
    """The server did not start, crashed, or refused a control call."""


def cli_args(kwargs: dict[str, Any]) -> list[str]:
    """EngineArgs-style kwargs -> vLLM CLI flags (`model` excluded: it is the positional argument; None
    values left out, so vLLM's default applies)."""
    out: list[str] = []
    for k, v in kwargs.items():
        if k == "model" or v is None:
            continue
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            if k in _BARE_FLAGS:
                out += [flag] if v else []
            else:
                out.append(flag if v else "--no-" + k.replace("_", "-"))
        elif isinstance(v, dict):
            out.append(f"{flag}={json.dumps(v)}")
        elif isinstance(v, (list, tuple)):
            if v:
                out += [flag, *(str(x) for x in v)]
        else:
            out.append(f"{flag}={v}")  # `=`: a value starting with `-` is not read as a flag
    return out


def serve_command(
    kwargs: dict[str, Any], port: int, host: str = "127.0.0.1", python: str = sys.executable
) -> list[str]:
    """`python -m vllm.entrypoints.cli.main serve MODEL --host H --port P <flags>` from llm_kwargs-style
    kwargs (runner.engines.vllm.VLLMSpec.llm_kwargs). Arguments the installed vLLM lacks (`swap_space` on
    0.26) must be dropped by the caller: the server exits with an argparse error otherwise."""
    return [
        python,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        str(kwargs["model"]),
        "--host",
        host,
        "--port",
        str(port),
        *cli_args(kwargs),
    ]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (another process may still take it before the server binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)')


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {sample name: value summed over its label sets}; comments skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def counter(metrics: dict[str, float], name: str) -> float | None:
    """A counter by its declared name (`vllm:prompt_tokens`) or exposed one (`..._total`)."""
    for key in (name, name + "_total", name.removesuffix("_total")):
        if key in metrics:
            return metrics[key]
    return None


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()[-n:]
    except OSError:
        return "(no log)"
    return "\n".join(lines)


class Server:
    """A server process in its own process group, healthy between `__enter__` and `__exit__`.

    `command` is any argv (a stand-in in tests); `base_url` is where it listens. Output goes to
    `log_path` (appended); `env` is added to this process's environment. Entering waits until
    `GET health_path` answers 200, raising ServerError when the process exits first (exit code and the
    log's last lines) or after `startup_timeout_s`. Leaving — normally, on an exception, on Ctrl-C, or
    on SIGTERM to this process (turned into SystemExit while inside, main thread only) — SIGTERMs the
    whole group, then SIGKILLs it after `grace_s` (keep it below the grace a parent gives this process:
    runner.isolate allows 10 s before its own SIGKILL, which the server's new session does not reach)."""

    def __init__(
        self,
        command: list[str],
        base_url: str,
        log_path: str | Path,
        *,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 900.0,
        grace_s: float = 5.0,
        health_path: str = "/health",
        poll_s: float = 0.25,
    ):
        self.command, self.base_url = list(command), base_url.rstrip("/")
        self.log_path, self.env = Path(log_path), dict(env or {})
        self.startup_timeout_s, self.grace_s = startup_timeout_s, grace_s
        self.health_path, self.poll_s = health_path, poll_s
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self._old_term: Any = None
        self._trapped = False

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def __enter__(self) -> Self:
        self._trap_sigterm()
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **self.env},
            )
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise ServerError(
                    f"the server exited with code {rc} before it was ready; last lines of "
                    f"{self.log_path}:\n{_tail(self.log_path)}"
                )
            if self._status(self.health_path, timeout=2.0) == 200:
                self.startup_s = time.monotonic() - t0
                return
            if time.monotonic() - t0 > self.startup_timeout_s:
                raise ServerError(
                    f"the server did not answer {self.health_path} within "
                    f"{self.startup_timeout_s:g} s; last lines of {self.log_path}:\n"
                    f"{_tail(self.log_path)}"
                )
            time.sleep(self.poll_s)

    def stop(self) -> None:
        """End the whole process group (idempotent). Ctrl-C or SIGTERM arriving meanwhile (main thread) is
        held until the group is gone, then raised; the SIGTERM handler from before `__enter__` is restored."""
        stop_group(self.proc, self.grace_s, then=self._restore_sigterm)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _request(self, method: str, path: str, timeout: float) -> tuple[int, bytes]:
        req = urllib.request.Request(self.base_url + path, method=method, data=b"" if method == "POST" else None)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
        try:
            with opener.open(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def _status(self, path: str, timeout: float) -> int | None:
        try:
            return self._request("GET", path, timeout)[0]
        except (OSError, ValueError):  # refused, reset, timed out: not up yet
            return None

    def reset_prefix_cache(self, retries: int = 20, wait_s: float = 0.5) -> bool:
        """POST /reset_prefix_cache until it reports success (running requests make it fail); the server
        needs VLLM_SERVER_DEV_MODE=1 (DEV_MODE_ENV), else the endpoint is absent (404 -> ServerError)."""
        for attempt in range(retries):
            status, body = self._request("POST", "/reset_prefix_cache", timeout=30)
            if status == 404:
                raise ServerError(
                    "POST /reset_prefix_cache: 404; vLLM mounts it only when the server runs "
                    "with VLLM_SERVER_DEV_MODE=1"
                )
            if status != 200:
                raise ServerError(f"POST /reset_prefix_cache: HTTP {status}: {body[:200]!r}")
            try:
                ok = bool(json.loads(body or b"{}").get("success", True))
            except ValueError:
                ok = True  # older servers answer 200 with no body
            if ok:
                return True
            if attempt + 1 < retries:
                time.sleep(wait_s)
        return False

    def metrics(self) -> dict[str, float]:
        """GET /metrics, parsed by parse_prometheus."""
        status, body = self._request("GET", "/metrics", timeout=30)
        if status != 200:
            raise ServerError(f"GET /metrics: HTTP {status}")
        return parse_prometheus(body.decode("utf-8", "replace"))

    def _trap_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_term(signum: int, frame: Any) -> None:
            raise SystemExit(128 + signum)

        self._old_term, self._trapped = signal.signal(signal.SIGTERM, on_term), True

    def _restore_sigterm(self) -> None:
        if self._trapped:
            signal.signal(signal.SIGTERM, self._old_term if self._old_term is not None else signal.SIG_DFL)
            self._trapped = False
