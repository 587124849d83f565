#!/usr/bin/env bash
# The bundle of scripts/device/ggml_mma_check.sh from build/cuda (stripped, xz -9e): .device/carry_m with
# cuda_ops_tests, model_tests, peregrine, the deps, ../shared/configs, make_random_gguf.py and the Q8_0 / Q4_0 GGUF
# fixtures with llama.cpp's references (call it with scripts/device/carry_light.sh on: the tree's weights stay home).
source "$(dirname "$0")/bundle_lib.sh"
mkdir -p "$stage/bin" "$stage/shared/configs" "$stage/shared/models/gguf" "$stage/tools"
cp -r .device/deps "$stage/deps"
rm -rf "$stage/deps/usr/include"
cp ../shared/configs/*.json "$stage/shared/configs/"
# FIXTURES (default "q8_0 q4_0"): which GGUF fixtures travel (q4_k instead of q8_0 fits too, not all three).
for f in ${FIXTURES:-q8_0 q4_0}; do cp "../shared/models/gguf/pycoder-tiny-$f.gguf" "$stage/shared/models/gguf/"; done
cp ../shared/models/gguf/reference.json "$stage/shared/models/gguf/"
cp ../shared/tools/make_random_gguf.py "$stage/tools/"
cp "$b/tests/cuda/cuda_ops_tests" "$b/tests/unit/model_tests" "$b/peregrine" "$stage/bin/"
strip "$stage"/bin/*
pack .device/carry_m deps shared tools bin
