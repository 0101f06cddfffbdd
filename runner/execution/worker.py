"""The child process that runs one job: `python -m runner.execution.worker` with the pickled job on
its standard input.

Its stdout/stderr (and those of every process the engine starts) go to the running recipe's
`engine.log`; the progress bar goes to the terminal."""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import IO


def watch_parent(poll_s: float = 0.5) -> None:
    """If the runner that started us dies (even by SIGKILL), end this process group: the
    engine and every process it started go with it, so nothing keeps holding the GPU."""
    import threading
    import time

    parent = os.getppid()

    def loop():
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=loop, daemon=True, name="watch-parent").start()


def redirect_output(log_path: str) -> None:
    """Point this process's stdout/stderr (fds 1 and 2) at `log_path`, appending."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ["RUNNER_ENGINE_LOG"] = log_path


def main() -> int:
    job = pickle.load(sys.stdin.buffer)
    watch_parent()
    # SIGTERM -> SystemExit, so `finally` blocks shut the engine down
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    from runner.execution.layout import RunFolder
    from runner.execution.run import SharedEngine, run_unit

    progress: IO[str] = os.fdopen(os.dup(2), "w", buffering=1)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.environ.update(job.env)
    shared = SharedEngine(job.units[0])
    ok = True
    try:
        for unit in job.units:
            redirect_output(str(RunFolder.of(job.options.out, unit.name).engine_log))
            print(f"runner worker pid {os.getpid()} (process group {os.getpgrp()})", flush=True)
            ok &= run_unit(unit, job.options, shared, progress).status == "ok"
    finally:
        shared.close()
    sys.stdout.flush()
    sys.stderr.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: vLLM can hang there for minutes
