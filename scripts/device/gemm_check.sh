#!/usr/bin/env bash
# One device call for the matmul policies (a trimmed cuda_check.sh): runs carried cuda_ops_tests/cuda_ops_bench
# when they start on this machine, else builds them; then the matmul tests and the GEMM-only benchmark.
# Run from the repository root on the GPU machine:  scripts/device/gemm_check.sh [prebuilt_dir] [out_dir]
set -uo pipefail
pre=${1:-build/gemm-carry}
out=${2:-${OUT:-/tmp/gemm_check}}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader
tests="$pre/cuda_ops_tests"
bench="$pre/cuda_ops_bench"
if ! "$tests" --gtest_list_tests >/dev/null 2>&1 || ! [ -x "$bench" ]; then
  echo "prebuilt binaries do not run here: building"
  build=build/device-gemm
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
  tests="$build/tests/cuda/cuda_ops_tests"
  bench="$build/bench/cuda/cuda_ops_bench"
  echo "build: $(( $(date +%s) - start )) s"
fi

tests_rc=0
timeout 240 "$tests" --gtest_filter='CudaMatmul*' >"$out/tests.log" 2>&1 || tests_rc=$?
grep -E "^\[  FAILED|Failure|out of bounds|rows differing|all rows identical|M=|^\[       OK|^\[  PASSED" \
  "$out/tests.log" | head -60
echo "tests: rc=$tests_rc ($(( $(date +%s) - start )) s)"

bench_rc=0
timeout 240 "$bench" --gemm-only "$out/bench.md" >"$out/bench.log" 2>&1 || bench_rc=$?
grep -E "plans|sweep .* S=" "$out/bench.log" | grep -v "^|"
[ $bench_rc -ne 0 ] && tail -20 "$out/bench.log"
echo "bench: rc=$bench_rc"
cat "$out/bench.md" 2>/dev/null
echo "total: $(( $(date +%s) - start )) s"
