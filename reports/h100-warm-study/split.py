"""The vLLM starts of study/ split from their engine.log by runner's own parser (from the repository
root: python reports/h100-warm-study/split.py reports/h100-warm-study/study/jsquad-vllm*)."""

import json
import re
import sys

from runner.engines.vllm.facts import parse_engine_log, start_parts

tot: dict[str, float] = {}
for d in sys.argv[1:]:
    r = json.load(open(f"{d}/results.json"))
    if not r["timings"].get("load_s"):
        continue  # a cell on another cell's engine
    log = re.sub(r"\x1b\[[0-9;]*m", "", open(f"{d}/engine.log").read())
    sp = start_parts(parse_engine_log(log), None, r["timings"]["load_s"], None)
    keys = ("load_s", "compile_s", "capture_s", "profile_kv_s", "other_s")
    row = {"start": r["timings"]["load_s"], **{k: sp[k] or 0.0 for k in keys}}
    for k, v in row.items():
        tot[k] = tot.get(k, 0.0) + v
    print(
        f"| {d.rstrip('/').split('/')[-1]} | " + " | ".join(f"{v:.1f}" for v in row.values()) + " |"
    )
print("| sum | " + " | ".join(f"{v:.1f}" for v in tot.values()) + " |")
