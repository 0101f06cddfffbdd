#!/usr/bin/env bash
# The JSQuAD study on a GPU host (reports/h200-study/): its cells over all 4,442 validation questions,
# Qwen2.5-7B-Instruct shapes with random weights (load_format: dummy), 16 output tokens, ignore_eos
# (the settings of the plain-vLLM measurements in ../shared/gpu/README.md).
#   usage: benchmarks/h200_study.sh OUT_DIR [RECIPE ...]     (default: recipes/jsquad-study.yaml; SHARED=../shared;
#   a subset: benchmarks/h200_study.sh OUT recipes/jsquad-study.yaml --only 'jsquad-vllm*')
set -uo pipefail
S=$(cd "${SHARED:-../shared}" && pwd)
out=$1; shift
if [ $# -eq 0 ]; then set -- recipes/jsquad-study.yaml; fi
python3 -m runner go "$@" --out "$out" \
  --model-path Qwen/Qwen2.5-7B-Instruct="$S/models/qwen2.5-7b-instruct" \
  --model-path Qwen/Qwen2.5-7B-Instruct-AWQ="$S/models/qwen2.5-7b-instruct-awq" \
  --set dataset.path="$S/data/jsquad/valid-v1.3.json" \
  --set model.load_format=dummy --set sampling.max_tokens=16 --set sampling.ignore_eos=true \
  --timeout 400 --no-progress
