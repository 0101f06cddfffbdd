"""Run each recipe in its own process group; end it and everything it started.

The parent never imports torch or vLLM. When a recipe ends (done, error,
timeout, Ctrl-C) the whole process group is killed, so an engine core that
outlives its parent cannot hold the GPU, and GPU memory is checked to be back
(NVML) before the next recipe starts."""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner.execution.gpumem import used_gib, wait_for_release
from runner.config.recipe import LoadedRecipe
from runner.reporting.results import RunResult


def _kill_group(pgid: int, grace_s: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM the group, then SIGKILL what is left; return once no member is alive."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5)
        while time.monotonic() < deadline:
            if proc is not None:
                proc.poll()              # reap the leader: a zombie still counts as a group member
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def _failed(lr: LoadedRecipe, error: str, hint: str | None, command: str) -> RunResult:
    r = lr.recipe
    return RunResult(name=r.name, recipe=r.canonical(), recipe_hash=r.digest(), recipe_path=lr.path,
                     status="failed", error=error, hint=hint, command=command)


def _evidence_from_log(res: RunResult, log: Path) -> None:
    """A run ended before it could report: keep what the engine's log says it had done."""
    from runner.engines.vllm import parse_engine_log
    try:
        found = parse_engine_log(log.read_text(errors="replace").rsplit("===== runner:", 1)[-1])  # this run
    except OSError:
        return
    if "weights_gib" in found:
        res.memory.weights_gib = found["weights_gib"]
        res.notes.append(f"from engine.log before the run ended: weights on the GPU {found['weights_gib']} GiB")
    if "kv_cache_tokens" in found:
        res.memory.kv_cache_tokens = int(found["kv_cache_tokens"])
    if "cpu_offloaded_gib" in found:
        res.notes.append(f"from engine.log: {found['cpu_offloaded_gib']} GiB of parameters were offloaded to CPU "
                         "memory (cpu_offload_gb took effect)")


def _temp_file(made: list[str], suffix: str, write) -> str:
    with tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False) as f:
        made.append(f.name)
        write(f)
    return f.name


def _remove(paths: list[str]) -> None:
    for p in paths:
        Path(p).unlink(missing_ok=True)


def run_isolated(lr: LoadedRecipe, out: Path, *, limit: int | None = None, estimate: int | None = None,
                 timeout_s: float | None = None, command: str = "", progress: bool = True,
                 prepared: tuple | None = None, inputs: dict[str, str] | None = None) -> RunResult:
    """Run one recipe in its own process group. `prepared`: what run.prepare gave in this process
    (examples and prompts) and `inputs`: the input files' hashes taken then, handed over so the run
    uses (and records) exactly what was checked instead of loading the dataset again."""
    from runner.files import write_json_atomic
    r = lr.recipe
    rdir = out / r.name
    rdir.mkdir(parents=True, exist_ok=True)
    results = rdir / "results.json"
    if results.exists():
        results.unlink()
    log = rdir / "engine.log"
    with open(log, "a", encoding="utf-8") as f:      # a resumed run keeps the earlier run's log above
        f.write(f"\n===== runner: {r.name} started {time.strftime('%Y-%m-%d %H:%M:%S')} =====\n")
    job = {"loaded": lr.model_dump(mode="json"), "out": str(out), "limit": limit, "estimate": estimate,
           "command": command, "progress": progress, "log": str(log), "inputs": inputs}
    temp: list[str] = []
    try:
        if prepared is not None:
            try:
                job["prepared"] = _temp_file(temp, ".pkl", lambda f: pickle.dump(prepared, f, pickle.HIGHEST_PROTOCOL))
            except (pickle.PicklingError, TypeError, AttributeError):
                pass     # a dataset column pickle cannot carry: the run loads the data itself
        job_path = _temp_file(temp, ".json", lambda f: f.write(json.dumps(job).encode()))
        baseline = used_gib()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen([sys.executable, "-m", "runner.execution.worker", job_path], start_new_session=True,
                                env=env, stdin=subprocess.DEVNULL)
    except Exception as e:      # the recipe fails; the others still run
        _remove(temp)
        res = _failed(lr, f"could not start the recipe's process: {type(e).__name__}: {e}", None, command)
        write_json_atomic(results, res.model_dump(mode="json"))
        return res
    except BaseException:       # Ctrl-C while writing the job
        _remove(temp)
        raise
    error = None
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        error = f"timed out after {timeout_s:.0f} s (recipe timeout); the run was ended"
    except KeyboardInterrupt:
        _kill_group(proc.pid, grace_s=5, proc=proc)
        raise
    finally:
        _kill_group(proc.pid, proc=proc)
        proc.wait()
        _remove(temp)
        after = wait_for_release(baseline)
    if error is None and results.exists():
        res = RunResult.model_validate_json(results.read_text())
    else:
        if error is None:
            error = f"the recipe's process ended with exit code {proc.returncode} before writing results"
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            if tail:
                error += ": " + " | ".join(t.strip() for t in tail)[-600:]
        from runner.execution.run import failure_hint
        res = _failed(lr, error, failure_hint(error) or f"see {log}", command)
        _evidence_from_log(res, log)
        write_json_atomic(results, res.model_dump(mode="json"))
    if baseline is not None and after is not None and after > baseline + 1.0:
        res.notes.append(f"GPU memory not fully released after the run: {after:.1f} GiB used vs "
                         f"{baseline:.1f} GiB before")
        write_json_atomic(results, res.model_dump(mode="json"))
    return res
