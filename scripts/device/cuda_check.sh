#!/usr/bin/env bash
# One device call for the CUDA backend: configure and build its targets, run the op tests, the benchmarks,
# a PyTorch SDPA reference for prefill, then compute-sanitizer memcheck on the small op tests; a short
# summary ends the output. Run from the repository root on the GPU machine (after `source .device/env.sh`):
#   scripts/device/cuda_check.sh [out_dir]        (out_dir defaults to $OUT)
set -uo pipefail
out=${1:-${OUT:-/tmp/cuda_check}}
mkdir -p "$out"
build=build/device-cuda
jobs=$(nproc)

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader
start=$(date +%s)
# The CUDA targets need none of the tokenizer's libraries; when the machine lacks ICU, a stub .pc file lets
# the whole project configure (only the tokenizer would fail to build, and it is not built here).
if ! pkg-config --exists icu-uc 2>/dev/null; then
  mkdir -p /tmp/pc-stub
  printf 'Name: icu-uc\nDescription: stub for configure only\nVersion: 72.1\nLibs:\nCflags:\n' >/tmp/pc-stub/icu-uc.pc
  export PKG_CONFIG_PATH="/tmp/pc-stub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DPEREGRINE_BUILD_TESTS=ON \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo "CONFIGURE FAILED"; exit 1; }
cmake --build "$build" -j"$jobs" --target cuda_ops_tests cuda_ops_bench >>"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -40; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

tests_rc=0
timeout 300 "$build/tests/cuda/cuda_ops_tests" >"$out/tests.log" 2>&1 || tests_rc=$?
grep -E "^\[  FAILED|Failure|out of bounds|differs|rows differing|^\[  PASSED|^\[==========\]" "$out/tests.log" | head -60

bench_rc=0
timeout 240 "$build/bench/cuda/cuda_ops_bench" "$out/bench.md" >"$out/bench.log" 2>&1 || bench_rc=$?
[ $bench_rc -ne 0 ] && tail -20 "$out/bench.log"

PYTHONUNBUFFERED=1 timeout 90 python3 scripts/device/torch_attention_ref.py >"$out/torch.log" 2>&1 || true

memcheck_rc=0
filter='CudaEmbedding.*:CudaRmsNorm.*:CudaRope.*:CudaSiluMul.*:CudaKvWrite.*:CudaGatherRows.*'
filter+=':CudaMatmul.BiasFusedAndSeparate:CudaMatmul.GenericKernelForMixedDtypes:CudaAttention.MixedBatchBf16Gqa4'
filter+=':CudaAttention.GqaRatiosAndHeadDims:CudaAttention.OtherDtypesAndBlockSizes:CudaAttention.SlidingWindow'
filter+=':CudaSampling.GreedyPenaltiesAndLogprobs:CudaSampling.SeedsAreReproducibleAndOffsetsMatter:CudaGraph.*'
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/cuda/cuda_ops_tests" \
  --gtest_filter="$filter" >"$out/memcheck.log" 2>&1 || memcheck_rc=$?

racecheck_rc=0
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$build/tests/cuda/cuda_ops_tests" \
  --gtest_filter='CudaAttention.MixedBatchBf16Gqa4:CudaAttention.SlidingWindow' >"$out/racecheck.log" 2>&1 ||
  racecheck_rc=$?

echo "== summary =="
echo "tests: rc=$tests_rc; $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$out/tests.log" | tr '\n' ' ')"
echo "memcheck (small op tests): rc=$memcheck_rc; $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
echo "racecheck (attention): rc=$racecheck_rc; $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$out/racecheck.log" | tail -1)"
echo "bench: rc=$bench_rc"
cat "$out/bench.md" 2>/dev/null
grep -E "^torch" "$out/torch.log" || tail -5 "$out/torch.log"
echo "total: $(( $(date +%s) - start )) s"
