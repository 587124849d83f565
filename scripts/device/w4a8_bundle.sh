#!/usr/bin/env bash
# Builds the carries of scripts/device/w4a8_check.sh from this checkout's CUDA build (build/cuda: cmake --preset
# cuda && cmake --build --preset cuda --target peregrine cuda_ops_tests), stripped and xz -9e:
#   .device/carry_w4a8_t   cuda_ops_tests (part t: the CUDA W4A8 tests and memcheck)         about 6 MB
#   .device/carry_w4a8_b   peregrine, the PCRE2/ICU/xxhash libraries, the 8B config (part b: decode benches)
#                          about 17.5 MB
# Each holds bundle.tar.xz and env.sh; one is carried per device call (see w4a8_check.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
b=${BUILD:-build/cuda}
for f in "$b/peregrine" "$b/tests/cuda/cuda_ops_tests"; do
  [ -x "$f" ] || { echo "w4a8_bundle.sh: $f missing (cmake --preset cuda && cmake --build --preset cuda --target peregrine cuda_ops_tests)" >&2; exit 1; }
done
# .device/deps and .device/env.sh (prepare.sh also rebuilds .device/carry: only when they are missing).
[ -f .device/deps/.done ] && [ -f .device/env.sh ] || scripts/device/prepare.sh >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pack() {  # carry dir, then paths under $stage
  local dir=$1; shift
  rm -rf "$dir" && mkdir -p "$dir"
  tar -C "$stage" -cf - "$@" | xz -T"$(nproc)" -9e >"$dir/bundle.tar.xz"
  cp .device/env.sh "$dir/env.sh"
  local bytes
  bytes=$(stat -c %s "$dir/bundle.tar.xz")
  echo "$dir: $(( bytes / 1024 / 1024 )) MiB ($bytes bytes)"
  [ "$bytes" -le $(( 18 * 1000 * 1000 )) ] || echo "w4a8_bundle.sh: WARNING: $dir is over 18 MB" >&2
}
mkdir -p "$stage/bin" "$stage/shared/configs"
cp "$b/tests/cuda/cuda_ops_tests" "$stage/bin/" && strip "$stage/bin/cuda_ops_tests"
pack .device/carry_w4a8_t bin/cuda_ops_tests
rm "$stage/bin/cuda_ops_tests"
cp -r .device/deps "$stage/deps"
rm -rf "$stage/deps/usr/include"  # running peregrine needs the libraries only (headers: ~0.5 MB of the 18)
cp ../shared/configs/llama-3-8b.json "$stage/shared/configs/"
cp "$b/peregrine" "$stage/bin/" && strip "$stage/bin/peregrine"
pack .device/carry_w4a8_b deps shared/configs bin/peregrine
