#!/usr/bin/env bash
# The bundle of scripts/device/llama_cpp_peer.sh: .device/carry_p with peregrine and cuda_ops_tests (build/cuda),
# llama.cpp's llama-batched-bench and llama-bench (.device/llama.cpp, from scripts/device/llama_cpp_build.sh), the
# deps, ../shared/configs and make_random_gguf.py (call it with scripts/device/carry_light.sh on: the tree's weights
# stay home). LLAMA_BENCH=0 leaves llama-bench out (each static llama.cpp binary carries every CUDA kernel): the
# peer script then takes batch 1 from llama-batched-bench.
source "$(dirname "$0")/bundle_lib.sh"
[ -x .device/llama.cpp/bin/llama-bench ] || { echo "peer_bundle.sh: run scripts/device/llama_cpp_build.sh first" >&2; exit 1; }
mkdir -p "$stage/bin" "$stage/tools" "$stage/shared/configs"
cp ../shared/configs/*.json "$stage/shared/configs/"
cp -r .device/deps "$stage/deps"
rm -rf "$stage/deps/usr/include"
cp ../shared/tools/make_random_gguf.py "$stage/tools/"
cp "$b/peregrine" "$b/tests/cuda/cuda_ops_tests" .device/llama.cpp/bin/llama-batched-bench "$stage/bin/"
[ "${LLAMA_BENCH:-1}" = 0 ] || cp .device/llama.cpp/bin/llama-bench "$stage/bin/"
cp .device/llama.cpp/commit "$stage/llama.cpp.commit"
strip "$stage"/bin/*
pack .device/carry_p deps shared tools bin llama.cpp.commit
