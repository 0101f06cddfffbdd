"""A recipe's engine as an OpenAI-compatible server: its process and its counters; the engine's spec
says how it starts and what its log shows took effect (`server_command`, `served_evidence`). Facts
from vLLM 0.26.0's source: `GET /health` answers 200 once the engine is up; `POST
/reset_prefix_cache` answers `{"success": bool}` (false while running requests hold blocks) and is
mounted only with `VLLM_SERVER_DEV_MODE=1`; `GET /metrics` is Prometheus text, counters with a
`_total` suffix. The server runs in a session of its own under a watcher (`_WATCH`) that ends the
whole session when the runner that started it dies, even by SIGKILL; on every other path `Server`
ends it on leaving."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from runner.base.errors import RunnerError
from runner.base.procs import cmdline, descendants, kill_group, session_members, stop_group
from runner.run.result import failure_hint

# the server's first process: starts the server in this session, ends the session once the runner is
# gone
_WATCH = """import os, signal, subprocess, sys, time
parent, p = int(sys.argv[1]), subprocess.Popen(sys.argv[2:])
while p.poll() is None:
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    time.sleep(0.2)
if p.returncode < 0:  # killed by a signal: the watcher too, so that the runner sees which
    try:
        signal.signal(-p.returncode, signal.SIG_DFL)
    except OSError:  # SIGKILL: no handler to reset
        pass
    os.kill(os.getpid(), -p.returncode)
sys.exit(p.returncode)"""


class ServerError(RunnerError):
    """The server did not start, crashed, or refused a control call."""

    serving = None  # the rates measured before the server died (a ServingResult), if any


def exit_status(code: int) -> str:
    """A process's return code in words: its exit code, or the signal that killed it."""
    if code >= 0:
        return f"exited with code {code}"
    with contextlib.suppress(ValueError):
        return f"was killed by {signal.Signals(-code).name}"
    return f"was killed by signal {-code}"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def counters(text: str) -> dict[str, float]:
    """The `*_total` counters of a Prometheus text exposition, each summed over its label sets."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_total"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


@dataclass(eq=False)
class Server:
    """A server process in a session of its own, healthy between `__enter__` and `__exit__`. Leaving
    (normally, on an error, Ctrl-C or SIGTERM) ends the whole session: SIGTERM, then SIGKILL after
    `grace_s`."""

    cmd: list[str]
    base_url: str  # without a trailing slash
    log: Path
    env: dict[str, str]
    timeout_s: float = 900.0
    proc: subprocess.Popen | None = None
    startup_s: float | None = None
    pid: int | None = None  # the server's own process (below the watcher), once ready
    grace_s: float = 5.0

    def __enter__(self) -> Server:
        # SIGTERM -> SystemExit: the group is ended
        old = signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
        self._restore = lambda: signal.signal(signal.SIGTERM, old)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def session_file(self) -> Path:
        """Beside the log while the server runs: its session id, so that a later call can end a
        server that a killed call left running (the watcher ends it when the runner dies; this
        covers the watcher's own death)."""
        return self.log.with_name(".server-session.json")

    def end_leftover(self) -> int | None:
        """End the server session an earlier call left running here (a process of that session still
        runs the command it recorded, so not one that took its ids since); returns the session id
        when it ended one."""
        try:
            kept = json.loads(self.session_file.read_text())
            sid, cmd = int(kept["session"]), "\0".join(kept["cmd"]).encode()
        except (OSError, ValueError, KeyError, TypeError):
            sid = None
        self.session_file.unlink(missing_ok=True)
        if sid is None or not any(cmdline(pid).startswith(cmd) for pid in session_members(sid)):
            return None
        kill_group(sid, self.grace_s)
        return sid

    def _start(self) -> None:
        if (sid := self.end_leftover()) is not None:
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(
                    f"ended the server session {sid} that an earlier, killed call left running\n"
                )
        t0 = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WATCH, str(os.getpid()), *self.cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **self.env},
            )
        self.session_file.write_text(json.dumps({"session": self.proc.pid, "cmd": self.cmd}))
        while self._health() != 200:
            code = self.proc.poll()
            if code is not None or time.monotonic() - t0 > self.timeout_s:
                what = f"did not answer /health within {self.timeout_s:g} s"
                what = what if code is None else f"{exit_status(code)} before it was ready"
                raise ServerError(f"the server {what}; {self.tail()}")
            time.sleep(0.25)
        self.startup_s = time.monotonic() - t0
        self.pid = next(iter(descendants(self.proc.pid)), None)

    def stop(self) -> None:
        """End the whole session (idempotent); Ctrl-C or SIGTERM arriving meanwhile waits until it
        is gone."""
        stop_group(self.proc, self.grace_s, then=self._restore)  # (set by __enter__)
        if self.proc is not None:
            self.session_file.unlink(missing_ok=True)

    def tail(self) -> str:
        lines = self.log.read_text(errors="replace").strip().splitlines()[-15:]
        return f"last lines of {self.log}:\n" + "\n".join(lines)

    def died(self, when: str, kept: str = "") -> ServerError:
        """The server's death as the error to report (not the connection error its clients saw):
        when, its exit code or signal, its last words, a hint."""
        code, tail = self.proc.returncode, self.tail()
        oom = (
            "SIGKILL is what the kernel's out-of-memory killer sends (`dmesg` shows it): ask the "
            "server for less memory or free some; "
            if code == -signal.SIGKILL
            else ""
        )
        return ServerError(
            f"the server (pid {self.pid}) died {when}: it {exit_status(code)}{kept}; {tail}",
            hint=failure_hint(tail) or f"{oom}its log says why: {self.log}",
        )

    def exits_within_2s(self) -> bool:
        """Whether the server has exited, or does within 2 seconds (a connection error can come
        just before)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(2.0)
        return not self.alive()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, method: str, path: str, timeout: float = 30) -> tuple[int, bytes]:
        req = urllib.request.Request(
            self.base_url + path, method=method, data=b"" if method == "POST" else None
        )
        try:  # never through a proxy
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                req, timeout=timeout
            ) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def _health(self) -> int | None:
        try:
            return self.request("GET", "/health", timeout=2.0)[0]
        except (OSError, ValueError):  # refused, reset, timed out: not up yet
            return None

    def reset_prefix_cache(self) -> bool:
        """POST /reset_prefix_cache until it reports success (running requests make it fail), 20
        tries at most."""
        for _ in range(20):
            status, body = self.request("POST", "/reset_prefix_cache")
            if status == 404:
                raise ServerError(
                    "POST /reset_prefix_cache: 404; vLLM mounts it only with VLLM_SERVER_DEV_MODE=1"
                )
            if status != 200:
                raise ServerError(f"POST /reset_prefix_cache: HTTP {status}: {body[:200]!r}")
            if json.loads(body or b"{}").get("success", True):
                return True
            time.sleep(0.5)
        return False

    def counters(self) -> dict[str, float]:
        """The server's /metrics counters now ({} when it has none to give)."""
        try:
            status, body = self.request("GET", "/metrics")
            return counters(body.decode("utf-8", "replace")) if status == 200 else {}
        except (OSError, ValueError):
            return {}
