"""One recipe through `--executor ray` and through the local executor: same outputs, generation
time, GPU memory.

    python benchmarks/ray_vs_local.py RECIPE --only CELL --out DIR [--rounds 1] [runner go
    options...]

Per round, in alternating order (round 0: local then ray; round 1: ray then local, ...), runs
`python -m runner go RECIPE --only CELL --out DIR/<executor>-<round> --no-progress [--executor ray]
...` as a child process, its output line by line into DIR/<executor>-<round>.log, and after it reads
- results.json: status, executor, generation time (`timings.generate_s`: the engine's generate
  call, engine start excluded), where the Ray replica ran;
- samples.jsonl: each example's output text and output token count;
- the GPU's used memory (NVML, device 0 of this process's view) before the call and after it.
Prints one line per call, then: outputs identical (every id, same text and token count) across all
calls, the median ray / local generation-time ratio (target within 3%) and whether the GPU memory
came back (within 1 GiB of the used memory before the first call). Exit 0 when all three hold.
Every line is flushed as it is written."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.base.nvml import used_gib  # noqa: E402  (NVML, whole device; None without a GPU

TARGET = 0.03
MEMORY_SLACK_GIB = 1.0


def say(*a: object) -> None:
    print(*a, flush=True)


def run_once(a: argparse.Namespace, rest: list[str], executor: str, rnd: int) -> dict:
    out = Path(a.out) / f"{executor}-{rnd}"
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "go",
        a.recipe,
        "--only",
        a.only,
        "--out",
        str(out),
        "--no-progress",
    ]
    cmd += (["--executor", "ray"] if executor == "ray" else []) + rest
    before = used_gib()
    t0 = time.perf_counter()
    with open(Path(a.out) / f"{executor}-{rnd}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    after = used_gib()
    folder = out / a.only
    res = json.loads((folder / "results.json").read_text())
    samples = [
        json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines() if x.strip()
    ]
    where = [f"{r.get('node_ip')} pid {r.get('pid')}" for r in res.get("replicas") or []]
    row = {
        "executor": executor,
        "round": rnd,
        "rc": rc,
        "status": res["status"],
        "recorded_executor": res.get("executor"),
        "generate_s": res["timings"]["generate_s"],
        "load_s": res["timings"]["load_s"],
        "wall_s": wall,
        "gpu_before_gib": before,
        "gpu_after_gib": after,
        "outputs": {s["id"]: (s["output"], s["output_tokens"]) for s in samples},
        "where": where,
    }
    mem = "n/a" if after is None else f"{before:.2f} -> {after:.2f} GiB"
    say(
        f"{executor:5} round {rnd}: exit {rc}, {res['status']}, results.json "
        f"executor={res.get('executor')}, engine start {row['load_s']:.1f} s, generation "
        f"{row['generate_s']:.2f} s, call {wall:.1f} s, {len(samples)} samples, GPU used "
        f"{mem}{', ran on ' + '; '.join(where) if where else ''}"
    )
    return row


def verdict(rows: list[dict], baseline_gib: float | None) -> bool:
    first = rows[0]["outputs"]
    same = all(r["outputs"] == first for r in rows)
    diff = sum(1 for r in rows for k, v in r["outputs"].items() if first.get(k) != v)
    ratios = []
    for rnd in sorted({r["round"] for r in rows}):
        by = {r["executor"]: r["generate_s"] for r in rows if r["round"] == rnd}
        if "ray" in by and "local" in by:
            ratios.append(by["ray"] / by["local"])
            say(
                f"round {rnd}: ray / local generation time = {by['ray']:.2f} / {by['local']:.2f} = "
                f"{ratios[-1]:.4f}"
            )
    ratio = statistics.median(ratios) if ratios else float("nan")
    mem_ok = baseline_gib is None or all(
        r["gpu_after_gib"] is not None and r["gpu_after_gib"] <= baseline_gib + MEMORY_SLACK_GIB
        for r in rows
    )
    ok_status = all(r["rc"] == 0 and r["status"] == "ok" for r in rows)
    rays = [r for r in rows if r["executor"] == "ray"]
    recorded = all(r["recorded_executor"] == "ray" for r in rays)
    say(
        f"outputs identical across {len(rows)} calls ({len(first)} examples): {same} ({diff} "
        "differing)"
    )
    say(
        f"median ray / local generation time: {ratio:.4f} (target within {TARGET:.0%}): "
        f"{abs(ratio - 1) <= TARGET}"
    )
    after = [round(r["gpu_after_gib"], 2) for r in rows if r["gpu_after_gib"] is not None]
    say(f"GPU memory back after every call (baseline {baseline_gib} GiB, after: {after}): {mem_ok}")
    say(f"every call ok: {ok_status}; ray results record executor=ray: {recorded}")
    good = same and abs(ratio - 1) <= TARGET and mem_ok and ok_status and recorded
    say("PASS" if good else "FAIL")
    return good


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe")
    ap.add_argument("--only", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    a, rest = ap.parse_known_args()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    baseline = used_gib()
    say(f"GPU used before: {baseline if baseline is None else round(baseline, 2)} GiB")
    rows = []
    for rnd in range(a.rounds):
        order = ("local", "ray") if rnd % 2 == 0 else ("ray", "local")
        for executor in order:
            rows.append(run_once(a, rest, executor, rnd))
    summary = [{k: v for k, v in r.items() if k != "outputs"} for r in rows]
    (Path(a.out) / "ray_vs_local.json").write_text(json.dumps(summary, indent=1))
    return 0 if verdict(rows, baseline) else 1


if __name__ == "__main__":
    sys.exit(main())
