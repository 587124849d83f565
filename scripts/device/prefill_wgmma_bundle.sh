#!/usr/bin/env bash
# Bundle for scripts/device/prefill_wgmma.sh (.device/carry_kv, the layout kv_attn.sh's bundle has, without
# model_tests and pycoder-tiny's weights, which random-weight runs do not read): peregrine, cuda_ops_tests,
# cuda_ops_bench, the deps' libraries, llama-3-8b.json and llama-3.1-8b.json (128K positions: long_context.sh). Use with scripts/device/carry_light.sh on.
source "$(dirname "$0")/bundle_lib.sh"
mkdir -p "$stage/bin" "$stage/shared/configs" "$stage/shared/models"
cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
cp "$b/peregrine" "$b/tests/cuda/cuda_ops_tests" "$b/bench/cuda/cuda_ops_bench" "$stage/bin/"
strip "$stage"/bin/*
cp ../shared/configs/llama-3-8b.json ../shared/configs/llama-3.1-8b.json "$stage/shared/configs/"
pack .device/carry_kv deps bin shared
