"""Overhead of the runner against a plain vLLM script, on the same workload.

    python benchmarks/vllm_vs_runner.py RECIPE [--model-path ID=PATH] [--set k=v ...] [--out DIR]

1. Renders the recipe's prompts to token ids (the runner's own code).
2. Runs a plain vLLM script in a fresh process: LLM(**same args) + one generate() over the ids.
3. Runs `runner go RECIPE` (same overrides) in a fresh process.
Prints both generation times and wall times and their ratios (targets: generation within 3%,
wall within 10%). GPU only; vLLM must be importable.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAIN = r'''
import json, sys, time, os
t0 = time.perf_counter()
job = json.load(open(sys.argv[1]))
os.environ.update(job["env"])
from vllm import LLM, SamplingParams
llm = LLM(**job["llm_kwargs"])
t1 = time.perf_counter()
outs = llm.generate([{"prompt_token_ids": p} for p in job["prompts"]], SamplingParams(**job["sampling"]), use_tqdm=False)
t2 = time.perf_counter()
n_out = sum(len(o.outputs[0].token_ids) for o in outs)
json.dump({"load_s": t1 - t0, "generate_s": t2 - t1, "output_tokens": n_out, "n": len(outs)}, open(sys.argv[2], "w"))
llm.llm_engine.engine_core.shutdown(timeout=10)   # else the engine core outlives us, holding the GPU
sys.stdout.flush()
os._exit(0)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe")
    ap.add_argument("--model-path", action="append", default=[])
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "bench-reports"))
    a = ap.parse_args()

    from runner.cli import load_all, preflight
    from runner.engines.tokenizing import load_tokenizer, prompt_ids, uses_chat_template
    from runner.engines.vllm import sampling_params_kwargs

    lr = load_all((a.recipe,), tuple(a.sets), tuple(a.model_path))[0]
    r = lr.recipe
    _, messages, *_ = preflight(lr)
    tok = load_tokenizer(r.model)
    chat = uses_chat_template(tok, r.prompt.chat_template)
    ids = [prompt_ids(tok, m, chat) for m in messages]
    work = Path(tempfile.mkdtemp())
    job = {"llm_kwargs": r.engine.llm_kwargs(r.model), "env": r.engine.engine_env(),
           "sampling": sampling_params_kwargs(r.sampling), "prompts": ids}
    (work / "job.json").write_text(json.dumps(job))
    (work / "plain.py").write_text(PLAIN)

    from runner.gpumem import used_gib, wait_for_release
    before = used_gib()
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, str(work / "plain.py"), str(work / "job.json"), str(work / "plain.json")],
                         stdout=subprocess.DEVNULL, stderr=open(work / "plain.log", "w"), start_new_session=True)
    rc = p.wait()
    plain_wall = time.perf_counter() - t0
    try:
        os.killpg(p.pid, signal.SIGKILL)      # anything the plain script left behind
    except ProcessLookupError:
        pass
    wait_for_release(before)
    if rc != 0:
        sys.exit(f"plain vLLM script failed (exit {rc}); see {work / 'plain.log'}")
    plain = json.loads((work / "plain.json").read_text())

    cmd = [sys.executable, "-m", "runner", "go", a.recipe, "--out", a.out, "--no-progress"]
    for s in a.sets:
        cmd += ["--set", s]
    for m in a.model_path:
        cmd += ["--model-path", m]
    t0 = time.perf_counter()
    rr = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if rr.returncode != 0:
        sys.exit(f"runner go failed (exit {rr.returncode}):\n{rr.stdout[-2000:]}")
    runner_wall = time.perf_counter() - t0
    res = json.loads((Path(a.out) / r.name / "results.json").read_text())

    rows = [("generation (s)", plain["generate_s"], res["timings"]["generate_s"], 1.03),
            ("engine start (s)", plain["load_s"], res["timings"]["load_s"], None),
            ("whole wall time (s)", plain_wall, runner_wall, 1.10)]
    print(f"workload: {r.name}, {len(ids)} prompts, {sum(map(len, ids)):,} prompt tokens; "
          f"output tokens plain {plain['output_tokens']:,} / runner {res['tokens']['output']:,}")
    print(f"{'':22}{'plain vLLM':>12}{'runner':>12}{'ratio':>9}  target")
    for name, p, q, target in rows:
        ok = "" if target is None else ("ok" if q / p <= target else "MISSED") + f" (<= {target:.2f})"
        print(f"{name:22}{p:12.2f}{q:12.2f}{q / p:9.3f}  {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
