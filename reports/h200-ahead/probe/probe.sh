# bash .gpu/probe.sh OUT : the preload probe, list then alternating base/extended x3
out=$1; export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD PYTHONUNBUFFERED=1
for m in list base extended product base extended product; do
  timeout 120 python3 .gpu/preload_probe.py $m $out >> $out/probe-$m.log 2>&1; grep RESULT $out/probe-$m.log | tail -1 | cut -c1-1500 | tee -a $out/probe.log
  pkill -9 -f EngineCore; sleep 1
done
