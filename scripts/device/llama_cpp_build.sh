#!/usr/bin/env bash
# Builds llama.cpp's CUDA llama-bench and llama-batched-bench here (no GPU needed), for the same-file peer figures on
# the H200 (scripts/device/llama_cpp_peer.sh). The source is the llama.cpp release node-llama-cpp ships inside its
# npm package (llama/gitRelease.bundle, a git bundle): npm is reachable from this machine, GitHub is not. Static
# llama/ggml libraries, SASS for sm_90 only (the H200), against this machine's CUDA 13 (the device has the same
# cudart / cuBLAS sonames). About 45 minutes on 2 cores; the binaries land in .device/llama.cpp/bin.
# Usage: scripts/device/llama_cpp_build.sh [NODE_LLAMA_CPP_VERSION (default 3.22.1, the CPU peer's version)]
set -euo pipefail
cd "$(dirname "$0")/../.."
ver=${1:-3.22.1}
work=${LLAMA_CPP_WORK:-/tmp/llama_cpp_src}
mkdir -p "$work"
if [ ! -d "$work/llama.cpp" ]; then
  (cd "$work" && npm pack -q "node-llama-cpp@$ver" >/dev/null &&
     tar -xzf "node-llama-cpp-$ver.tgz" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json &&
     git clone -q package/llama/gitRelease.bundle llama.cpp)
fi
echo "llama.cpp from node-llama-cpp $ver: $(cat "$work/package/llama/llama.cpp.info.json" | tr -d '\n ')" \
     "commit $(git -C "$work/llama.cpp" rev-parse --short HEAD)"
cmake -S "$work/llama.cpp" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
nice -n ${LLAMA_NICE:-10} ninja -C "$work/build" -j"$(nproc)" llama-bench llama-batched-bench
mkdir -p .device/llama.cpp/bin
cp "$work/build/bin/llama-bench" "$work/build/bin/llama-batched-bench" .device/llama.cpp/bin/
strip .device/llama.cpp/bin/*
git -C "$work/llama.cpp" rev-parse --short HEAD >.device/llama.cpp/commit
ls -la .device/llama.cpp/bin
