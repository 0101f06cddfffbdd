#!/usr/bin/env bash
# Here (with the package index), before an H200 session: everything benchmarks/h200_session.sh needs on the
# GPU host, as one uncompressed tar cut into parts that each fit one device call beside the working tree
# (a call carries 64 MiB, the tree included): .gpu/p1/payload.tar.00, .gpu/p2/payload.tar.01, ...
# The payload holds
#   vllm.tar.xz.NN + .sha256   the bundle of ../shared/gpu/pack_vllm.py (vLLM 0.26.0 and what the host lacks)
#   shared/                    a copy of ../shared (models' configs and tokenizers, JSQuAD, scripts)
#   ray-site.tar.xz            the ray==2.60.0 cp312 wheel unzipped without its Java jars, the dashboard's
#                              web client and RLlib (none of which `runner go --executor ray` loads): 24 MiB
#   whl/                       the wheels in .whl/ (rapidfuzz, filelock: what the host lacks besides vLLM)
# On the host: `bash benchmarks/h200_session.sh stage OUT` in every call but the last (carry .gpu/pN),
# `bash benchmarks/h200_session.sh unpack OUT` in the last one (carry its part), then the runs.
#   usage: bash benchmarks/h200_pack.sh        (in the project root; ~2 min for Ray's tarball)
#          NO_RAY=1 bash benchmarks/h200_pack.sh   leaves Ray out (one call fewer when the session needs no Ray)
set -euo pipefail
[ -f .gpu/vllm.tar.xz.sha256 ] || python3 ../shared/gpu/pack_vllm.py --part-mib 45
if [ -z "${NO_RAY:-}" ] && [ ! -f .gpu/ray-site.tar.xz ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d "$tmp" ray==2.60.0
  mkdir "$tmp/site" && (cd "$tmp/site" && unzip -q ../ray-*.whl && rm -rf ray/jars ray/dashboard/client/build ray/rllib)
  tar -C "$tmp/site" -cf - . | xz -9e -T0 > .gpu/ray-site.tar.xz
  rm -rf "$tmp"
fi
stage=$(mktemp -d)
ln .gpu/vllm.tar.xz.[0-9][0-9] .gpu/vllm.tar.xz.sha256 "$stage"/
[ -n "${NO_RAY:-}" ] || ln .gpu/ray-site.tar.xz "$stage"/
cp -r ../shared "$stage/shared" && chmod -R u+w "$stage/shared"
mkdir "$stage/whl" && { cp .whl/*.whl "$stage/whl/" 2>/dev/null || true; }
tree_mib=$(python3 -c 'import os,subprocess as s
names = s.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], capture_output=True).stdout.split(b"\0")
print(sum(os.path.getsize(n) for n in names if n and os.path.isfile(n)) // 2**20 + 1)')
part_mib=$(( 61 - tree_mib ))
rm -rf .gpu/p[0-9]* && mkdir -p .gpu/parts
tar -C "$stage" -cf - . | split -b "${part_mib}M" -d -a 2 - .gpu/parts/payload.tar.
rm -rf "$stage"
n=0
for f in .gpu/parts/payload.tar.*; do n=$((n + 1)); mkdir -p ".gpu/p$n" && mv "$f" ".gpu/p$n/"; done
rmdir .gpu/parts
echo "working tree ${tree_mib} MiB; ${n} parts of at most ${part_mib} MiB: carry .gpu/p1 .. .gpu/p${n}, one per call"
