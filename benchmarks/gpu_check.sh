#!/usr/bin/env bash
# The GPU checks on a host with torch + CUDA but no package index, one step per call (each fits 10 minutes; make
# the calls back to back: a host given back needs the transfers again). Output goes to OUT line by line.
#   bash benchmarks/gpu_check.sh stage OUT        every transfer call but the last: keeps the vLLM bundle part
#                                                 carried in .gpu/ (../shared/gpu/pack_vllm.py --part-mib 35: the
#                                                 tree itself travels too, ~18 MiB with reports/; a part + the tree
#                                                 must stay under 64 MiB, the last part with
#                                                 .gpu/shared and .whl too)
#   bash benchmarks/gpu_check.sh unpack OUT       the last transfer (.gpu/ with the last part and a copy of
#                                                 ../shared in .gpu/shared, .whl/ with the wheels the host lacks):
#                                                 vLLM into /tmp/vllm-site, the wheels into /tmp/site, shared to
#                                                 /root/shared
#   bash benchmarks/gpu_check.sh tests OUT [K]    the GPU tests (pytest -m gpu), those -k K selects (all 11 need more
#                                                 than one call's 570 s: three calls, 'serving or profile' ~180 s,
#                                                 'empty_prefix_cache' ~140 s, 'not serving and not profile and not
#                                                 empty_prefix_cache' ~330-450 s; 'dies_starting' alone 33 s on an H200)
#   bash benchmarks/gpu_check.sh bench OUT [N] [ARG...] runner vs a plain vLLM script on the study's jsquad-vllm
#                                                 cell, N alternating pairs (default 2; ARGs go to vllm_vs_runner.py,
#                                                 e.g. --plain-sampler; 3 warm pairs take ~390 s, a cold first pair
#                                                 ~50 s more); both sides' logs and the runner's folders in
#                                                 bench-logs.tgz
#   bash benchmarks/gpu_check.sh killres OUT      kill a vLLM run of the study's reference cell midway and resume it
#   bash benchmarks/gpu_check.sh serve OUT        the JSQuAD one-shot recipe under load (jsquad-serve.yaml, the
#                                                 question-first cell, 400 requests at 25, 100 and inf req/s)
#   bash benchmarks/gpu_check.sh gguf OUT         keeps the SmolLM2 GGUF part carried in .gpu/gguf/ (the file is 94 MiB,
#                                                 over one call's 64: `split -b 47M` it into .gpu/gguf/ first)
#   bash benchmarks/gpu_check.sh repeat OUT [N]   the JSQuAD study's reference cell (jsquad-vllm-oneshot-cache, the seed's
#                                                 best technique) and fastest cell (jsquad-vllm-fp8-graphs), N repeats
#                                                 each (default 5), taking turns with an engine restart every turn, in
#                                                 one call; the folder tarred to OUT (run again to finish if cut off)
#   bash benchmarks/gpu_check.sh tune OUT         runner tune recipes/jsquad-tune.yaml (the fp8 scheme and the step
#                                                 size around the best hand-written cell), its folder tarred to OUT
#                                                 (two calls: run again to resume; its earlier axes, step size x KV
#                                                 dtype and FlashInfer, took 574 + 297 s on an H100)
#   bash benchmarks/gpu_check.sh profile OUT      the JSQuAD study's reference cell and fastest hand-written cell with
#                                                 `profile: true` (kernel classes, idle, prefill vs decode beside the
#                                                 plan's floor), all 4,442 questions; the folder tarred to OUT
#   bash benchmarks/gpu_check.sh study-tune OUT [S] runner tune recipes/jsquad-study.yaml (weights, CUDA graphs, step
#                                                 shape from the plain context-first cell, against the hand-written
#                                                 cells), compile cache in /root/vcache, at most S seconds (default
#                                                 560); the folder tarred to OUT (run again to resume)
#   bash benchmarks/gpu_check.sh ref OUT [R]      the JSQuAD study's reference cell (jsquad-vllm-oneshot-cache), all
#                                                 4,442 questions, R repeats on one engine (default 3), energy and
#                                                 dollars at $3.5 per GPU-hour; the folder tarred to OUT
#   bash benchmarks/gpu_check.sh hf-cb OUT [N] [S] the JSQuAD study's transformers cells, static batches of 128 and
#                                                 continuous batching, on N examples each (default: all), at most S
#                                                 seconds (default 560)
#   bash benchmarks/gpu_check.sh xquad-tune OUT   after `gguf`: runner tune recipes/xquad-smollm2-study.yaml (real
#                                                 weights: the gate against a faster, shorter answer) and the study's
#                                                 transformers cells (static and continuous batching)
#   bash benchmarks/gpu_check.sh study OUT CELLS  the JSQuAD study's cells that CELLS names (runner go's --only) into
#                                                 /root/study, each folder of the study tarred to OUT without samples;
#                                                 the whole study in four calls (an H100 from a fresh host, cold
#                                                 compile caches: 261, 353, 258, 283 s; reports/h100-study):
#                                                 'jsquad-hf-*'; 'jsquad-vllm-bigbatch,jsquad-vllm-awq,jsquad-vllm-
#                                                 offload'; 'jsquad-vllm,jsquad-vllm-oneshot*,jsquad-vllm-fp8,jsquad-
#                                                 vllm-fp8-fast,jsquad-vllm-fp8-onewave,jsquad-vllm-fp8-16k,jsquad-vllm-
#                                                 fp8-8k' (jsquad-vllm runs on jsquad-vllm-oneshot-nocache's engine, as in
#                                                 one `runner go` of the study: keep them in one call);
#                                                 'jsquad-vllm-fp8-graphs,jsquad-vllm-fp8-kv8,jsquad-vllm-fp8-wide,jsquad-
#                                                 vllm-fp8-kv8-wide,jsquad-vllm-fp8-8k-graphs' (a call cut short: the same
#                                                 CELLS again resumes), then `runner report /root/study`
#   bash benchmarks/gpu_check.sh warm OUT [CELLS] [DIR] the JSQuAD study's vLLM cells (or those CELLS names) on 8
#                                                 examples into /root/DIR (default warm-all):
#                                                 fills the compile cache ($RUNNER_CACHE/vllm) as a first run of the
#                                                 study would, and pays the host's first vLLM start, so the four
#                                                 `study` calls after it measure a second run's starts (estimated
#                                                 ~400 s on an H100: the five CUDA-graph cells compiled cold in 42-45 s
#                                                 each; a call cut short: run again). Warm the graph cells
#                                                 only and the first bf16-eager and AWQ engines after it pay
#                                                 the host's first run of their kernels (+12 s, +7.5 s in
#                                                 reports/h100-warm-study): for the study's share, warm
#                                                 'jsquad-vllm-fp8-graphs,jsquad-vllm-fp8-kv8,jsquad-vllm-fp8-wide,
#                                                 jsquad-vllm-fp8-kv8-wide,jsquad-vllm-fp8-8k-graphs,jsquad-vllm-bigbatch,
#                                                 jsquad-vllm-awq' (no spaces; 422 s on an H100, reports/h100-tokcopies;
#                                                 the whole study after it took ~1,640 s of calls there: one session's
#                                                 device time only when its first machine start opens), and
#                                                 jsquad-vllm-offload for a second run's offload start (~80 s more: a
#                                                 configuration's first start autotunes, reports/h100-tokcopies)
#   bash benchmarks/gpu_check.sh warm-par OUT CELLS CELLS... `warm` of each CELLS at once, each into /root/warm-pN,
#                                                 on 0.4 of the GPU with 4 GiB of KV cache (vLLM's compile hash and
#                                                 the runner's autotune list leave the memory settings out, so the
#                                                 study's starts after it are as warm; the compiles are mostly CPU
#                                                 work, which the streams overlap): for the study's share, the eight
#                                                 'jsquad-vllm-fp8-graphs,jsquad-vllm-fp8-kv8,jsquad-vllm-fp8-8k-graphs,
#                                                 jsquad-vllm-awq' 'jsquad-vllm-fp8-wide,jsquad-vllm-fp8-kv8-wide,
#                                                 jsquad-vllm-bigbatch,jsquad-vllm-offload' took 292 s on an H100
#                                                 (seven of them one after another: 422 s), and the whole study after it three
#                                                 `study` calls of 154, 400 and 424 s (reports/h100-second-run)
#   STUDY_ARGS='...' bash benchmarks/gpu_check.sh warm|study OUT ...   (STUDY_TIMEOUT=S: a `study` call's limit, 570 s)
#                                                 extra `runner go` arguments for the vLLM calls (not the 'jsquad-hf-*'
#                                                 call). Not vLLM's startup plan for the starts' share: given a KV size
#                                                 (its plan, or kv_cache_memory_bytes) vLLM 0.26 still runs its
#                                                 profiling forward pass, and skips only the measuring and the CUDA-graph
#                                                 memory estimate (at most ~1 s of a warm graph start in the H100 logs
#                                                 of reports/h100-study)
#   bash benchmarks/gpu_check.sh xquad OUT [ROUND] the XQuAD study on real weights (recipes/xquad-smollm2-study.yaml,
#                                                 all 1,190 questions) into /root/xquad-ROUND, its folder tarred to OUT
set -uo pipefail
step=$1; out=$2; mkdir -p "$out"
ST=/root/stage S=/root/shared
export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
MP=(--model-path Qwen/Qwen2.5-7B-Instruct=$S/models/qwen2.5-7b-instruct)
SETS=(--set dataset.path=$S/data/jsquad/valid-v1.3.json --set model.load_format=dummy
      --set sampling.max_tokens=16 --set sampling.ignore_eos=true)
G=/root/models/SmolLM2-135M-Instruct.Q4_1.gguf
read -ra EXTRA <<< "${STUDY_ARGS:-}"
stage() { mkdir -p $ST && cp .gpu/vllm.tar.xz.* $ST/ && ls -la $ST | tee -a "$out/stage.log"; }
case $step in
  stage) stage ;;
  unpack)
    stage
    rm -rf $S && cp -r .gpu/shared $S
    bash $S/gpu/unpack_vllm.sh $ST /tmp/vllm-site 2>&1 | tail -3 | tee "$out/unpack.log"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      2>&1 | tail -3 | tee -a "$out/unpack.log" ;;
  tests)
    sel=(); [ -n "${3:-}" ] && sel=(-k "$3")
    SHARED=$S timeout 570 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=0 "${sel[@]}" tests/test_gpu.py 2>&1 \
      | tee -a "$out/gpu-tests.log" ;;
  bench)
    timeout 570 python3 benchmarks/vllm_vs_runner.py recipes/jsquad-study.yaml --only jsquad-vllm --rounds "${3:-2}" "${@:4}" \
      "${MP[@]}" "${SETS[@]}" --out /root/bench 2>&1 | tee "$out/vllm_vs_runner.log"
    logs=$(sed -n 's/.*; logs in \(\/[^ ]*\)$/\1/p' "$out/vllm_vs_runner.log" | head -1)  # the plain side's
    tar -czf "$out/bench-logs.tgz" --exclude='*.jsonl' -C / ${logs:+"${logs#/}"} root/bench 2>/dev/null ;;
  killres)
    timeout 150 python3 benchmarks/kill_resume.py recipes/jsquad-study.yaml --only jsquad-vllm-oneshot-cache \
      --out /root/killres "${MP[@]}" "${SETS[@]}" 2>&1 | tee "$out/kill_resume.log" ;;
  serve)
    timeout 500 python3 -m runner go recipes/jsquad-serve.yaml --only jsquad-serve-qfirst --out /root/serve \
      "${MP[@]}" "${SETS[@]}" --set load.num_requests=400 --set 'load.request_rate=[25, 100, inf]' \
      2>&1 | tee "$out/serve.log"
    tar -C /root -czf "$out/serve.tgz" serve ;;
  repeat)
    timeout 585 python3 -m runner go recipes/jsquad-study.yaml --only jsquad-vllm-oneshot-cache,jsquad-vllm-fp8-graphs \
      --repeat "${3:-5}" --interleave restarts --baseline jsquad-vllm-oneshot-cache --out /root/repeat --no-progress \
      "${MP[@]}" "${SETS[@]}" 2>&1 | tee -a "$out/repeat.log"
    tar -C /root -czf "$out/repeat.tgz" --exclude='*.lock' repeat ;;
  tune)
    timeout 570 python3 -m runner tune recipes/jsquad-tune.yaml --out /root/tune --no-progress \
      "${MP[@]}" "${SETS[@]}" 2>&1 | tee -a "$out/tune.log"
    tar -C /root -czf "$out/tune.tgz" --exclude='*.lock' tune ;;
  profile)
    timeout 570 python3 -m runner go recipes/jsquad-study.yaml --only jsquad-vllm-oneshot-cache,jsquad-vllm-fp8-8k-graphs \
      --set profile=true --out /root/profile --no-progress "${MP[@]}" "${SETS[@]}" 2>&1 | tee -a "$out/profile.log"
    tar -C /root -czf "$out/profile.tgz" --exclude='*.lock' --exclude='samples*.jsonl*' profile ;;
  gguf) mkdir -p $ST && cp .gpu/gguf/* $ST/ && ls -la $ST | tee -a "$out/stage.log" ;;
  study-tune)
    timeout "${3:-560}" python3 -m runner tune recipes/jsquad-study.yaml --out /root/study-tune --no-progress \
      "${MP[@]}" "${SETS[@]}" --set engine.compile_cache=/root/vcache --usd-per-gpu-hour 3.5 2>&1 | tee -a "$out/study-tune.log"
    tar -C /root -czf "$out/study-tune.tgz" --exclude='*.lock' study-tune ;;
  ref)
    timeout 240 python3 -m runner go recipes/jsquad-study.yaml --only jsquad-vllm-oneshot-cache --repeat "${3:-3}" \
      --out /root/ref --no-progress "${MP[@]}" "${SETS[@]}" --usd-per-gpu-hour 3.5 2>&1 | tee -a "$out/ref.log"
    tar -C /root -czf "$out/ref.tgz" --exclude='*.lock' ref ;;
  hf-cb)
    lim=(); [ -n "${3:-}" ] && lim=(--limit "$3")
    timeout "${4:-560}" python3 -m runner go recipes/jsquad-study.yaml --only 'jsquad-hf-batched,jsquad-hf-continuous' \
      --out /root/hf-cb --no-progress "${lim[@]}" "${MP[@]}" "${SETS[@]}" --usd-per-gpu-hour 3.5 2>&1 | tee -a "$out/hf-cb.log"
    tar -C /root -czf "$out/hf-cb.tgz" --exclude='*.lock' hf-cb ;;
  study)
    timeout "${STUDY_TIMEOUT:-570}" python3 -m runner go recipes/jsquad-study.yaml --only "$3" --out /root/study --no-progress \
      "${MP[@]}" --model-path Qwen/Qwen2.5-7B-Instruct-AWQ=$S/models/qwen2.5-7b-instruct-awq "${SETS[@]}" \
      "${EXTRA[@]}" --timeout 400 --usd-per-gpu-hour 3.5 2>&1 | tee -a "$out/study.log"
    python3 -m runner report /root/study 2>&1 | tail -2 | tee -a "$out/study.log"
    tar -C /root -czf "$out/study.tgz" --exclude='*.lock' --exclude='samples*.jsonl*' study ;;
  warm)
    d=${4:-warm-all}
    timeout 570 python3 -m runner go recipes/jsquad-study.yaml --only "${3:-jsquad-vllm*}" --limit 8 --out /root/$d \
      --no-progress "${MP[@]}" --model-path Qwen/Qwen2.5-7B-Instruct-AWQ=$S/models/qwen2.5-7b-instruct-awq \
      "${SETS[@]}" "${EXTRA[@]}" 2>&1 | tee -a "$out/$d.log"
    python3 -m runner report /root/$d 2>&1 | tail -2 | tee -a "$out/$d.log"
    tar -C /root -czf "$out/$d.tgz" --exclude='*.lock' --exclude='samples*.jsonl*' $d ;;
  warm-par)  # (0.4: vLLM refuses to start with less free memory than its share; the KV size is fixed)
    i=0 pids=() rc=0
    for cells in "${@:3}"; do
      i=$((i+1))
      STUDY_ARGS="--set engine.gpu_memory_utilization=0.4 --set engine.engine_args.kv_cache_memory_bytes=4294967296 ${STUDY_ARGS:-}" \
        bash "$0" warm "$out" "$cells" "warm-p$i" &
      pids+=($!)
      sleep 15
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    exit $rc ;;
  xquad-tune)
    if [ ! -f $G ]; then mkdir -p /root/models && cat $ST/smollm2.gguf.part-* > $G; fi
    sha256sum $G | tee "$out/gguf.sha256"
    XS=(--set model.id=$G --set dataset.path=$S/data/xquad/xquad.en.json)
    timeout 330 python3 -m runner tune recipes/xquad-smollm2-study.yaml --out /root/xquad-tune --no-progress \
      "${XS[@]}" --usd-per-gpu-hour 3.5 2>&1 | tee -a "$out/xquad-tune.log"
    timeout 200 python3 -m runner go recipes/xquad-smollm2-study.yaml --only 'xquad-smollm2-hf*' --out /root/xquad-tune \
      --no-progress "${XS[@]}" --usd-per-gpu-hour 3.5 2>&1 | tee -a "$out/xquad-hf.log"
    tar -C /root -czf "$out/xquad-tune.tgz" --exclude='*.lock' xquad-tune ;;
  xquad)
    if [ ! -f $G ]; then mkdir -p /root/models && cat $ST/smollm2.gguf.part-* > $G; fi
    sha256sum $G | tee "$out/gguf.sha256"
    timeout 560 python3 -m runner go recipes/xquad-smollm2-study.yaml --out /root/xquad-"${3:-1}" --no-progress \
      --set model.id=$G --set dataset.path=$S/data/xquad/xquad.en.json --timeout 400 2>&1 | tee "$out/xquad.log"
    tar -C /root -czf "$out/xquad-${3:-1}.tgz" xquad-"${3:-1}" ;;
esac
