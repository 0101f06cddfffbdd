# The next GPU run of this probe (issue 41), in one call right after `gpu_check.sh unpack` (same call or the next):
#   bash reports/h200-tokahead/probe/run.sh $OUT [MODES]       (~6 x 40 s for the default modes)
#   PROBE_BISECT=1 bash ...                                         also the bisection first (<= 200 s + a fork check)
# Everything lands in /root/probe and, tarred, in OUT/probe.tgz; the RESULT lines in OUT/modes.log.
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=/tmp/vllm-site:/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
out=$1; P=/root/probe; mkdir -p "$out" $P
cp "$here"/cuda_init_probe.py "$here"/modes.sh $P/
cp "$here"/../../h200-ahead/probe/child_modules.json $P/
if [ -n "${PROBE_BISECT:-}" ]; then
  PROBE_BUDGET=200 timeout 330 python3 $P/cuda_init_probe.py bisect $P/child_modules.json $P 2>&1 | tee "$out/bisect.log"
fi
# the first base is the host's first start (slow: file cache, vLLM's model-info cache); a base run writes
# front_modules.json, which the front modes import ahead
MODES="${2:-base base front fronttok base front fronttok}" bash $P/modes.sh "$out"
