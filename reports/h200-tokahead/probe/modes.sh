# call 5: LLM() in four modes, twice each, alternating (after call 4 left /root/probe/safe_modules.json)
export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
out=$1; P=/root/probe
for m in ${MODES:-tok safe safetok base tok safe safetok base}; do
  timeout 150 python3 $P/cuda_init_probe.py llm $m $P > $P/stdout-$m-$(date +%s).log 2>&1
  grep -h "RESULT" $P/stdout-$m-*.log | tail -1 | tee -a $out/modes.log
done
tar -C /root -czf $out/probe.tgz probe
