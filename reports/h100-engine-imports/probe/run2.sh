# bash reports/h100-engine-imports/probe/run2.sh OUT [STARTS] : the start sampler (after gpu_check.sh unpack)
out=$1; export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
timeout 300 python3 reports/h100-engine-imports/probe/start_sampler.py $out "${2:-3}" > $out/sampler.log 2>&1
grep "===\|base state\|front modules" $out/sampler.log
pkill -9 -f EngineCore; cd $out && tar -czf samples.tgz samples-*.jsonl front-after-*.json && rm -f samples-*.jsonl front-after-*.json
