#!/usr/bin/env bash
# Bundle for scripts/device/lowp_check.sh from build/cuda: .device/carry_lowp (model_tests, backend_cpu_tests, the
# deps' libraries, ../shared/models/quant; call with scripts/device/carry_light.sh on, and off right after).
source "$(dirname "$0")/bundle_lib.sh"
mkdir -p "$stage/bin" "$stage/shared/models"
cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
cp -r ../shared/models/quant "$stage/shared/models/"
cp "$b/tests/unit/model_tests" "$b/tests/unit/backend_cpu_tests" "$stage/bin/"
strip "$stage"/bin/*
export XZ_LEVEL=${XZ_LEVEL:-6}
pack .device/carry_lowp deps bin shared
