#!/usr/bin/env bash
# Issue 14 on the H200: the JSQuAD one-shot recipe under serving load, with the shapes in the shared folder
# (Qwen2.5-7B-Instruct, random weights: load_format dummy), 16 output tokens each, ignore_eos.
#   bench  benchmarks/serve_vs_vllm_bench.py: the runner's client and `vllm bench serve` on one vLLM server,
#          same 1,000 JSQuAD prompts, 50 req/s, seed 0, ROUNDS (default 3) alternating rounds, each compared
#          request by request (~5 min on a fresh host)
#   sweep  `runner go recipes/jsquad-serve.yaml`: both cells (question first, context first; prefix caching
#          on) at 10, 25, 50, 100, inf req/s until saturation (~4 min per cell); ONLY=CELL runs one cell
#   usage: SHARED=/root/shared bash benchmarks/h200_serve.sh OUT [bench|sweep|all]      (default: all)
# vLLM must be importable (../shared/gpu/README.md: export PYTHONPATH=/tmp/vllm-site:$PWD
# VLLM_USE_FLASHINFER_SAMPLER=0). Output goes to files under OUT line by line, so a run cut off by a time
# limit keeps what it printed; each part prints its last lines at the end.
set -uo pipefail
S=$(cd "${SHARED:-../shared}" && pwd)
out=$1
what=${2:-all}
mkdir -p "$out"
common=(--model-path Qwen/Qwen2.5-7B-Instruct="$S/models/qwen2.5-7b-instruct"
        --set dataset.path="$S/data/jsquad/valid-v1.3.json"
        --set model.load_format=dummy --set sampling.max_tokens=16 --set sampling.ignore_eos=true)
rc=0
if [ "$what" = bench ] || [ "$what" = all ]; then
  PYTHONUNBUFFERED=1 python3 benchmarks/serve_vs_vllm_bench.py recipes/jsquad-serve.yaml \
    --only jsquad-serve-qfirst "${common[@]}" --rate 50 --num-prompts 1000 --warmups 20 --seed 0 --rounds "${ROUNDS:-3}" \
    --out "$out/bench" > "$out/serve_vs_vllm_bench.log" 2>&1 || rc=$?
  tail -n 12 "$out/serve_vs_vllm_bench.log"
fi
if [ "$what" = sweep ] || [ "$what" = all ]; then
  log="$out/sweep${ONLY:+-$ONLY}.log"
  PYTHONUNBUFFERED=1 python3 -m runner go recipes/jsquad-serve.yaml ${ONLY:+--only "$ONLY"} "${common[@]}" \
    ${EXTRA:-} --out "$out/sweep" --timeout 900 --no-progress > "$log" 2>&1 || rc=$?
  tail -n 20 "$log"
  for f in "$out"/sweep/*/engine.log; do grep -h "req/s achieved\|saturated at\|every request failed" "$f"; done
fi
exit $rc
