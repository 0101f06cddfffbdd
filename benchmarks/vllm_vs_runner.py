"""Overhead of the runner against a plain vLLM script, on the same workload.

    python benchmarks/vllm_vs_runner.py RECIPE [--only CELL] [--model-path ID=PATH] [--set k=v ...]
    [--out DIR]
                                        [--rounds N]

1. Renders the recipe's prompts to token ids (the runner's own code), outside any timing.
2. Runs a plain vLLM script in a fresh process: import vllm, LLM(**same args), one generate()
   over the ids, shut the engine down.
3. Runs `runner go RECIPE` (same overrides, --no-progress) in a fresh process: the runner feeds the
   engine with enqueue() and collects finished outputs step by step (so an interrupted run keeps
   its samples); the plain script makes one generate() call.
With --rounds N it repeats 2-3, alternating which goes first (a cold cache or a noisy neighbour
should not always hit the same side), and compares medians. Prints each round as it ends, then
both times and their ratio (targets: generation within 2%, whole wall time within 10%), and each
side's engine start as its vLLM log accounts for it (LLM() to its engine core, the core's start to
ready, the weights, init, torch.compile, CUDA graphs, and LLM()'s time outside the log's stamps):
where the runner's start is slower with the same arguments, this says in which part.
Each round also splits both sides' rest (the wall time less engine start and generation): the plain
script's vLLM import and the rest of its process; the runner's by the stages its results.json
records (the job's wait for its process, which imports vLLM; the inputs: data, rendering, checks,
tokenizing; the engine's build outside LLM(); warm-up, writing and the other) and the call's time
outside them (the CLI's start, the first job's plan, the job's end and the reports).
With --plain-sampler the plain script runs the runner's NVML sampler (a thread polling memory and
utilization every 50 ms, which the runner's job process starts before its engine) through its own
engine start and generation: where the runner's engine start is slower than plain vLLM's with the
same arguments (1.13x on the H200, reports/h200-stages), this says whether the sampler is why.
GPU only; vLLM must be importable.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from plain_vllm import cell_job, run_isolated  # noqa: E402  (benchmarks/ is not a package)

from runner.engines.vllm.facts import parse_engine_log  # noqa: E402

PLAIN = r"""
import json, sys, time, os
t0 = time.perf_counter()
job = json.load(open(sys.argv[1]))
os.environ.update(job["env"])
if job.get("sampler"):  # --plain-sampler: the runner's NVML sampler polls as in its job process
    sys.path.insert(0, job["root"])
    from runner.base.nvml import PeakSampler
    PeakSampler().__enter__()
from vllm import LLM, SamplingParams
t1 = time.perf_counter()
llm = LLM(**job["llm_kwargs"])
t2 = time.perf_counter()
sp = SamplingParams(**job["sampling"])
outs = llm.generate([{"prompt_token_ids": p} for p in job["prompts"]], sp, use_tqdm=False)
t3 = time.perf_counter()
n_out = sum(len(o.outputs[0].token_ids) for o in outs)
times = {"import_s": t1 - t0, "load_s": t2 - t1, "generate_s": t3 - t2}
json.dump({**times, "output_tokens": n_out, "n": len(outs)}, open(sys.argv[2], "w"))
llm.llm_engine.engine_core.shutdown(timeout=10)  # else the engine core outlives us, holding the GPU
sys.stdout.flush()
os._exit(0)
"""


def run_plain(work: Path, k: int) -> dict:
    cmd = [sys.executable, str(work / "plain.py"), str(work / "job.json"), str(work / "plain.json")]
    rc, wall = run_isolated(cmd, work / f"plain-{k}.log")
    if rc != 0:
        sys.exit(f"plain vLLM script failed (exit {rc}); see {work / f'plain-{k}.log'}")
    res = json.loads((work / "plain.json").read_text())
    return {
        "generate_s": res["generate_s"],
        "load_s": res["load_s"],
        "import_s": res["import_s"],
        "wall_s": wall,
        "other_s": wall - res["load_s"] - res["generate_s"],
        "output_tokens": res["output_tokens"],
    }


def run_runner(a, name: str, k: int) -> dict:
    out = Path(a.out) / f"round-{k}"
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "go",
        a.recipe,
        "--out",
        str(out),
        "--no-progress",
        "--force",
    ]
    if a.only:
        cmd += ["--only", a.only]
    for s in a.sets:
        cmd += ["--set", s]
    for m in a.model_path:
        cmd += ["--model-path", m]
    t0 = time.perf_counter()
    rr = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if rr.returncode != 0:
        sys.exit(
            f"runner go failed (exit {rr.returncode}):\n{rr.stdout[-2000:]}{rr.stderr[-2000:]}"
        )
    res = json.loads((out / name / "results.json").read_text())
    t = res["timings"]
    return {
        "stages": res.get("stages") or {},
        "generate_s": t["generate_s"],
        "load_s": t["load_s"],
        "wall_s": wall,
        "other_s": wall - t["load_s"] - t["generate_s"],
        "output_tokens": res["tokens"]["output"],
    }


ROWS = [
    ("generation (s)", "generate_s", 1.02),
    ("engine start (s)", "load_s", None),
    ("whole wall time (s)", "wall_s", 1.10),
    # imports, checks, plan, tokenizing, writing, process exit
    ("  of which the rest (s)", "other_s", None),
]


def read(log: Path) -> str:
    return log.read_text(errors="replace") if log.is_file() else ""


def start_method(log: Path) -> str:
    """How vLLM started its engine core process, from its log: forked, unless it had to spawn it
    (CUDA already initialized in the process, ...), which imports vLLM again."""
    spawned = "We must use the `spawn` multiprocessing start method" in read(log)
    return "spawned" if spawned else "forked"


# vLLM 0.26's log: its level, then the time to the second (engine core lines after their prefix)
_STAMP = re.compile(r"(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d) ")
_MARKS = {  # a line of the start, by what it marks
    "first": "non-default args",  # LLM(...) began: its first line
    "core": "Initializing a V1 LLM engine",  # the engine core process began
    "ready": "init engine (profile, create kv cache, warmup model) took",  # the engine core is up
}
# vLLM's own account of its engine core's init, in seconds (the runner reads the other parts)
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")


def start_account(text: str, load_s: float) -> dict[str, float | None]:
    """Where an `LLM(...)` of `load_s` seconds went, from its log: before its engine core began and
    from the core's start to its ready line (log stamps, to the second), the weights, the core's
    init (profiling, KV cache, compile, graphs) and of it compile and graphs (vLLM's own figures),
    and what is outside the first-to-ready stamps (before LLM's first line, after the core's ready
    line). The log's last start (a log may hold several); None where it lacks the line."""
    if (at := text.rfind(_MARKS["first"])) >= 0:  # from the start of that line
        text = text[text.rfind("\n", 0, at) + 1 :]
    stamps = {}
    for line in text.splitlines():
        for key, mark in _MARKS.items():
            if key not in stamps and mark in line and (m := _STAMP.search(line)):
                # a leap year: 02-29 parses
                stamps[key] = datetime.strptime(f"2000-{m.group(1)}", "%Y-%m-%d %H:%M:%S")
    span = lambda a, b: (stamps[b] - stamps[a]).total_seconds() if {a, b} <= stamps.keys() else None
    parsed = parse_engine_log(text)  # the runner's own reading: weights, torch.compile, CUDA graphs
    whole = span("first", "ready")
    return {
        "weights": parsed.get("weights_load_s"),
        "init": float(m.group(1)) if (m := _INIT.search(text)) else None,
        "compile": parsed.get("compile_s"),
        "graphs": parsed.get("capture_s"),
        "to_core": span("first", "core"),
        "core_to_ready": span("core", "ready"),
        "outside": None if whole is None else load_s - whole,
    }


START_ROWS = [
    ("LLM() to its engine core's start (stamps)", "to_core"),
    ("the core's start to its ready line (stamps)", "core_to_ready"),
    ("  of it the weights (vLLM)", "weights"),
    ("  of it init: profile, KV cache, compile, graphs (vLLM)", "init"),
    ("    of init torch.compile (vLLM)", "compile"),
    ("    of init CUDA graphs (vLLM)", "graphs"),
    ("LLM() outside the stamps (before, after)", "outside"),
]


def start_table(plain: dict, runner: dict) -> str:
    """The two engine starts side by side, as their logs account for them (stamps +-1 s)."""
    cell = lambda v: f"{v:12.2f}" if v is not None else f"{'-':>12}"
    diff = lambda p, q: f"{q - p:+14.2f}" if p is not None and q is not None else f"{'':14}"
    lines = [f"{'engine start by its log':52}{'plain vLLM':>12}{'runner':>12}{'runner-plain':>14}"]
    for label, key in START_ROWS:
        p, q = plain.get(key), runner.get(key)
        lines.append(f"{label:52}{cell(p)}{cell(q)}{diff(p, q)}")
    return "\n".join(lines)


def rest_split(plain: dict, runner: dict) -> str:
    """Each side's rest: the plain script's import and the rest of its process; the runner's by
    its recorded stages, and its call outside them."""
    st = runner["stages"]
    outside = runner["wall_s"] - st.get("wall_s", 0.0)
    parts = [
        ("the job's wait for its process (vLLM's import)", st.get("process_s", 0.0)),
        (
            "the inputs: data, rendering, checks, tokenizing",
            st.get("prepare_s", 0.0) + st.get("tokenize_s", 0.0),
        ),
        (
            "the engine's build outside LLM() (its tokenizer, ...)",
            st.get("start_s", 0.0) - runner["load_s"],
        ),
        (
            "warm-up, writing samples, the run's other time",
            st.get("warmup_s", 0.0) + st.get("write_s", 0.0) + st.get("other_s", 0.0),
        ),
        ("the call outside the run (CLI start, plan, end, reports)", outside),
    ]
    left = plain["wall_s"] - plain["import_s"] - plain["load_s"] - plain["generate_s"]
    rows = [f"{'the rest':60}{'plain vLLM':>12}{'runner':>12}"]
    rows.append(f"{'  the import of vLLM, before LLM()':60}{plain['import_s']:12.2f}")
    rows.append(f"{'  the process outside its timers':60}{left:12.2f}")
    rows += [f"  {label:58}{'':>12}{s:12.2f}" for label, s in parts]
    return "\n".join(rows)


def median(runs: list[dict]) -> dict:
    return {key: statistics.median(x[key] for x in runs) for _, key, _ in ROWS}


def table(plain: dict, runner: dict) -> str:
    lines = [f"{'':22}{'plain vLLM':>12}{'runner':>12}{'ratio':>9}  target"]
    for label, key, target in ROWS:
        p, q = plain[key], runner[key]
        ok = (
            ""
            if target is None
            else ("ok" if q / p <= target else "MISSED") + f" (<= {target:.2f})"
        )
        lines.append(f"{label:22}{p:12.2f}{q:12.2f}{q / p:9.3f}  {ok}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("recipe")
    ap.add_argument("--only", help="the study cell to run (a study file expands into many recipes)")
    ap.add_argument("--model-path", action="append", default=[])
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "bench-reports"))
    ap.add_argument(
        "--rounds", type=int, default=1, help="pairs of runs, alternating which goes first"
    )
    ap.add_argument(
        "--plain-sampler",
        action="store_true",
        help="run the runner's NVML sampler in the plain script too",
    )
    a = ap.parse_args()

    r, job = cell_job(a.recipe, a.sets, a.model_path, a.only)
    job |= {"sampler": a.plain_sampler, "root": str(ROOT)}
    ids = job["prompts"]
    work = Path(tempfile.mkdtemp())
    (work / "job.json").write_text(json.dumps(job))
    (work / "plain.py").write_text(PLAIN)
    print(
        f"workload: {r.name}, {len(ids)} prompts, {sum(map(len, ids)):,} prompt tokens; logs in "
        f"{work}",
        flush=True,
    )

    plains, runners = [], []
    for k in range(1, a.rounds + 1):
        order = ("plain", "runner") if k % 2 else ("runner", "plain")
        for who in order:
            if who == "plain":
                plains.append(run_plain(work, k))
            else:
                runners.append(run_runner(a, r.name, k))
        p, q = plains[-1], runners[-1]
        logs = (work / f"plain-{k}.log", Path(a.out) / f"round-{k}" / r.name / "engine.log")
        starts = [start_account(read(log), x["load_s"]) for log, x in zip(logs, (p, q))]
        print(
            f"\nround {k} ({order[0]} first); output tokens plain {p['output_tokens']:,} / runner "
            f"{q['output_tokens']:,}; plain vLLM's import {p['import_s']:.2f} s; engine core "
            f"process {' / '.join(map(start_method, logs))} (plain / runner)\n{table(p, q)}\n"
            f"{start_table(*starts)}\n{rest_split(p, q)}",
            flush=True,
        )
    if a.rounds > 1:
        print(
            f"\nmedian of {a.rounds} rounds\n{table(median(plains), median(runners))}", flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
