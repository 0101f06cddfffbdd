"""Where a fast vLLM cell's time goes: plain vLLM on a study cell's prompts, under variations, one fresh
process each, with the engine's step cadence and the GPU's busy share.

    python benchmarks/step_probe.py RECIPE --only CELL [--model-path ID=PATH] [--set k=v ...]
                                    [--variant NAME:JSON ...] [--out DIR]

Each variant is a name and a JSON object whose keys are `llm` (extra `vllm.LLM` arguments), `sampling`
(extra SamplingParams), `env` (environment), `warmup` (true: the runner's `engine.warmup` batch before the
first round), `rounds` (a list: the workload runs once per entry on the same
engine, the prefix cache emptied between; an entry may hold `sampling` and `chunk`: enqueue the prompts
that many at a time, taking the outputs ready between chunks) and `mode`: `time` (default: the engine
core in its own process, as the runner runs it), `trace` (as `time`, with vLLM's torch profiler on for
the first round: prints the GPU timeline from the trace: kernel busy time, the first and last kernel,
the largest idle gaps and the busy share per quarter second), `kernels` (the engine core in this process;
torch.profiler's top GPU kernels), `cpu` (engine core in this process under cProfile) or `coresample`
(as `time`, with benchmarks/core_sampler.py sampling the engine core process's threads every 2 ms: the
main thread's phases — waiting for the GPU, scheduling, updating from the output, taking requests in —
per round, overall and in the first 1.25 s / middle / last 2 s).

Every round prints: time to enqueue the prompts, generation time (enqueue to the last output), the
number of engine outputs the front end saw, the gaps between them (min/median/max and the slowest few),
and NVML's GPU busy share (sampled every 20 ms; NVML averages over its own sample period, so short
windows are smeared) overall and per tenth; each variant ends with the median generation time per round
setting. GPU only; vLLM must be importable.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("step_probe_child.py")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from core_sampler import summarize  # noqa: E402
from plain_vllm import cell_job, run_isolated  # noqa: E402  (benchmarks/ is not a package)


def timeline(trace_dir: str, wall0: float, gen_s: float) -> dict:
    """The GPU kernel intervals of the largest torch trace under `trace_dir`, merged: busy time, the first
    and last kernel and the idle gaps over 2 ms (seconds from `wall0`, the round's start by time.time()),
    and the busy share of each quarter second of a round `gen_s` long."""
    files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.json*"), recursive=True), key=os.path.getsize)
    if not files:
        return {"trace": "no trace file"}
    path = files[-1]
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        tr = json.load(f)
    base_us = int(tr.get("baseTimeNanoseconds", 0)) / 1e3
    kern = sorted(
        (e["ts"], e["ts"] + e.get("dur", 0))
        for e in tr["traceEvents"]
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "ts" in e
    )
    if not kern:
        return {"trace": path, "kernels": 0}
    merged = []
    for a, b in kern:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    origin = wall0 * 1e6 - base_us if base_us else merged[0][0]  # the round's start, in trace time
    gaps = [
        (round((merged[i][1] - origin) / 1e6, 3), round((merged[i + 1][0] - merged[i][1]) / 1e3, 1))
        for i in range(len(merged) - 1)
        if merged[i + 1][0] - merged[i][1] > 2000
    ]
    busy = sum(b - a for a, b in merged) / 1e6
    bins = [0.0] * (int(gen_s / 0.25) + 1)
    for a, b in merged:
        a, b = (a - origin) / 1e6, (b - origin) / 1e6
        k = max(int(a / 0.25), 0)
        while k < len(bins) and a < b:
            edge = (k + 1) * 0.25
            bins[k] += max(min(b, edge) - max(a, k * 0.25), 0)
            a, k = edge, k + 1
    return {
        "trace": os.path.basename(path),
        "kernels": len(kern),
        "kernel_busy_s": round(busy, 3),
        "first_kernel_s": round((merged[0][0] - origin) / 1e6, 3),
        "last_kernel_s": round((merged[-1][1] - origin) / 1e6, 3),
        "gaps_over_2ms": len(gaps),
        "gap_total_s": round(sum(g for _, g in gaps) / 1e3, 3),
        "largest_gaps": sorted(gaps, key=lambda x: -x[1])[:12],
        "busy_per_quarter_s": [round(x / 0.25, 2) for x in bins],
    }


def medians(rounds: list[dict]) -> dict[str, list[float]]:
    """Generation times grouped by the round's settings (JSON), in the order the settings first ran."""
    out: dict[str, list[float]] = {}
    for r in rounds:
        out.setdefault(json.dumps(r["round"], sort_keys=True), []).append(r["generate_s"])
    return out


def run_variant(work: Path, base: dict, name: str, spec: dict) -> list[dict] | None:
    job = dict(base)
    job["llm_kwargs"] = {**base["llm_kwargs"], **spec.get("llm", {})}
    job["sampling"] = {**base["sampling"], **spec.get("sampling", {})}
    job["env"] = {**base["env"], **spec.get("env", {})}
    job["mode"] = spec.get("mode", "time")
    job["rounds"] = spec.get("rounds", [{}])
    job["warmup"] = bool(spec.get("warmup", False))
    job["trace_dir"] = str(work / f"{name}-trace")
    job["core_samples"] = str(work / f"{name}-core.jsonl")
    (work / f"{name}.json").write_text(json.dumps(job))
    t0 = time.perf_counter()
    cmd = [sys.executable, str(CHILD), str(work / f"{name}.json"), str(work / f"{name}.out")]
    rc, _ = run_isolated(cmd, work / f"{name}.log")
    if rc != 0 or not (work / f"{name}.out").exists():
        tail = (work / f"{name}.log").read_text()[-1500:]
        print(f"\n== {name}: failed (exit {rc}) after {time.perf_counter() - t0:.0f} s\n{tail}", flush=True)
        return None
    rounds = json.loads((work / f"{name}.out").read_text())
    print(f"\n== {name} {json.dumps(spec)} (process wall {time.perf_counter() - t0:.0f} s)", flush=True)
    return rounds


def show(r: dict) -> None:
    busy = "-" if r["busy"] is None else f"{r['busy']:.0%}"
    tenths = " ".join(f"{x:.0%}" for x in r["tenths"] or [])
    print(
        f"-- round {json.dumps(r['round'])}: generation {r['generate_s']:.2f} s (enqueue {r['enqueue_s']:.2f} s, "
        f"first output back at {r['first_step_s']:.2f} s), {r['n']} outputs / {r['output_tokens']:,} tokens, "
        f"{r['steps']} outputs batches, gaps min/median/max {r['gap_min'] * 1e3:.0f}/{r['gap_med'] * 1e3:.0f}/"
        f"{r['gap_max'] * 1e3:.0f} ms, slowest (s, batch) {r['slowest']}\n   NVML busy {busy}; per tenth: {tenths}",
        flush=True,
    )
    if "kernel_busy_s" in r:
        keys = ("kernels", "kernel_busy_s", "first_kernel_s", "last_kernel_s", "gaps_over_2ms", "gap_total_s")
        print("   trace: " + ", ".join(f"{k} {r[k]}" for k in keys))
        print(f"   largest idle gaps (ends at s, ms): {r['largest_gaps']}")
        print(f"   kernel busy per 0.25 s: {r['busy_per_quarter_s']}")
    elif "trace" in r:
        print(f"   trace: {r['trace']}")
    if "top_kernels" in r:
        print(f"   GPU kernel time {r['kernel_total_s']:.2f} s; top kernels (s, calls):")
        for k, s, c in r["top_kernels"]:
            print(f"  {s:8.3f} {c:7d}  {k}")
    if "cpu_profile" in r:
        print(r["cpu_profile"])
    if "core" in r:
        c = r["core"]
        if not c["samples"]:
            print("   engine core: no samples (a spawned engine core does not run the patched loop)")
            return
        print(f"   engine core main thread, {c['samples']} samples: phases {c.get('phases')}")
        print(f"   by segment: {c.get('segments')}")
        print(f"   innermost frames: {c.get('leaves')}")
        print(f"   other threads (share of samples): {c.get('other_threads')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe")
    ap.add_argument("--only", required=True)
    ap.add_argument("--model-path", action="append", default=[])
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--variant", action="append", default=[], help="NAME:JSON (see above); default: the cell as is")
    ap.add_argument("--out", default=tempfile.mkdtemp())
    a = ap.parse_args()

    r, base = cell_job(a.recipe, a.sets, a.model_path, a.only)
    ids = base["prompts"]
    work = Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    print(f"{r.name}: {len(ids)} prompts, {sum(map(len, ids)):,} prompt tokens; {base['llm_kwargs']}", flush=True)
    variants = [v.split(":", 1) for v in a.variant] or [["as-is", "{}"]]
    for name, text in variants:
        spec = json.loads(text)
        rounds = run_variant(work, base, name, spec) or []
        for res in rounds:
            if res.get("trace_dir"):
                res.update(timeline(res["trace_dir"], res["wall0"], res["generate_s"]))
            if spec.get("mode") == "coresample":
                window = (res["wall0"], res["wall0"] + res["generate_s"])
                res["core"] = summarize(str(work / f"{name}-core.jsonl"), *window)
            show(res)
        for kind, times in medians(rounds).items():
            print(f"   median of {len(times)} round(s) {kind}: {statistics.median(times):.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
