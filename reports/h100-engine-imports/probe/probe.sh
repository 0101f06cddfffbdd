# bash reports/h100-engine-imports/probe/probe.sh OUT [ROUNDS] : the engine-import probe (after gpu_check.sh unpack)
out=$1; export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
timeout 400 python3 reports/h100-engine-imports/probe/engine_imports.py $out "${2:-3}" 2>&1 | tee $out/probe.log \
  | grep -v "^\[\|WARNING\|warn" | grep "base state\|scan\|torch init\|driver\|failed\|safe\|all \|RESULT\|LLM() s" | cut -c1-1500
pkill -9 -f EngineCore; tar -czf $out/timeline.tgz -C $out timeline 2>/dev/null; rm -rf $out/timeline
