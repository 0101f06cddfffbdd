#!/usr/bin/env bash
# One H200 session, step by step (each step fits one 10-minute device call; run them back to back: the
# host is given back after 30 s idle and a fresh one needs the transfers again).
#   bash benchmarks/h200_session.sh STEP OUT
# Transfers (prepared here by benchmarks/h200_pack.sh: .gpu/p1 .. .gpu/pN): `stage` copies the payload part
# this call carried to /root/stage/parts (every call but the last); `unpack` (the last part) stages it,
# untars the payload (vLLM bundle, shared folder, Ray, wheels) and unpacks vLLM into /tmp/vllm-site, Ray
# into /tmp/ray-site and the wheels into /tmp/site.
# Runs: check (GPU tests, runner-vs-plain-vLLM, kill/resume) | study1 | study2 (the JSQuAD study in two
# halves) | fast (the fastest cells, the one-shot reference, vllm-bigbatch, hf-batched) | faster1 + faster2
# (fp8-graphs and its three variations, with the one-shot reference on the same host) | busy (GPU busy of
# jsquad-vllm-fp8-fast) | probe, probe2 (benchmarks/step_probe.py on fp8-wide's prompts: variations, GPU timeline)
# | onewave (fp8-onewave + the one-shot reference through the runner, then plain rounds) | probe4, probe5
# (medians of knob variations on one engine) | steps (fp8-16k / fp8-8k and the reference through the
# runner, 3 rounds) | sampled (the engine core's threads sampled) | warm (steps with engine.warmup=true)
# | firstround (a fresh engine's first round: as is, warmed up, 80% GPU memory) | graphs8k (fp8-8k-graphs
# and the reference through the runner; CELLS, ROUNDS, NAME override)
# | offload | ray (ray_vs_local.py) | serve | sweep | report. Output goes to OUT line by line.
set -uo pipefail
step=$1; out=$2
mkdir -p "$out"
ST=/root/stage
export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
S=/root/shared
MP=(--model-path Qwen/Qwen2.5-7B-Instruct=$S/models/qwen2.5-7b-instruct
    --model-path Qwen/Qwen2.5-7B-Instruct-AWQ=$S/models/qwen2.5-7b-instruct-awq)
SETS=(--set dataset.path=$S/data/jsquad/valid-v1.3.json --set model.load_format=dummy
      --set sampling.max_tokens=16 --set sampling.ignore_eos=true)
study() {  # study PATTERNS [SECONDS]
  timeout "${2:-550}" python3 -m runner go recipes/jsquad-study.yaml --out /root/h200 "${MP[@]}" "${SETS[@]}" \
    --timeout 500 --no-progress --only "$1" 2>&1 | tee -a "$out/study.log"
}
alternate() {  # alternate NAME ROUNDS [--set ...]: the one-shot reference, fp8-16k and fp8-8k (or the cells in
               # $CELLS) through the runner, one `go` per cell of at most $GO_SECONDS (120), ROUNDS alternating
               # rounds into /root/NAME1..; generation times to NAME.log. Worst case cells x rounds x GO_SECONDS:
               # more than one 600 s device call can hold, so wrap the step in `timeout` (typical runs: 40-75 s)
  local name=$1 rounds=$2; shift 2
  for k in $(seq "$rounds"); do
    for cell in ${CELLS:-jsquad-vllm-oneshot-cache jsquad-vllm-fp8-16k jsquad-vllm-fp8-8k}; do
      timeout "${GO_SECONDS:-120}" python3 -m runner go recipes/jsquad-study.yaml --out /root/$name$k "${MP[@]}" "${SETS[@]}" "$@" \
        --timeout $(( ${GO_SECONDS:-120} - 10 )) --no-progress --only "$cell" 2>&1 | tee -a "$out/$name.log"
      python3 -c "import json, sys; d = json.load(open(sys.argv[1])); e = d['environment'].get('engine_extra')
print('generation', sys.argv[1], d['status'], d['timings']['generate_s'], (e or {}).get('warmup') or '')" \
        /root/$name$k/$cell/results.json 2>&1 | tee -a "$out/$name.log"
    done
  done
  tar -C /root -czf "$out/$name.tgz" $(for k in $(seq "$rounds"); do echo $name$k; done)
}
stage() {
  mkdir -p $ST/parts
  for f in .gpu/p*/payload.tar.*; do [ -f "$f" ] && cp "$f" $ST/parts/; done
  ls -la $ST/parts | tee -a "$out/stage.log"
}
case $step in
  stage) stage ;;
  unpack)
    stage
    cat $ST/parts/payload.tar.* | tar -C $ST -xf - || { echo "payload incomplete: $(ls $ST/parts)"; exit 1; }
    rm -rf $S && cp -r $ST/shared $S
    bash $S/gpu/unpack_vllm.sh $ST /tmp/vllm-site 2>&1 | tee "$out/unpack.log"
    [ -f $ST/ray-site.tar.xz ] && mkdir -p /tmp/ray-site && tar -C /tmp/ray-site -xJf $ST/ray-site.tar.xz \
      && echo "ray unpacked" | tee -a "$out/unpack.log"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      $ST/whl/*.whl 2>&1 | tail -3 | tee -a "$out/unpack.log" ;;
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
  fast)
    study 'jsquad-vllm-fp8-graphs,jsquad-vllm-fp8-fast,jsquad-vllm-oneshot-cache,jsquad-vllm-bigbatch' 330
    study 'jsquad-hf-batched' 200
    tar -C /root -czf "$out/h200-fast.tgz" h200 ;;
  faster1)  # the one-shot reference (question first), fp8-graphs and its fp8-KV-cache variation (~5 min)
    study 'jsquad-vllm-oneshot-cache,jsquad-vllm-fp8-graphs,jsquad-vllm-fp8-kv8' 560
    tar -C /root -czf "$out/h200-faster.tgz" h200 ;;
  faster2)  # fp8-graphs with 4,096 sequences / 65,536 tokens per step, with and without the fp8 KV cache (~4 min)
    study 'jsquad-vllm-fp8-wide,jsquad-vllm-fp8-kv8-wide' 560
    tar -C /root -czf "$out/h200-faster.tgz" h200 ;;
  busy)  # GPU busy of the fastest eager cell (the first on a fresh host: ~2 min)
    study 'jsquad-vllm-fp8-fast' 200
    tar -C /root -czf "$out/h200-busy.tgz" h200 ;;
  probe)  # where the fastest cell's time goes: plain vLLM under variations (benchmarks/step_probe.py; ~7 min)
    E='"enforce_eager":true'
    V=(--variant "eager:{\"llm\":{$E}}"
       --variant "eager-nostats:{\"llm\":{$E,\"disable_log_stats\":true}}"
       --variant "eager-nodetok:{\"llm\":{$E},\"sampling\":{\"detokenize\":false}}"
       --variant "eager-seqs1024:{\"llm\":{$E,\"max_num_seqs\":1024}}"
       --variant "eager-all:{\"llm\":{$E,\"max_num_seqs\":8192,\"max_num_batched_tokens\":131072}}"
       --variant "eager-sync:{\"llm\":{$E,\"async_scheduling\":false}}"
       --variant "eager-kernels:{\"llm\":{$E},\"mode\":\"kernels\"}"
       --variant "eager-cpu:{\"llm\":{$E},\"mode\":\"cpu\"}")
    timeout "${PROBE_SECONDS:-560}" python3 benchmarks/step_probe.py recipes/jsquad-study.yaml --only jsquad-vllm-fp8-wide \
      "${MP[@]}" "${SETS[@]}" "${V[@]}" --out /root/probe 2>&1 | tee "$out/probe.log"
    tar -C /root -czf "$out/probe.tgz" --exclude='*.json' probe ;;
  probe2)  # the GPU timeline (vLLM's torch profiler) of the fastest cell, eager and compiled; repeats on one
           # engine; chunked enqueue; no detokenizing; the engine core in-process (~6 min)
    E='"enforce_eager":true'; R3='"rounds":[{},{},{}]'
    V=(--variant "eager-trace:{\"llm\":{$E},\"mode\":\"trace\",\"rounds\":[{},{},{},{\"chunk\":512},{\"chunk\":512},{\"sampling\":{\"detokenize\":false}},{\"sampling\":{\"detokenize\":false}}]}"
       --variant "eager:{\"llm\":{$E},$R3}"
       --variant "eager-inproc:{\"llm\":{$E},\"env\":{\"VLLM_ENABLE_V1_MULTIPROCESSING\":\"0\"},\"rounds\":[{},{}]}"
       --variant "graphs-trace:{\"mode\":\"trace\",$R3}")
    timeout "${PROBE_SECONDS:-570}" python3 benchmarks/step_probe.py recipes/jsquad-study.yaml --only jsquad-vllm-fp8-wide \
      "${MP[@]}" "${SETS[@]}" "${V[@]}" --out /root/probe2 2>&1 | tee "$out/probe2.log"
    tar -C /root -czf "$out/probe2.tgz" --exclude='*.json' --exclude='*-trace' probe2
    find /root/probe2/eager-trace -name '*.gz' -size -30M -exec cp {} "$out/" \; ;;
  onewave)  # the one-shot reference and fp8-onewave through the runner, then plain vLLM 5 rounds each on one
            # engine: fp8-wide eager (4,096 sequences) against onewave (8,192) (~6 min)
    study 'jsquad-vllm-oneshot-cache,jsquad-vllm-fp8-onewave' 240
    tar -C /root -czf "$out/h200-onewave.tgz" h200
    E='"enforce_eager":true'; R5='"rounds":[{},{},{},{},{}]'
    timeout "${PROBE_SECONDS:-300}" python3 benchmarks/step_probe.py recipes/jsquad-study.yaml --only jsquad-vllm-fp8-wide \
      "${MP[@]}" "${SETS[@]}" --variant "wide:{\"llm\":{$E},$R5}" \
      --variant "onewave:{\"llm\":{$E,\"max_num_seqs\":8192},$R5}" \
      --variant "onewave-nostats:{\"llm\":{$E,\"max_num_seqs\":8192,\"disable_log_stats\":true},\"rounds\":[{},{},{}]}" \
      --out /root/probe3 2>&1 | tee "$out/probe3.log" ;;
  probe4)  # not yet run: chunked enqueue and no detokenizing alternating with plain rounds on one engine
          # (4 each), then no stats logging (4 rounds): medians instead of single runs (~5 min)
    E='"enforce_eager":true'; W='"max_num_seqs":8192'
    A='{},{"chunk":512},{"sampling":{"detokenize":false}}'
    timeout "${PROBE_SECONDS:-560}" python3 benchmarks/step_probe.py recipes/jsquad-study.yaml --only jsquad-vllm-fp8-wide \
      "${MP[@]}" "${SETS[@]}" --variant "alternating:{\"llm\":{$E,$W},\"rounds\":[$A,$A,$A,$A]}" \
      --variant "nostats:{\"llm\":{$E,$W,\"disable_log_stats\":true},\"rounds\":[{},{},{},{}]}" \
      --out /root/probe4 2>&1 | tee "$out/probe4.log" ;;
  probe5)  # medians of 4 rounds each: the fastest cell's settings with and without a shallow SamplingParams
           # copy per request (alternating on one engine), the V1 model runner, 16,384 tokens per step, no
           # stats logging; then the engine core's threads sampled (core_sampler.py) over 3 rounds (~6 min)
    E='"enforce_eager":true'; A='{},{"sampling":{"skip_clone":true}}'; R='"rounds":[{},{},{},{}]'
    timeout "${PROBE_SECONDS:-480}" python3 benchmarks/step_probe.py recipes/jsquad-study.yaml --only jsquad-vllm-fp8-wide \
      "${MP[@]}" "${SETS[@]}" --variant "ctl:{\"llm\":{$E},\"rounds\":[$A,$A,$A,$A]}" \
      --variant "v1runner:{\"llm\":{$E},\"env\":{\"VLLM_USE_V2_MODEL_RUNNER\":\"0\"},$R}" \
      --variant "tok16k:{\"llm\":{$E,\"max_num_batched_tokens\":16384},$R}" \
      --variant "nostats:{\"llm\":{$E,\"disable_log_stats\":true},$R}" \
      --variant "sampled:{\"llm\":{$E},\"mode\":\"coresample\",\"rounds\":[{},{},{}]}" \
      --out /root/probe5 2>&1 | tee "$out/probe5.log"
    tar -C /root -czf "$out/probe5.tgz" --exclude='*.json' probe5 ;;
  steps)  # the one-shot reference (question first) and fp8 with 16,384 / 8,192 tokens per step through the
          # runner, three times each, alternating (~7 min; run on 2026-12-03 with one `go` per round, whose
          # 180 s limit cut the first round's third cell)
    alternate steps 3 ;;
  warm)  # not yet run: `steps` with the vLLM engine's warm-up (engine.warmup=true) in every cell (~6 min)
    alternate warm "${ROUNDS:-3}" --set engine.warmup=true ;;
  graphs8k)  # the one-shot reference and fp8-8k-graphs through the runner with the warm-up, 2 rounds (~6 min
             # typical, the first compile on a host ~70 s; CELLS, ROUNDS and NAME override)
    CELLS="${CELLS:-jsquad-vllm-oneshot-cache jsquad-vllm-fp8-8k-graphs}" GO_SECONDS=200 \
      alternate "${NAME:-graphs}" "${ROUNDS:-2}" --set engine.warmup=true ;;
  firstround)  # not yet run: the first round on a fresh engine (plain vLLM, fp8 eager, 16,384 tokens per step),
               # as is / after the warm-up batch / with 80% of the GPU memory, twice each, interleaved (~4 min)
    E='"enforce_eager":true,"max_num_batched_tokens":16384'; V=()
    for k in a b; do
      V+=(--variant "plain-$k:{\"llm\":{$E}}" --variant "warm-$k:{\"llm\":{$E},\"warmup\":true}"
          --variant "mem80-$k:{\"llm\":{$E,\"gpu_memory_utilization\":0.8}}")
    done
    timeout "${PROBE_SECONDS:-400}" python3 benchmarks/step_probe.py recipes/jsquad-study.yaml --only jsquad-vllm-fp8-wide \
      "${MP[@]}" "${SETS[@]}" "${V[@]}" --out /root/firstround 2>&1 | tee "$out/firstround.log"
    tar -C /root -czf "$out/firstround.tgz" --exclude='*.json' firstround ;;
  sampled)  # the engine core's threads sampled (core_sampler.py): fp8 eager with 65,536 and 16,384 tokens per step
    E='"enforce_eager":true'; R='"rounds":[{},{},{}]'
    timeout "${PROBE_SECONDS:-300}" python3 benchmarks/step_probe.py recipes/jsquad-study.yaml --only jsquad-vllm-fp8-wide \
      "${MP[@]}" "${SETS[@]}" --variant "sampled:{\"llm\":{$E},\"mode\":\"coresample\",$R}" \
      --variant "sampled16k:{\"llm\":{$E,\"max_num_batched_tokens\":16384},\"mode\":\"coresample\",$R}" \
      --out /root/sampled 2>&1 | tee "$out/sampled.log"
    tar -C /root -czf "$out/sampled.tgz" --exclude='*.json' sampled ;;
  offload)
    study 'jsquad-vllm-offload' 330
    tar -C /root -czf "$out/h200-offload.tgz" h200 ;;
  ray)
    PYTHONPATH=/tmp/vllm-site:/tmp/ray-site:/tmp/site:$PWD timeout "${RAY_SECONDS:-300}" python3 benchmarks/ray_vs_local.py \
      recipes/jsquad-study.yaml --only jsquad-vllm --rounds "${ROUNDS:-1}" --out /root/ray "${MP[@]}" "${SETS[@]}" \
      --timeout 300 2>&1 | tee "$out/ray_vs_local.log"
    tar -C /root -czf "$out/ray.tgz" --exclude='*/samples.partial.jsonl' ray ;;
  serve)  # the client against vllm bench serve (~5 min with 3 rounds)
    SHARED=$S timeout 500 bash benchmarks/h200_serve.sh "$out" bench ;;
  sweep)  # the rate sweep of both layouts, 400 requests per rate (~4 min)
    SHARED=$S EXTRA="--set load.num_requests=400" timeout 500 bash benchmarks/h200_serve.sh "$out" sweep ;;
  report)
    python3 -m runner report /root/h200 --baseline jsquad-hf-sequential 2>&1 | tee "$out/report.log"
    tar -C /root -czf "$out/h200.tgz" h200 ;;
esac
cp -r /root/h200/summary.md "$out/" 2>/dev/null || true
nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee -a "$out/nvidia-smi.log"
