"""Run each job in its own process group; end it and everything it started.

The parent never imports torch or vLLM. The job (recipes, prepared inputs, options) goes to the
child through its standard input, so no temporary file is left behind even if the runner is killed.
When a job ends (done, error, timeout, Ctrl-C) the whole process group is killed, and `run_isolated`
returns only once no member of it is left, so an engine core that outlives its parent cannot hold
the GPU; GPU memory is checked to be back (NVML) before the next job starts. If a job's process dies
in one recipe, that recipe is recorded failed (with what its log shows) and the recipes after it run
again in a fresh process. The child is this module (`python -m runner.run.isolate`): its
stdout/stderr (and those of every process the engine starts) go to the running recipe's
`engine.log`; the progress bar goes to the terminal."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

from runner.base.nvml import used_gib, wait_for_release
from runner.base.procs import kill_group
from runner.results import RunResult, Timings
from runner.run.job import Job, Unit
from runner.run.result import Failure, Measured, failure_hint, run_result

LOG_MARK = "===== runner:"


def failed_result(unit: Unit, error: str, hint: str | None, command: str) -> RunResult:
    """A recipe that ended before it could report (its engine's verdicts on an empty log)."""
    evidence = unit.loaded.recipe.engine.crash_evidence("")
    return run_result(unit, command, Measured(), Failure(error, hint, evidence))


def _start(job: Job) -> subprocess.Popen:
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    job = replace(job, spawned_at=time.time())
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.run.isolate"],
        start_new_session=True,
        env=env,
        stdin=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps(job, pickle.HIGHEST_PROTOCOL))
        proc.stdin.close()
    except BrokenPipeError:  # the child died before reading its job: its exit code tells
        pass
    except BaseException:
        kill_group(proc.pid, grace_s=2, proc=proc)
        raise
    return proc


def _wait(proc: subprocess.Popen, timeout_s: float | None) -> str | None:
    try:
        proc.wait(timeout=timeout_s)
        return None
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_s:.0f} s (recipe timeout); the run was ended"
    except KeyboardInterrupt:
        kill_group(proc.pid, grace_s=5, proc=proc)
        raise
    finally:
        kill_group(proc.pid, proc=proc)
        proc.wait()


def _collect(
    job: Job, proc: subprocess.Popen, error: str | None, since: int
) -> tuple[list[RunResult], tuple[Unit, ...]]:
    """Results of the units that finished, a failure for the one that was running, and the others
    without results (to run again in a fresh process: their finished repeats are kept). The one
    running is the one whose engine.log was written last after `since` (the worker writes a line
    there before each generation; none written: the first pending one). A process that ended well
    leaves no failure: a unit without results then has repeats still to measure in a later turn."""
    out: list[RunResult] = []
    pending: list[Unit] = []
    for unit in job.units:
        folder = job.options.folder(unit.name)
        if folder.results.is_file():
            out.append(RunResult.model_validate_json(folder.results.read_bytes()))
        else:
            pending.append(unit)
    if not pending or (error is None and proc.returncode == 0):
        return out, ()
    logged = {u.name: _mtime(job.options.folder(u.name).engine_log) for u in pending}
    running = max(pending, key=lambda u: logged[u.name] if logged[u.name] > since else -1)
    folder = job.options.folder(running.name)
    text = ""
    with contextlib.suppress(OSError):
        text = folder.engine_log.read_text(errors="replace")
    if (why := error) is None:
        why = f"the recipe's process ended with exit code {proc.returncode} before writing results"
        tail = text.strip().splitlines()[-5:]
        why += (": " + " | ".join(t.strip() for t in tail)[-600:]) if tail else ""
    hint = failure_hint(why) or f"see {folder.engine_log}"
    # this run's part
    evidence = running.loaded.recipe.engine.crash_evidence(text.rsplit(LOG_MARK, 1)[-1])
    m = Measured(Timings(total_s=(time.time_ns() - since) / 1e9))  # a tune's budget counts it
    res = run_result(running, job.options.command, m, Failure(why, hint, evidence))
    folder.write(res)
    return [*out, res], tuple(u for u in pending if u is not running)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def run_isolated(job: Job, warn=print) -> list[RunResult]:
    """Run a job's recipes in their own process group; one result per recipe, in order. `warn` gets
    a line when GPU memory is not back after the job (it goes to the last recipe's engine.log
    too)."""
    first = job.units[0].name
    for unit in job.units:
        folder = job.options.folder(unit.name)
        folder.root.mkdir(parents=True, exist_ok=True)
        folder.results.unlink(missing_ok=True)
        # a resumed run keeps the earlier log above
        with open(folder.engine_log, "a", encoding="utf-8") as f:
            f.write(
                f"\n{LOG_MARK} {unit.name} started {time.strftime('%Y-%m-%d %H:%M:%S')} =====\n"
            )
            if unit.name != first:
                f.write(
                    f"(runs on the engine started for {first}: the engine's own output is in "
                    f"{job.options.folder(first).engine_log})\n"
                )
    baseline, since = used_gib(), time.time_ns()
    try:
        proc = _start(job)
    except OSError as e:  # the recipes fail; the others still run
        why = f"could not start the recipe's process: {type(e).__name__}: {e}"
        results = [failed_result(u, why, None, job.options.command) for u in job.units]
        for res in results:
            job.options.folder(res.name).write(res)
        return results
    error = _wait(proc, job.timeout_s())
    after = wait_for_release(baseline)
    results, rest = _collect(job, proc, error, since)
    if None not in (baseline, after) and after > baseline + 1.0:
        line = (
            f"GPU memory not fully released after the run: {after:.1f} GiB used vs "
            f"{baseline:.1f} GiB before"
        )
        last = job.units[-1].name
        with open(job.options.folder(last).engine_log, "a", encoding="utf-8") as f:
            f.write(f"{LOG_MARK} {line}\n")
        warn(f"WARNING: {last}: {line}")
    if rest:
        results += run_isolated(replace(job, units=rest), warn)
    return results


def main() -> int:
    """The child: run the job on its stdin, one engine for all its recipes; exit 0 unless the
    process itself fails (a recipe that fails is recorded in its results.json)."""
    job = pickle.load(sys.stdin.buffer)
    parent = os.getppid()

    def watch_parent() -> None:
        """If the runner that started us dies (even by SIGKILL), end this process group: the engine
        and every process it started go with it, so nothing keeps holding the GPU."""
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch_parent, daemon=True, name="watch-parent").start()
    # SystemExit: `finally` blocks shut the engine down
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    from runner.run.loop import SharedEngine, run_rounds

    progress: IO[str] = os.fdopen(os.dup(2), "w", buffering=1)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)

    def to_log(unit: Unit) -> None:
        """This process's stdout/stderr (fds 1 and 2) appended to the recipe's engine.log while it
        generates."""
        log = str(job.options.folder(unit.name).engine_log)
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.environ["RUNNER_ENGINE_LOG"] = log
        print(f"runner worker pid {os.getpid()} (process group {os.getpgrp()})", flush=True)

    shared = SharedEngine(job.units[0])
    shared.stages["process_s"] = time.time() - job.spawned_at
    try:
        # each recipe's result is in its results.json
        run_rounds(job, shared, progress, before=to_log)
    finally:
        shared.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: vLLM can hang there for minutes
