"""A vLLM run killed midway resumes with every sample once (issue: vLLM keeps its finished samples).

    python benchmarks/kill_resume.py RECIPE [--only CELL] [--at 0.5] [runner go options...]

Starts `runner go`, waits until the partial samples file holds `--at` of the examples, SIGKILLs the
runner (no cleanup possible), checks the recipe's process group is gone, runs the same command
again and checks: every example once, in dataset order, and how many were reused. Prints one line
per step (flushed), then PASS or FAIL."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lines(p: Path) -> int:
    try:
        return max(len(p.read_bytes().splitlines()) - 1, 0)
    except OSError:
        return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe")
    ap.add_argument("--only", required=True)
    ap.add_argument("--at", type=float, default=0.5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--total", type=int, default=4442)
    a, rest = ap.parse_known_args()
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "go",
        a.recipe,
        "--only",
        a.only,
        "--out",
        a.out,
        "--no-progress",
        *rest,
    ]
    folder = Path(a.out) / a.only
    partial = folder / "samples.partial.jsonl"
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    want = int(a.total * a.at)
    while _lines(partial) < want and p.poll() is None:
        time.sleep(0.05)
    n_before = _lines(partial)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    print(
        f"killed the runner after {time.perf_counter() - t0:.1f} s with {n_before} samples "
        "finished",
        flush=True,
    )
    pgid = int(re.findall(r"process group (\d+)", (folder / "engine.log").read_text())[-1])
    deadline = time.monotonic() + 30
    gone = False
    while time.monotonic() < deadline and not gone:
        try:
            os.killpg(pgid, 0)
            time.sleep(0.2)
        except ProcessLookupError:
            gone = True
    print(f"recipe process group {pgid} gone: {gone}", flush=True)
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print(
        f"rerun exit {r.returncode}: "
        f"{r.stdout.strip().splitlines()[-3:] if r.stdout else r.stderr[-500:]}",
        flush=True,
    )
    res = json.loads((folder / "results.json").read_text())
    ids = [json.loads(x)["id"] for x in (folder / "samples.jsonl").read_text().splitlines()]
    ok = (
        gone
        and r.returncode == 0
        and len(ids) == len(set(ids)) == res["n_samples"] == a.total
        and res["reused_samples"] >= n_before - 5
    )
    print(
        f"samples {len(ids)} (unique {len(set(ids))}), reused {res['reused_samples']}, generation "
        f"{res['timings']['generate_s']:.1f} s: {'PASS' if ok else 'FAIL'}",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
