"""How long `runner check` and `runner plan` take, with the token-count cache empty (first time) and
filled.

    python benchmarks/plan_speed.py RECIPE... [--model-path ID=PATH ...] [--set k=v ...] [--rounds
    N]

Each round runs, in fresh processes: `plan` with an empty $RUNNER_CACHE/prompt-tokens (the counts
are made with transformers and kept), `plan` again (read back), then `check` (with its prompt-token
statistics) the same two ways. Prints each round's seconds and the median with min-max per case. The
private cache folder is a temporary copy of $RUNNER_CACHE, so the user's own cache is not touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("recipes", nargs="+")
    ap.add_argument("--model-path", action="append", default=[])
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    extra = [x for mp in a.model_path for x in ("--model-path", mp)] + [
        x for s in a.set for x in ("--set", s)
    ]
    runner = [sys.executable, "-c", "from runner.cli import main; main()"]
    user_cache = Path(os.environ.get("RUNNER_CACHE", Path.home() / ".cache" / "runner"))
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        shutil.copytree(
            user_cache, cache, ignore=shutil.ignore_patterns("prompt-tokens"), dirs_exist_ok=True
        )
        env = {**os.environ, "RUNNER_CACHE": str(cache)}
        times: dict[str, list[float]] = {}
        for r in range(1, a.rounds + 1):
            for command in ("plan", "check"):
                shutil.rmtree(cache / "prompt-tokens", ignore_errors=True)
                for when in ("first", "kept"):
                    s = timed([*runner, command, *a.recipes, *extra], env)
                    times.setdefault(f"{command} ({when})", []).append(s)
                    print(f"round {r}: {command} ({when}) {s:.1f} s", flush=True)
    for case, xs in times.items():
        print(
            f"{case}: median {statistics.median(xs):.1f} s (min {min(xs):.1f}, max {max(xs):.1f}, "
            f"n={len(xs)})"
        )


if __name__ == "__main__":
    main()
