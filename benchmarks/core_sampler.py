"""A stack sampler for vLLM's engine core process (step_probe's `coresample` mode): where the engine
core's main thread spends its wall time while the GPU waits, measured in the real multiprocess setup.

`install(path)` (in the front end, before `vllm.LLM` is built) patches `EngineCoreProc.run_busy_loop`;
the engine core is forked from the front end, so the patched loop is the one it runs. A daemon thread in
the engine core then records, every `interval` seconds, the main thread's phase (the function called
from the step or the busy loop: `schedule`, `execute_model`, `result` = waiting for the GPU,
`update_from_output`, `_process_input_queue`, ...) and its innermost frame, and the innermost frame of
every other thread, appending one JSON line per sample to `path` (every 0.5 s: the caller waits a
second before shutting the engine down). vLLM forks the engine core only with
`VLLM_WORKER_MULTIPROC_METHOD=fork` and CUDA not yet initialized in the front end (the caller sets the
first); a spawned one, or the data-parallel engine core's own loop, records nothing. `summarize` reads them back for a
time window. CPU-side; the sampling itself takes the GIL ~500 times a second (a few % of overhead).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

_STEP_FUNCS = ("step_with_batch_queue", "step", "_process_engine_step")
_LOOP_FUNCS = ("run_busy_loop",)
_CORE_FILE = "engine/core.py"  # vLLM's v1/engine/core.py: a `step` elsewhere (model code) is not one


def _where(code) -> str:
    parts = code.co_filename.replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:])}:{code.co_name}"


def describe(frame) -> tuple[str, str]:
    """(phase, leaf) of a main-thread frame: phase is the function called from the innermost step
    function (else from the busy loop), leaf the innermost frame."""
    stack = []
    f = frame
    while f is not None:
        stack.append(f.f_code)
        f = f.f_back
    stack.reverse()  # outermost first
    phase = "-"
    for i, code in enumerate(stack[:-1]):
        if code.co_name in _STEP_FUNCS + _LOOP_FUNCS and code.co_filename.replace("\\", "/").endswith(_CORE_FILE):
            phase = stack[i + 1].co_name
    return phase, _where(stack[-1]) if stack else "-"


def _sample_forever(main_ident: int, path: str, interval: float, stop: threading.Event | None = None) -> None:
    names = {}
    buf: list[str] = []
    last_flush = time.time()
    while not (stop and stop.is_set()):
        time.sleep(interval)
        now = time.time()
        frames = sys._current_frames()
        main = frames.get(main_ident)
        if main is None:
            continue
        phase, leaf = describe(main)
        others = {}
        for ident, fr in frames.items():
            if ident in (main_ident, threading.get_ident()):
                continue
            if ident not in names:
                names = {t.ident: t.name for t in threading.enumerate()}
            others[names.get(ident, str(ident))] = _where(fr.f_code)
        # a held frame keeps its locals (activation tensors) alive after its function returns: the first
        # version ran the engine out of GPU memory
        frames = main = fr = None
        buf.append(json.dumps({"t": round(now, 4), "phase": phase, "leaf": leaf, "others": others}))
        if now - last_flush > 0.5:
            _flush(path, buf)
            last_flush = now
    _flush(path, buf)


def _flush(path: str, buf: list[str]) -> None:
    if buf:
        with open(path, "a") as out:
            out.write("\n".join(buf) + "\n")
        buf.clear()


def install(path: str, interval: float = 0.002) -> None:
    from vllm.v1.engine import core

    original = core.EngineCoreProc.run_busy_loop

    def run_busy_loop(self):
        if os.environ.get("CORE_SAMPLER_PID") != str(os.getpid()):  # once per process
            os.environ["CORE_SAMPLER_PID"] = str(os.getpid())
            args = (threading.get_ident(), path, interval)
            threading.Thread(target=_sample_forever, args=args, daemon=True, name="core-sampler").start()
        return original(self)

    core.EngineCoreProc.run_busy_loop = run_busy_loop


def summarize(path: str, start: float, end: float, top: int = 12) -> dict:
    """Shares of the main thread's phases and leaves, and the busiest leaves of the other threads, over
    the samples taken in [start, end) (wall clock); also the phase shares per segment of the window:
    the first 1.25 s, the middle and the last 2 s (the first and last overlap in windows under 3.25 s)."""
    rows = []
    if Path(path).exists():
        for line in Path(path).read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if start <= r["t"] < end:
                rows.append(r)
    if not rows:
        return {"samples": 0}
    n = len(rows)

    def shares(items: list[str], k: int = top) -> list[tuple[str, float]]:
        return [(key, round(c / len(items), 3)) for key, c in Counter(items).most_common(k)] if items else []

    segments = {
        "first 1.25 s": [r for r in rows if r["t"] < start + 1.25],
        "middle": [r for r in rows if start + 1.25 <= r["t"] < end - 2.0],
        "last 2 s": [r for r in rows if r["t"] >= end - 2.0],
    }
    others = [f"{name} {leaf}" for r in rows for name, leaf in r["others"].items()]
    return {
        "samples": n,
        "phases": shares([r["phase"] for r in rows]),
        "leaves": shares([r["leaf"] for r in rows]),
        "segments": {k: shares([r["phase"] for r in v], 6) for k, v in segments.items() if v},
        "other_threads": [(k, round(c / n, 3)) for k, c in Counter(others).most_common(8)],
    }
