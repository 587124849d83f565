#!/usr/bin/env bash
# The bundle of scripts/device/tier_h200.sh: .device/carry_t with peregrine, cuda_ops_tests and engine_model_tests
# (build/cuda, stripped), the deps without headers and ../shared/configs; xz -3 (the -9e of pack takes 20+ minutes
# on two busy cores and saves little here). Call it with scripts/device/carry_light.sh on.
source "$(dirname "$0")/bundle_lib.sh"
mkdir -p "$stage/bin" "$stage/shared/configs"
cp ../shared/configs/*.json "$stage/shared/configs/"
cp -r .device/deps "$stage/deps"
rm -rf "$stage/deps/usr/include"
cp "$b/peregrine" "$b/tests/cuda/cuda_ops_tests" "$b/tests/unit/engine_model_tests" "$stage/bin/"
strip "$stage"/bin/*
dir=.device/carry_t
rm -rf "$dir" && mkdir -p "$dir"
tar -C "$stage" -cf - deps shared bin | xz -T"$(nproc)" -3 >"$dir/bundle.tar.xz"
sed 's#\.device/carry/bundle#.device/carry_t/bundle#g' .device/env.sh >"$dir/env.sh"
echo "$dir: $(du -sh "$dir" | cut -f1)"
