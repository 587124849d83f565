#!/usr/bin/env bash
# Builds the carries of scripts/device/w4a8_check.sh from this checkout's CUDA build (build/cuda: cmake --preset
# cuda && cmake --build --preset cuda --target peregrine cuda_ops_tests), stripped and xz -9e:
#   .device/carry_w4a8_t   cuda_ops_tests (part t: the CUDA W4A8 tests and memcheck)         about 6 MB
#   .device/carry_w4a8_b   peregrine, the PCRE2/ICU/xxhash libraries, the 8B config (part b: decode benches)
#                          about 17.5 MB
# Each holds bundle.tar.xz and env.sh; one is carried per device call (see w4a8_check.sh).
source "$(dirname "$0")/bundle_lib.sh"
for f in "$b/peregrine" "$b/tests/cuda/cuda_ops_tests"; do
  [ -x "$f" ] || { echo "w4a8_bundle.sh: $f missing (cmake --preset cuda && cmake --build --preset cuda --target peregrine cuda_ops_tests)" >&2; exit 1; }
done
mkdir -p "$stage/bin" "$stage/shared/configs"
cp "$b/tests/cuda/cuda_ops_tests" "$stage/bin/" && strip "$stage/bin/cuda_ops_tests"
pack .device/carry_w4a8_t bin/cuda_ops_tests
rm "$stage/bin/cuda_ops_tests"
cp -r .device/deps "$stage/deps"
rm -rf "$stage/deps/usr/include"  # running peregrine needs the libraries only (headers: ~0.5 MB of the 18)
cp ../shared/configs/llama-3-8b.json "$stage/shared/configs/"
cp "$b/peregrine" "$stage/bin/" && strip "$stage/bin/peregrine"
pack .device/carry_w4a8_b deps shared/configs bin/peregrine
