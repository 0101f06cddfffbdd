#!/usr/bin/env bash
# On the GPU host, once vLLM is importable (../shared/gpu/README.md): the runner-vs-plain-vLLM
# benchmark (--rounds pairs in alternating order, medians) and the GPU tests. Output goes straight
# to files under OUT, line by line, so a run cut off by a time limit keeps what it printed.
#   usage: SHARED=/root/shared bash benchmarks/gpu_check.sh OUT [ROUNDS]      (ROUNDS default 2)
# About 2 minutes per round and 2 minutes for the tests on an H200.
set -uo pipefail
S=$(cd "${SHARED:-../shared}" && pwd)
out=$1
rounds=${2:-2}
mkdir -p "$out"
PYTHONUNBUFFERED=1 python3 benchmarks/vllm_vs_runner.py recipes/jsquad-study.yaml --only jsquad-vllm --rounds "$rounds" \
  --model-path Qwen/Qwen2.5-7B-Instruct="$S/models/qwen2.5-7b-instruct" \
  --set dataset.path="$S/data/jsquad/valid-v1.3.json" \
  --set model.load_format=dummy --set sampling.max_tokens=16 --set sampling.ignore_eos=true \
  --out "$out/bench" > "$out/vllm_vs_runner.log" 2>&1
SHARED="$S" python3 -m pytest -m gpu -q -p no:cacheprovider > "$out/gpu-tests.log" 2>&1
tail -n 5 "$out/vllm_vs_runner.log" "$out/gpu-tests.log"
