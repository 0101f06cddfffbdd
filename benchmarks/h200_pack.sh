#!/usr/bin/env bash
# Here (with the package index), before an H200 session: what benchmarks/h200_session.sh carries, in four
# calls of at most ~51 MiB each (the working tree, ~11 MiB, travels with every call; a call carries 64 MiB):
#   .gpu/d1  vllm.tar.xz.00 (+ .sha256)   .gpu/d2  vllm.tar.xz.01   .gpu/d3  vllm.tar.xz.02   (+ .whl/ in call 3)
#   .gpu/d4  shared/ (a copy of ../shared) and ray-site.tar.xz
# vLLM: the bundle of ../shared/gpu/pack_vllm.py (.gpu/vllm.tar.xz.NN), re-cut into 50 MiB parts
# (unpack_vllm.sh concatenates any number of parts and checks the whole against the .sha256).
# Ray: the ray==2.60.0 cp312 wheel, unzipped without its Java jars, the dashboard's web client and
# RLlib (none of which `runner go --executor ray` loads), as one xz tarball (~24 MiB instead of 76).
#   usage: bash benchmarks/h200_pack.sh        (run in the project root; ~2 min for Ray's tarball)
set -euo pipefail
[ -f .gpu/vllm.tar.xz.sha256 ] || python3 ../shared/gpu/pack_vllm.py --part-mib 45
rm -rf .gpu/d1 .gpu/d2 .gpu/d3 .gpu/d4 .gpu/resplit && mkdir -p .gpu/d1 .gpu/d2 .gpu/d3 .gpu/d4 .gpu/resplit
cat .gpu/vllm.tar.xz.[0-9][0-9] | split -b 50M -d -a 2 - .gpu/resplit/vllm.tar.xz.
[ "$(ls .gpu/resplit | wc -l)" = 3 ] || { echo "expected 3 parts of 50 MiB" >&2; exit 1; }
mv .gpu/resplit/vllm.tar.xz.00 .gpu/d1/ && cp .gpu/vllm.tar.xz.sha256 .gpu/d1/
mv .gpu/resplit/vllm.tar.xz.01 .gpu/d2/ && mv .gpu/resplit/vllm.tar.xz.02 .gpu/d3/ && rmdir .gpu/resplit
cp -r ../shared .gpu/d4/shared && chmod -R u+w .gpu/d4/shared
if [ ! -f .gpu/ray-site.tar.xz ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d "$tmp" ray==2.60.0
  mkdir "$tmp/site" && (cd "$tmp/site" && unzip -q ../ray-*.whl && rm -rf ray/jars ray/dashboard/client/build ray/rllib)
  tar -C "$tmp/site" -cf - . | xz -9e -T0 > .gpu/ray-site.tar.xz
  rm -rf "$tmp"
fi
cp .gpu/ray-site.tar.xz .gpu/d4/
du -sh .gpu/d1 .gpu/d2 .gpu/d3 .gpu/d4 .whl 2>/dev/null
