"""The child process that runs one recipe: `python -m runner.execution.worker JOB.json`.

Its stdout/stderr (and those of every process the engine starts) go to
`<out>/<name>/engine.log`; the progress bar goes to the terminal."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


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


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    watch_parent()
    # SIGTERM -> SystemExit, so `finally` blocks shut the engine down
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    log_path = job.get("log")
    if log_path:
        tty = os.dup(2)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        os.environ["RUNNER_ENGINE_LOG"] = log_path
        progress_stream = os.fdopen(tty, "w", buffering=1)
    else:
        progress_stream = sys.stderr
    from runner.config.recipe import LoadedRecipe
    from runner.execution.run import RunOptions, run_recipe

    lr = LoadedRecipe.model_validate(job["loaded"])     # as validated by the runner: later edits don't leak in
    opts = RunOptions(out=Path(job["out"]), limit=job.get("limit"), estimate=job.get("estimate"),
                      command=job.get("command", ""), progress=job.get("progress", True),
                      progress_file=progress_stream)
    prepared = None
    if job.get("prepared"):
        import pickle
        with open(job["prepared"], "rb") as f:
            prepared = pickle.load(f)
    result = run_recipe(lr, opts, prepared, job.get("inputs"))
    sys.stdout.flush()
    sys.stderr.flush()
    return 0 if result.status == "ok" else 1


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # skip interpreter teardown: vLLM can hang there for minutes
