#!/usr/bin/env bash
# Bundles of scripts/device/gguf_gemv_check.sh from build/cuda: .device/carry_g1 (cuda_ops_tests, cuda_ops_bench and
# make_random_gguf.py: no deps needed) and .device/carry_g2 (peregrine with the deps).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/device/prepare.sh >/dev/null
b=build/cuda
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/tools" .device/carry_g1 .device/carry_g2
cp "$b/tests/cuda/cuda_ops_tests" "$b/bench/cuda/cuda_ops_bench" "$b/peregrine" "$stage/bin/" && strip "$stage"/bin/*
cp ../shared/tools/make_random_gguf.py "$stage/tools/"
cp -r .device/deps "$stage/deps"
tar -C "$stage" -cf - bin/cuda_ops_tests bin/cuda_ops_bench tools | xz -T"$(nproc)" -9e >.device/carry_g1/bundle.tar.xz
tar -C "$stage" -cf - deps bin/peregrine | xz -T"$(nproc)" -9e >.device/carry_g2/bundle.tar.xz
cp .device/env.sh .device/carry_g2/env.sh
rm -rf "$stage"
du -sh .device/carry_g1 .device/carry_g2
