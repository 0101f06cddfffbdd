# (as it ran on 2026-12-06: git show 258adad:reports/h200-tokahead/probe/modes.sh)
# LLM() in the modes MODES names, alternating (after `bisect` left /root/probe/safe_modules.json; a base run
# writes front_modules.json for the front modes); usage: MODES="base front fronttok ..." bash modes.sh OUT
export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
out=$1; P=/root/probe
for m in ${MODES:-tok safe safetok base tok safe safetok base}; do
  f=$P/stdout-$m-$(date +%s).log
  timeout 150 python3 $P/cuda_init_probe.py llm $m $P > $f 2>&1
  grep -h "RESULT" $f | tee -a $out/modes.log   # (the 2026-12-06 run grepped every file of the mode: its
                                                #  modes-tok-base.log repeats the first base line)
done
tar -C /root -czf $out/probe.tgz probe
