"""Run each job in its own process group; end it and everything it started.

The parent never imports torch or vLLM. The job (recipes, prepared inputs, options) goes to
the child through its standard input, so no temporary file is left behind even if the runner
is killed. When a job ends (done, error, timeout, Ctrl-C) the whole process group is killed, so
an engine core that outlives its parent cannot hold the GPU, and GPU memory is checked to be
back (NVML) before the next job starts. If a job's process dies in one recipe, that recipe is
recorded failed and the recipes after it run again in a fresh process."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

from runner.engines import spec_class
from runner.execution.assemble import failure_hint
from runner.execution.gpumem import used_gib, wait_for_release
from runner.execution.job import Job, Unit
from runner.execution.layout import RunFolder
from runner.execution.process_group import kill_group
from runner.execution.serve_run import end_recorded_server
from runner.files import write_json_atomic
from runner.reporting.results import RunResult

LOG_MARK = "===== runner:"


def failed_result(unit: Unit, error: str, hint: str | None, command: str) -> RunResult:
    from runner.execution.assemble import unit_result

    return unit_result(unit, command, error=error, hint=hint)


def _evidence_from_log(res: RunResult, unit: Unit, log: Path) -> None:
    """A run ended before it could report: keep what the engine's log says it had done."""
    try:
        text = log.read_text(errors="replace").rsplit(LOG_MARK, 1)[-1]  # this run's part
    except OSError:
        return
    ev = spec_class(unit.loaded.recipe.engine.kind).crash_evidence(text)
    if ev.weights_gib is not None:
        res.memory.weights_gib = ev.weights_gib
    if ev.kv_cache_tokens is not None:
        res.memory.kv_cache_tokens = ev.kv_cache_tokens
    res.notes.extend(ev.notes)


def _start(job: Job) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.execution.worker"], start_new_session=True, env=env, stdin=subprocess.PIPE
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


def _process_error(proc: subprocess.Popen, log: Path) -> str:
    error = f"the recipe's process ended with exit code {proc.returncode} before writing results"
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
    except OSError:
        tail = []
    if tail:
        error += ": " + " | ".join(t.strip() for t in tail)[-600:]
    return error


def _collect(job: Job, proc: subprocess.Popen, error: str | None) -> tuple[list[RunResult], tuple[Unit, ...]]:
    """Results of the units that finished, a failure for the one that was running, and the units
    that never started (to run again)."""
    out: list[RunResult] = []
    for i, unit in enumerate(job.units):
        folder = RunFolder.of(job.options.out, unit.name)
        if folder.results.is_file():
            out.append(RunResult.model_validate_json(folder.results.read_bytes()))
            continue
        why = error or _process_error(proc, folder.engine_log)
        res = failed_result(unit, why, failure_hint(why) or f"see {folder.engine_log}", job.options.command)
        _evidence_from_log(res, unit, folder.engine_log)
        write_json_atomic(folder.results, res.model_dump(mode="json"))
        out.append(res)
        return out, job.units[i + 1 :]
    return out, ()


def _prepare_folders(job: Job) -> None:
    first = job.units[0].name
    for unit in job.units:
        folder = RunFolder.of(job.options.out, unit.name)
        folder.root.mkdir(parents=True, exist_ok=True)
        folder.results.unlink(missing_ok=True)
        with open(folder.engine_log, "a", encoding="utf-8") as f:  # a resumed run keeps the earlier log above
            f.write(f"\n{LOG_MARK} {unit.name} started {time.strftime('%Y-%m-%d %H:%M:%S')} =====\n")
            if unit.name != first:
                f.write(
                    f"(runs on the engine started for {first}: the engine's own output is in "
                    f"{RunFolder.of(job.options.out, first).engine_log})\n"
                )


def run_isolated(job: Job) -> list[RunResult]:
    """Run a job's recipes in their own process group; one result per recipe, in order."""
    _prepare_folders(job)
    baseline = used_gib()
    try:
        proc = _start(job)
    except OSError as e:  # the recipes fail; the others still run
        why = f"could not start the recipe's process: {type(e).__name__}: {e}"
        results = [failed_result(u, why, None, job.options.command) for u in job.units]
        for u, res in zip(job.units, results):
            write_json_atomic(RunFolder.of(job.options.out, u.name).results, res.model_dump(mode="json"))
        return results
    error = _wait(proc, job.timeout_s())
    for u in job.units:  # a serving run's server is in a session of its own: end it if the run could not
        end_recorded_server(RunFolder.of(job.options.out, u.name))
    after = wait_for_release(baseline)
    results, rest = _collect(job, proc, error)
    if baseline is not None and after is not None and after > baseline + 1.0:
        last = results[-1]
        last.notes.append(
            f"GPU memory not fully released after the run: {after:.1f} GiB used vs {baseline:.1f} GiB before"
        )
        write_json_atomic(RunFolder.of(job.options.out, last.name).results, last.model_dump(mode="json"))
    if rest:
        results += run_isolated(Job(units=rest, options=job.options, env=job.env))
    return results
