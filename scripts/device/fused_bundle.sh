#!/usr/bin/env bash
# Bundles for scripts/device/fused_check.sh from build/cuda: .device/carry_f1 (cuda_ops_tests, peregrine, the deps'
# libraries, ../shared/configs) and .device/carry_f2 (model_tests, engine_model_tests, the deps' libraries,
# pycoder-tiny's weights and references; call part 2 with scripts/device/carry_light.sh on), and .device/carry_fall
# with both (fused_check.sh all, carry_light.sh on; when it fits in a call), and .device/carry_fm with model_tests
# alone (fused_check.sh 2 runs what its bundle holds; carry_light.sh on). PACKS (default "f1 f2 fall") picks.
source "$(dirname "$0")/bundle_lib.sh"
mkdir -p "$stage/bin" "$stage/shared/configs" "$stage/shared/models" "$stage/model"
cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
cp ../shared/configs/*.json "$stage/shared/configs/"
cp ../shared/models/pycoder-tiny.reference.json "$stage/shared/models/"
cp models/pycoder-tiny/model.safetensors "$stage/model/"
cp "$b/tests/cuda/cuda_ops_tests" "$b/peregrine" "$b/tests/unit/engine_model_tests" "$b/tests/unit/model_tests" "$stage/bin/"
strip "$stage"/bin/*
export XZ_LEVEL=${XZ_LEVEL:-6}
packs=" ${PACKS:-f1 f2 fall} "  # which bundles to make
[[ $packs == *" f1 "* ]] && pack .device/carry_f1 deps shared/configs bin/cuda_ops_tests bin/peregrine
[[ $packs == *" f2 "* ]] && pack .device/carry_f2 deps bin/engine_model_tests bin/model_tests shared/models model
[[ $packs == *" fm "* ]] && pack .device/carry_fm deps bin/model_tests shared/models model
[[ $packs == *" fall "* ]] && pack .device/carry_fall deps shared/configs bin/cuda_ops_tests bin/peregrine \
  bin/engine_model_tests bin/model_tests shared/models model
true
