"""Run each job in its own process group; end it and everything it started.

The parent never imports torch or vLLM. The job (recipes, prepared inputs, options) goes to the
child through its standard input, so no temporary file is left behind even if the runner is killed.
A job's process may be started ahead of it (`Worker`: Python, the runner and the engine's library
load meanwhile). When a job ends (done, error, timeout, Ctrl-C) the whole process group is killed,
and no member of it is left when the next job starts or `runner go` returns, so an engine core that
outlives its parent cannot hold the GPU; GPU memory is checked to be back (NVML) before the next job
starts (the caller writes the reports meanwhile: `Ends`). If a job's process dies
in one recipe, that recipe is recorded failed (with what its log shows) and the recipes after it run
again in a fresh process. The child is this module (`python -m runner.run.isolate`): its
stdout/stderr (and those of every process the engine starts) go to the running recipe's
`engine.log`; the progress bar goes to the terminal."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

from runner.base.nvml import used_gib, wait_for_release
from runner.base.procs import kill_group
from runner.results import RunResult, Timings
from runner.run.job import Job, Unit
from runner.run.result import LOG_MARK, Failure, Measured, failure_hint, run_result


def failed_result(unit: Unit, error: str, hint: str | None, command: str) -> RunResult:
    """A recipe that ended before it could report (its engine's verdicts on an empty log)."""
    evidence = unit.loaded.recipe.engine.crash_evidence("")
    return run_result(unit, command, Measured(), Failure(error, hint, evidence))


class Worker:
    """A job's process, started ahead of its job: Python, the runner and the engine's library load
    while the caller still prepares the job (waits for its plan, runs the job before, ends it and
    writes its reports); the job follows on its standard input. Its output until then is held in a
    file without a name (in the first recipe's folder) and goes to that recipe's engine.log with the
    job: one closed before its job leaves no trace."""

    def __init__(self, units: tuple[Unit, ...], options):
        self.names, folder = [u.name for u in units], options.folder(units[0].name).root
        folder.mkdir(parents=True, exist_ok=True)
        self.held = tempfile.TemporaryFile(dir=folder)
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner.run.isolate"],
            start_new_session=True,
            env=env,
            stdin=subprocess.PIPE,
            pass_fds=(self.held.fileno(),),
        )
        try:
            r = units[0].loaded.recipe
            self._write(pickle.dumps((r.engine, r.model, self.held.fileno())))
        except BaseException:
            self.close()
            raise

    def _write(self, data: bytes, close: bool = False) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # the child died first: its exit code tells
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            if close:
                self.proc.stdin.close()

    def send(self, job: Job) -> subprocess.Popen:
        """The job's results.json removed and a line marking each recipe's start in its engine.log,
        then the job written to the process in the background: it reads it once its library is
        loaded (a process that hangs before is ended by the job's timeout)."""
        units, options = job.units, job.options
        self.first = first = options.folder(units[0].name).engine_log
        for unit in units:
            folder = options.folder(unit.name)
            folder.root.mkdir(parents=True, exist_ok=True)
            folder.results.unlink(missing_ok=True)
            # a resumed run keeps the earlier log above
            with open(folder.engine_log, "a", encoding="utf-8") as f:
                f.write(
                    f"\n{LOG_MARK} {unit.name} started {time.strftime('%Y-%m-%d %H:%M:%S')} =====\n"
                )
                if unit is not units[0]:
                    f.write(
                        f"(runs on the engine started for {units[0].name}: the engine's own "
                        f"output is in {first})\n"
                    )
        data = pickle.dumps(replace(job, spawned_at=time.time()))
        threading.Thread(target=self._write, args=(data, True), daemon=True).start()
        return self.proc

    def spill(self) -> None:
        """What the process wrote before it took its job (it died first) appended to the first
        recipe's engine.log."""
        self.held.seek(0)
        if data := self.held.read():
            with open(self.first, "ab") as f:
                f.write(data)
        self.held.close()

    def close(self) -> None:
        kill_group(self.proc.pid, grace_s=2, proc=self.proc)
        self.held.close()


class Ends:
    """The ends of jobs whose recipes all wrote their results: the process group ends (the engine's
    shutdown, then the group killed) and GPU memory is checked to be back, in the background while
    the caller writes the reports; `join()` before the next job starts and before the call
    returns."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []

    def add(self, end) -> None:
        self._threads.append(t := threading.Thread(target=end, name="runner-job-end"))
        t.start()

    def join(self) -> None:
        while self._threads:
            self._threads.pop().join()


def _ended(code: int) -> str:
    """How a process ended, in words: its exit code, or the signal that killed it."""
    if code >= 0:
        return f"ended with exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"was killed by signal {-code}"
    # SIGKILL: the kernel's out-of-memory killer, or another process
    oom = " (out of memory, or killed from outside)" if -code == signal.SIGKILL else ""
    return f"was killed by {name}{oom}"


def _wait(proc: subprocess.Popen, timeout_s: float | None, done, source: str = "") -> str | None:
    """Until the process ends, or `done()` (its recipes wrote their results); past the timeout (from
    `source`) the group is ended."""
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None
    try:
        while proc.poll() is None and not done():
            if deadline is not None and time.monotonic() >= deadline:
                kill_group(proc.pid, proc=proc)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
                return f"timed out after {timeout_s:.0f} s ({source}); the run was ended"
            time.sleep(0.05)
    except KeyboardInterrupt:
        kill_group(proc.pid, grace_s=5, proc=proc)
        raise
    return None


def _end(proc: subprocess.Popen, baseline: float | None, job: Job, warn) -> None:
    """The job's process group ended (the engine's own shutdown first, a minute at most) and GPU
    memory checked to be back (NVML)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=60)
    kill_group(proc.pid, proc=proc)
    with contextlib.suppress(subprocess.TimeoutExpired):  # one stuck in the kernel: not forever
        proc.wait(timeout=10)
    after = wait_for_release(baseline)
    if None not in (baseline, after) and after > baseline + 1.0:  # type: ignore[operator]
        line = (
            f"GPU memory not fully released after the run: {after:.1f} GiB used vs "
            f"{baseline:.1f} GiB before"
        )
        last = job.units[-1].name
        with open(job.options.folder(last).engine_log, "a", encoding="utf-8") as f:
            f.write(f"{LOG_MARK} {line}\n")
        warn(f"WARNING: {last}: {line}")


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
        why = f"the recipe's process {_ended(proc.returncode)} before writing results"
        tail = text.strip().splitlines()[-5:]
        why += (": " + " | ".join(t.strip() for t in tail)[-600:]) if tail else ""
    hint = failure_hint(why) or f"see {folder.engine_log}"
    if error is not None:  # (`_wait`'s only error: the timeout)
        more = job.timeout_from()[1]
        hint = f"if it needs longer, raise {more}; what it wrote: {folder.engine_log}"
    # this run's part
    evidence = running.loaded.recipe.engine.crash_evidence(text.rsplit(LOG_MARK, 1)[-1])
    begun = dt.datetime.fromtimestamp(since / 1e9, dt.timezone.utc).isoformat(timespec="seconds")
    # its time: a tune's budget counts it
    m = Measured(Timings(total_s=(time.time_ns() - since) / 1e9), started_at=begun)
    res = run_result(running, job.options.command, m, Failure(why, hint, evidence))
    folder.write(res)
    return [*out, res], tuple(u for u in pending if u is not running)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def run_isolated(
    job: Job, warn=print, worker: Worker | None = None, ends: Ends | None = None
) -> list[RunResult]:
    """Run a job's recipes in their own process group (`worker`: one started ahead for this job);
    one result per recipe, in order. `warn` gets a line when GPU memory is not back after the job
    (it goes to the last recipe's engine.log too). With `ends`, the results come back as soon as
    every recipe wrote them, and the group's end is left to `ends`; else it is over on return."""
    baseline = used_gib()
    try:
        proc = (worker := worker or Worker(job.units, job.options)).send(job)
    except OSError as e:  # the recipes fail; the others still run
        if worker is not None:
            worker.close()
        why = f"could not start the recipe's process: {type(e).__name__}: {e}"
        results = [failed_result(u, why, None, job.options.command) for u in job.units]
        for res in results:
            job.options.folder(res.name).write(res)
        return results
    since = time.time_ns()  # after the start lines: a log written since is the running recipe's
    written = lambda: all(job.options.folder(u.name).results.is_file() for u in job.units)
    try:
        done = written if ends is not None else lambda: False
        error = _wait(proc, job.timeout_s(), done, job.timeout_from()[0])
    finally:  # what it wrote before taking the job, where an interrupted run is looked at
        worker.spill()
    end = lambda: _end(proc, baseline, job, warn)
    # ended early only once every recipe wrote its results: none to run again
    ends.add(end) if ends is not None and proc.poll() is None else end()
    results, rest = _collect(job, proc, error, since)
    if rest:
        results += run_isolated(replace(job, units=rest), warn)
    return results


def main() -> int:
    """The child: run the job on its stdin, one engine for all its recipes; exit 0 unless the
    process itself fails (a recipe that fails is recorded in its results.json)."""
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

    def to_log(log: str) -> None:
        """This process's stdout/stderr (fds 1 and 2) appended to a recipe's engine.log."""
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.environ["RUNNER_ENGINE_LOG"] = log

    # the first recipe's engine and model: loaded ahead of the job
    spec, model, held = pickle.load(sys.stdin.buffer)
    os.dup2(held, 1)  # the output held until the job comes
    os.dup2(held, 2)
    # first, so a log of a process ended while its library loads names its group too
    print(me := f"runner worker pid {os.getpid()} (process group {os.getpgrp()})", flush=True)
    with contextlib.suppress(Exception):  # an import that fails fails again in the engine's build
        spec.preload(model)
    ready = time.time()
    job: Job = pickle.load(sys.stdin.buffer)
    to_log(str(job.options.folder(job.units[0].name).engine_log))
    os.write(1, os.pread(held, os.fstat(held).st_size, 0))
    os.ftruncate(held, 0)  # taken: none for the parent's `spill`

    def before(unit: Unit) -> None:
        to_log(str(job.options.folder(unit.name).engine_log))
        if unit is not job.units[0]:  # the first one's log has the held output's line
            print(me, flush=True)

    shared = SharedEngine(job.units[0])
    shared.stages["process_s"] = max(0.0, ready - job.spawned_at)
    try:
        # each recipe's result is in its results.json
        run_rounds(job, shared, progress, before=before)
    finally:
        shared.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: vLLM can hang there for minutes
