# A/B of the tokenizer copies made ahead: HEAD's runner (old) against the working tree (new), two eager cells each, ABBA
# make the old side first: git archive <commit before the change> runner benchmarks recipes templates pyproject.toml > .gpu/old.tar
# (after the last setpart), then run it after gpu_check.sh stage x3: bash reports/h100-engine-imports/probe/ab.sh $OUT
out=$1; C='jsquad-vllm-fp8,jsquad-vllm-fp8-8k'
bash benchmarks/gpu_check.sh unpack $out >/dev/null
rm -rf /tmp/old && mkdir -p /tmp/old && tar -xf .gpu/old.tar -C /tmp/old
for s in old1 new1 new2 old2; do
  if [ "${s#old}" != "$s" ]; then (cd /tmp/old && bash benchmarks/gpu_check.sh warm $out $C $s >/dev/null 2>&1); else bash benchmarks/gpu_check.sh warm $out $C $s >/dev/null 2>&1; fi
  for c in ${C//,/ }; do python3 -c "
import json,sys; r=json.load(open('/root/$s/$c/results.json')); st=r['timings']['start']
print('$s', '$c', 'load_s', round(r['timings']['load_s'],2), 'other_s', round(st['other_s'],2), 'weights', st['load_s'], 'copies', st.get('tokenizer_copies_ahead'), 'tokenizer_ahead', st.get('tokenizer_ahead'), 'modules_ahead', st.get('modules_ahead'), 'process_s', round(r['stages'].get('process_s') or 0,2), 'wall_s', round(r['stages']['wall_s'],2))" 2>&1 | tail -1 | tee -a $out/ab.txt; done
  grep -h "non-default args\|compilation.py:329\|Initializing a V1" /root/$s/*/engine.log | cut -c1-90 >> $out/ab-lines.txt
done
