"""What the runner adds around the engine, measurable without a GPU.

    python benchmarks/pipeline_overhead.py [--rounds N] [--shared ../shared]

Runs `runner go recipes/jsquad-study.yaml --only jsquad-hf-batched` over all 4,442 JSQuAD questions
on the CPU with a tiny random Qwen2-shaped model (the real Qwen2.5 tokenizer and chat template, 1
layer, hidden 64) and 1 output token, so the engine's own work is small and the rest shows: parsing
and checking the recipe, loading the dataset, rendering and tokenizing 4,442 prompts, starting the
isolated worker, scoring, writing samples, reports and the summary. Prints, per round, the whole
wall time, the engine's start and generation time as the run recorded them, and the rest: what the
runner adds, plus the worker's own start (Python, torch and transformers imports, which a plain
script pays too), split into the parent's part (wall − the run's total) and the worker's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.gpu_helpers import tiny_qwen  # noqa: E402  (the GPU tests' tiny-model builder)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    a = ap.parse_args()
    shared = Path(a.shared).resolve()
    work = Path(tempfile.mkdtemp())
    model = tiny_qwen(
        work / "tiny-qwen",
        shared / "models" / "qwen2.5-7b-instruct",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "go",
        "recipes/jsquad-study.yaml",
        "--only",
        "jsquad-hf-batched",
        "--no-progress",
        "--force",
        "--model-path",
        f"Qwen/Qwen2.5-7B-Instruct={model}",
        "--set",
        f"dataset.path={shared / 'data/jsquad/valid-v1.3.json'}",
        "--set",
        "model.load_format=dummy",
        "--set",
        "model.dtype=float32",
        "--set",
        "engine.device=cpu",
        "--set",
        "engine.batch_size=64",
        "--set",
        "sampling.max_tokens=1",
        "--set",
        "sampling.ignore_eos=true",
    ]
    print(
        f"{'round':>5}{'wall':>9}{'start':>9}{'generate':>10}{'rest':>9}"
        f"{'  (parent':>10}{'worker)':>9}"
    )
    for k in range(1, a.rounds + 1):
        out = work / f"out-{k}"
        t0 = time.perf_counter()
        rr = subprocess.run(
            cmd + ["--out", str(out)], cwd=ROOT, capture_output=True, text=True, check=False
        )
        wall = time.perf_counter() - t0
        if rr.returncode != 0:
            sys.exit(
                f"runner go failed (exit {rr.returncode}):\n{rr.stdout[-1500:]}{rr.stderr[-1500:]}"
            )
        t = json.loads((out / "jsquad-hf-batched" / "results.json").read_text())["timings"]
        rest = wall - t["load_s"] - t["generate_s"]
        parent = wall - t["total_s"]  # checks, data, prompts, starting the worker, reports, summary
        print(
            f"{k:>5}{wall:9.2f}{t['load_s']:9.2f}{t['generate_s']:10.2f}{rest:9.2f}"
            f"{parent:10.2f}{rest - parent:9.2f}",
            flush=True,
        )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
