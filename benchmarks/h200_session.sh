#!/usr/bin/env bash
# One H200 session, step by step (each step fits one 10-minute device call; run them back to back).
#   bash benchmarks/h200_session.sh STEP OUT
# STEP: unpack (parts under .gpu/c4 + /root/stage, shared copied to /root/shared) | check (GPU tests,
# runner-vs-plain-vLLM, kill/resume) | study1 | study2 (the JSQuAD study in two halves) | serve
# Output goes to OUT line by line.
set -uo pipefail
step=$1; out=$2
mkdir -p "$out"
# wheels the host lacks (rapidfuzz, ...), carried in .whl/
if [ -d .whl ] && [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
S=/root/shared
MP=(--model-path Qwen/Qwen2.5-7B-Instruct=$S/models/qwen2.5-7b-instruct
    --model-path Qwen/Qwen2.5-7B-Instruct-AWQ=$S/models/qwen2.5-7b-instruct-awq)
SETS=(--set dataset.path=$S/data/jsquad/valid-v1.3.json --set model.load_format=dummy
      --set sampling.max_tokens=16 --set sampling.ignore_eos=true)
study() {
  python3 -m runner go recipes/jsquad-study.yaml --out /root/h200 "${MP[@]}" "${SETS[@]}" --timeout 500 \
    --no-progress --only "$1" 2>&1 | tee -a "$out/study.log"
}
case $step in
  unpack)
    mkdir -p /root/stage && cp .gpu/c4/vllm.tar.xz.* /root/stage/ && rm -rf $S && cp -r .gpu/c4/shared $S \
      && bash $S/gpu/unpack_vllm.sh /root/stage /tmp/vllm-site 2>&1 | tee "$out/unpack.log" ;;
  check)
    SHARED=$S timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$out/gpu-tests.log"
    timeout 250 python3 benchmarks/vllm_vs_runner.py recipes/jsquad-study.yaml --only jsquad-vllm --rounds 1 \
      "${MP[@]}" "${SETS[@]}" --out /root/bench 2>&1 | tee "$out/vllm_vs_runner.log"
    timeout 150 python3 benchmarks/kill_resume.py recipes/jsquad-study.yaml --only jsquad-vllm-oneshot-cache \
      --out /root/killres "${MP[@]}" "${SETS[@]}" 2>&1 | tee "$out/kill_resume.log" ;;
  study1)
    study 'jsquad-vllm-oneshot*'
    study 'jsquad-vllm-fp8*'
    tar -C /root -czf "$out/h200-1.tgz" h200 ;;
  study2)
    study 'jsquad-hf-*'; study 'jsquad-vllm'; study 'jsquad-vllm-bigbatch'; study 'jsquad-vllm-awq'
    study 'jsquad-vllm-offload'
    tar -C /root -czf "$out/h200-2.tgz" h200 ;;
  serve)
    SHARED=$S bash benchmarks/h200_serve.sh "$out" bench
    SHARED=$S EXTRA="--set load.num_requests=400" bash benchmarks/h200_serve.sh "$out" sweep ;;
  report)
    python3 -m runner report /root/h200 --baseline jsquad-hf-sequential 2>&1 | tee "$out/report.log"
    tar -C /root -czf "$out/h200.tgz" h200 ;;
esac
cp -r /root/h200/summary.md "$out/" 2>/dev/null || true
nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee -a "$out/nvidia-smi.log"
