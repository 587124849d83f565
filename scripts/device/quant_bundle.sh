#!/usr/bin/env bash
# Bundle of the quantized fixtures for scripts/device/quant_skinny_check.sh, from build/cuda (stripped, xz -9e):
# .device/carry_q (model_tests and ../shared/models/quant), carried beside .device/carry_k1.
source "$(dirname "$0")/bundle_lib.sh"
mkdir -p "$stage/bin" "$stage/shared/models"
cp "$b/tests/unit/model_tests" "$stage/bin/" && strip "$stage/bin/model_tests"
cp -r ../shared/models/quant "$stage/shared/models/"
pack .device/carry_q bin/model_tests shared/models/quant
