#!/usr/bin/env bash
# The bundles of scripts/device/tier_ttft.sh (issue 13's TTFT goals), xz -6 (XZ_LEVEL to change):
#   tier_ttft_bundle.sh bench   .device/carry_tt: peregrine (build/cuda, stripped), the deps without headers and the
#                               8B config: the figures (call with scripts/device/carry_light.sh on)
#   tier_ttft_bundle.sh tests   .device/carry_tt: engine_model_tests and the deps, plus pycoder-tiny's weights
#                               compressed (the CUDA engine tests need them; the tree cannot carry them beside the
#                               bundle: call with scripts/device/carry_light.sh on, tier_ttft.sh unpacks them)
#   tier_ttft_bundle.sh all     both (XZ_LEVEL=9e to fit beside the tree)
source "$(dirname "$0")/bundle_lib.sh"
what=${1:?bench or tests}
mkdir -p "$stage/bin" "$stage/shared/configs"
cp ../shared/configs/llama-3-8b.json "$stage/shared/configs/"
cp -r .device/deps "$stage/deps"
rm -rf "$stage/deps/usr/include"
paths=(deps shared bin)
if [ "$what" = bench ] || [ "$what" = all ]; then
  cp "$b/peregrine" "$stage/bin/"
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  cp "$b/tests/unit/engine_model_tests" "$stage/bin/"
  mkdir -p "$stage/model"
  cp models/pycoder-tiny/model.safetensors "$stage/model/"
  paths+=(model)
fi
strip "$stage"/bin/*
XZ_LEVEL=${XZ_LEVEL:-6} pack .device/carry_tt "${paths[@]}"
