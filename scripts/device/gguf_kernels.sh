#!/usr/bin/env bash
# One device call for the CUDA GGUF block kernels (issue 17): configure and build cuda_ops_tests and cuda_ops_bench,
# run the ggml kernel tests (every element vs the ref backend, rows across M, the embedding gather), the same
# tests once under compute-sanitizer memcheck, then the op-level bench (HBM ceilings measured first, then
# Q8_0/Q4_0/Q4_K/Q6_K at 4096x4096, 14336x4096, 4096x14336, 128256x4096 for M = 1, 8, 32); a short table ends
# the output. Run from the repository root on the GPU machine (after `source .device/env.sh` where needed):
#   scripts/device/gguf_kernels.sh [out_dir]        (out_dir defaults to $OUT)
set -uo pipefail
out=${1:-${OUT:-/tmp/gguf_kernels}}
mkdir -p "$out"
build=build/device-cuda
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if ! pkg-config --exists icu-uc 2>/dev/null; then
  mkdir -p /tmp/pc-stub
  printf 'Name: icu-uc\nDescription: stub for configure only\nVersion: 72.1\nLibs:\nCflags:\n' >/tmp/pc-stub/icu-uc.pc
  export PKG_CONFIG_PATH="/tmp/pc-stub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DPEREGRINE_BUILD_TESTS=ON \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo "CONFIGURE FAILED"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target cuda_ops_tests cuda_ops_bench >>"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -40; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

filter='CudaGgml*'
tests_rc=0
timeout 120 "$build/tests/cuda/cuda_ops_tests" --gtest_filter="$filter" >"$out/tests.log" 2>&1 || tests_rc=$?
grep -E "^\[  FAILED|Failure|out of bounds|^\[  PASSED|^\[==========\]" "$out/tests.log" | head -40

memcheck_rc=0
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/cuda/cuda_ops_tests" \
  --gtest_filter="$filter" >"$out/memcheck.log" 2>&1 || memcheck_rc=$?

bench_rc=0
timeout 200 "$build/bench/cuda/cuda_ops_bench" --ggml-only >"$out/bench.log" 2>&1 || bench_rc=$?
[ $bench_rc -ne 0 ] && tail -20 "$out/bench.log"

echo "== summary =="
echo "ggml tests: rc=$tests_rc; $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$out/tests.log" | tr '\n' ' ')"
echo "memcheck (ggml tests): rc=$memcheck_rc; $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
echo "bench: rc=$bench_rc"
sed -n '/^| ggml type/,/^$/p' "$out/bench.log"
grep -E "^\| HBM" "$out/bench.log"
echo "total: $(( $(date +%s) - start )) s"
