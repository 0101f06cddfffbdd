"""`profile: true`: where the generation's time goes. After the measured repeats, the first prompts
are generated twice more under the engine's profiler (`engine.profiled(folder)`, a context manager
that leaves Chrome trace files in `folder`), untimed: once with one output token (the prefill) and
once as the recipe asks, each after the prefix cache is emptied (as before each measured repeat).
Each trace's time is sorted into kernel classes by name; on a GPU the window's time with no kernel
running is its idle time. The full window's traces are kept in the run folder (`profile/`,
gzipped), for Perfetto or chrome://tracing."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from runner.base.types import PROFILE_MAX_WINDOW, PROFILE_WINDOW, Engine, Request
from runner.folder import RunFolder
from runner.results import Profile, ProfileWindow
from runner.run.job import Unit

# first match wins: attention kernels also hold softmax and matmuls of their own
CLASSES = (
    ("attention", re.compile(r"attn|attention|flash|sdpa|paged|softmax")),
    (
        "gemm",
        re.compile(r"gemm|matmul|aten::mm|addmm|bmm|linear|cutlass|xmma|cublas|wgmma|nvjet|gemv"),
    ),
    ("sampling", re.compile(r"sampl|argmax|topk|top_k|multinomial|sort|gumbel")),
    (
        "norms and elementwise",
        re.compile(
            r"norm|elementwise|vectorized|fused|triton_|add|mul|silu|gelu|act|rotary|rope|copy|cat|fill"
        ),
    ),
)


def kernel_class(name: str) -> str:
    low = name.lower()
    return next((c for c, rx in CLASSES if rx.search(low)), "other")


def read_events(folder: Path) -> list[dict[str, Any]]:
    """The complete events ("ph": "X") of every trace file in `folder` (.json or .json.gz)."""
    out = []
    for path in sorted(folder.rglob("*.json*")):
        with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
            out += [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X"]
    return out


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


def _own_us(ops: list[dict[str, Any]]) -> list[float]:
    """Each operator's own time: its duration less that of the operators it called (nested on its
    thread)."""
    own = [float(e["dur"]) for e in ops]
    order = sorted(range(len(ops)), key=lambda i: (ops[i].get("tid"), ops[i]["ts"], -ops[i]["dur"]))
    stack: list[int] = []
    for i in order:
        e = ops[i]
        while stack and (
            ops[stack[-1]].get("tid") != e.get("tid")
            or ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= e["ts"]
        ):
            stack.pop()
        if stack:
            own[stack[-1]] -= float(e["dur"])
        stack.append(i)
    return own


def breakdown(events: list[dict[str, Any]], wall_s: float) -> ProfileWindow:
    """GPU kernels by class where the trace has any (idle: the wall time none runs), else the CPU
    operators' own time by class."""
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    if kernels:
        ops, times = kernels, [float(e["dur"]) for e in kernels]
        busy = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in kernels])
    else:
        ops = [e for e in events if e.get("cat") == "cpu_op" and "dur" in e]
        times = _own_us(ops)
        busy = sum(times)
    classes: Counter = Counter()
    for e, t in zip(ops, times):
        classes[kernel_class(e.get("name", ""))] += t / 1e6
    return ProfileWindow(
        wall_s=wall_s,
        device="cuda" if kernels else "cpu",
        busy_s=busy / 1e6,
        classes={k: round(v, 6) for k, v in classes.most_common()},
        idle_s=max(wall_s - busy / 1e6, 0.0) if kernels else None,
    )


def _keep(tmp: Path, kept: Path) -> None:
    """The trace files moved into the run folder, gzipped where they are not (a trace is large)."""
    kept.mkdir(parents=True, exist_ok=True)
    for path in tmp.rglob("*.json*"):
        if path.suffix == ".gz":
            shutil.move(str(path), kept / path.name)
            continue
        with open(path, "rb") as src, gzip.open(kept / f"{path.name}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)


def profile_run(engine: Engine, unit: Unit, ids: list[list[int]], folder: RunFolder) -> Profile:
    """The profile of the recipe's first prompts on `engine` (after its measured repeats); the
    full window's traces kept in the run folder's `profile/`."""
    hook = getattr(engine, "profiled", None)
    if hook is None:
        return Profile(note=f"the {engine.info.name or 'this'} engine has no profiler")
    r, examples = unit.loaded.recipe, unit.prepared.examples
    width = min(engine.info.batch or PROFILE_WINDOW, PROFILE_MAX_WINDOW)
    requests = [Request(ids=x, example=ex) for x, ex in zip(ids[:width], examples)]
    one = r.sampling.model_copy(update={"max_tokens": 1})
    windows, kept, emptied = {}, folder.profile, []
    shutil.rmtree(kept, ignore_errors=True)
    for name, sampling in (("prefill", one), ("full", r.sampling)):
        # as before each measured repeat: else the repeats left every window prompt in the cache
        # and the window would time no prefill
        emptied.append(engine.reset_prefix_cache())
        if (prepare := getattr(engine, "prepare", None)) is not None:
            prepare(sampling)  # outside the window, as before a measured generation
        with tempfile.TemporaryDirectory(prefix="runner-profile-") as tmp:
            with hook(Path(tmp)):
                t0 = time.perf_counter()
                engine.generate(requests, sampling, None, None)
                wall = time.perf_counter() - t0
            windows[name] = breakdown(read_events(Path(tmp)), wall)
            if name == "full":
                _keep(Path(tmp), kept)
    traces = sorted(str(p.relative_to(folder.root)) for p in kept.rglob("*") if p.is_file())
    if not windows["full"].classes:
        saw = (
            "the profiler saw no kernel and no operator in its window (e.g. on the CPU torch's "
            "profiler records the thread that started it, and transformers' continuous batching "
            "generates in a thread of its own); its trace: " + (", ".join(traces) or "none")
        )
        return Profile(examples=len(requests), traces=traces, note=saw)
    return Profile(examples=len(requests), traces=traces, cache_emptied=all(emptied), **windows)
