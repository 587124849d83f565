#!/usr/bin/env bash
# Builds the bundles of scripts/device/wave_check.sh from build/cuda (stripped, xz -9e) into .device/carry (part a,
# with env.sh), .device/carry_b ... .device/carry_e: carry one of them per call.
source "$(dirname "$0")/bundle_lib.sh"
shared=../shared
mkdir -p "$stage/bin" "$stage/shared/configs" "$stage/shared/tools" "$stage/shared/models/quant" "$stage/shared/models/arch" \
         "$stage/shared/models/gguf"
cp -r .device/deps "$stage/deps"
cp "$shared"/configs/*.json "$stage/shared/configs/"
cp "$shared"/tools/make_random_gguf.py "$stage/shared/tools/"
cp "$b/peregrine" "$stage/bin/" && strip "$stage/bin/peregrine"
pack .device/carry deps shared/configs shared/tools bin/peregrine
cp "$b/tests/cuda/cuda_ops_tests" "$b/bench/cuda/cuda_ops_bench" "$stage/bin/" && strip "$stage"/bin/cuda_ops_*
pack .device/carry_b bin/cuda_ops_tests bin/cuda_ops_bench
cp "$b/tests/unit/model_tests" "$stage/bin/" && strip "$stage/bin/model_tests"
for m in ct-w8a8-int8 fp8-per-channel fp8-block128; do cp -r "$shared/models/quant/$m" "$stage/shared/models/quant/"; done
cp "$shared/models/quant/README.md" "$stage/shared/models/quant/" 2>/dev/null || true
for m in qwen3-qknorm mistral-swa llama-yarn; do cp -r "$shared/models/arch/$m" "$stage/shared/models/arch/"; done
cp "$shared"/models/*.reference.json "$stage/shared/models/"
pack .device/carry_c bin/model_tests shared/models/quant shared/models/arch $(cd "$stage" && ls shared/models/*.reference.json)
cp "$shared/models/gguf/pycoder-tiny-q4_0.gguf" "$shared/models/gguf/reference.json" "$shared/models/gguf/tensor_checks.json" \
   "$shared/models/gguf/README.md" "$stage/shared/models/gguf/"
pack .device/carry_d shared/models/gguf
cp "$b/tests/unit/engine_model_tests" "$stage/bin/" && strip "$stage/bin/engine_model_tests"
pack .device/carry_e bin/engine_model_tests
