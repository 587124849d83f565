#!/usr/bin/env bash
# Bundles of scripts/device/skinny_check.sh from build/cuda (stripped, xz -9e): .device/carry_k1 (cuda_ops_tests,
# cuda_ops_bench, peregrine, the deps and ../shared/configs) and .device/carry_k2 (engine_model_tests, model_tests,
# pycoder-tiny's weights and references, the deps' libraries).
source "$(dirname "$0")/bundle_lib.sh"
mkdir -p "$stage/bin" "$stage/shared/configs"
cp -r .device/deps "$stage/deps"
cp ../shared/configs/*.json "$stage/shared/configs/"
mkdir -p "$stage/shared/models"
cp ../shared/models/pycoder-tiny.reference.json "$stage/shared/models/"
cp "$b/tests/cuda/cuda_ops_tests" "$b/bench/cuda/cuda_ops_bench" "$b/peregrine" "$b/tests/unit/engine_model_tests" \
  "$b/tests/unit/model_tests" "$stage/bin/"
strip "$stage"/bin/*
pack .device/carry_k1 deps shared/configs bin/cuda_ops_tests bin/cuda_ops_bench bin/peregrine
# Part 2 carries the model weights itself (compressed, 29 MB, where the tree carries them raw, 43 MB: call it with
# scripts/device/carry_light.sh on) and only the deps' shared libraries, no headers.
rm -rf "$stage/deps/usr/include"
mkdir -p "$stage/model" && cp models/pycoder-tiny/model.safetensors "$stage/model/"
pack .device/carry_k2 deps bin/engine_model_tests bin/model_tests shared/models/pycoder-tiny.reference.json model
