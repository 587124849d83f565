#!/usr/bin/env bash
# W4A16 at 16 < M on the warpgroup-MMA kernel (w4_wgmma.cu, the default on Hopper; issue 11's batch 64 / 256 goal)
# against mma.sync's w4_gemm (PEREGRINE_W4_WGMMA=0) and bf16, in one call: the W4A16 op tests on both kernels, decode
# at batch 64 / 128 / 256 (8B shape, 1K context), the per-projection timing test on both,
# the sanitizers, batch 1, an 8K prefill beside bf16; NCU=1 first profiles one q/o launch at M = 64 (details.csv and source.csv under $OUT).
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, then scripts/device/carry_light.sh on (off right after);
# there: source .device/carry_w4/env.sh && scripts/device/w4_wgmma.sh
# RUNS / RUNS3 / RUNS4: bench rows as w4_skinny.sh takes them (defaults below); TIMING=0 skips the timing tests,
# SAN=0 the compute-sanitizer memcheck / racecheck of the kernel's op test. Stages run in order of need (a call cut
# short keeps what came first).
set -uo pipefail
b=.device/bin
source scripts/device/op_tests_lib.sh
rows() { TESTS=0 RUNS="$1" scripts/device/w4_skinny.sh run 2>&1 | grep --line-buffered -E "^\| [a-z]|rc="; }
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${NCU:-0}" = 1 ] && [ -n "${OUT:-}" ]; then
  PEREGRINE_W4_TIMING_M=64 timeout 200 ncu --kernel-name regex:w4_wgmma --launch-skip 2 --launch-count 1 --set full \
    --import-source yes -f -o "$OUT/prof" "$b/cuda_ops_tests" --gtest_also_run_disabled_tests \
    --gtest_filter='*W4GemmTiming' >/tmp/ncu_run.txt 2>&1
  echo "ncu rc=$?"; tail -2 /tmp/ncu_run.txt
  ncu --import "$OUT/prof.ncu-rep" --page details --csv >"$OUT/details.csv" 2>/dev/null
  ncu --import "$OUT/prof.ncu-rep" --page source --csv --print-source sass >"$OUT/source.csv" 2>/dev/null
  rm -f "$OUT/prof.ncu-rep"
fi
M=PEREGRINE_W4_WGMMA=0
tests wgmma 'CudaQuantMatmul.W4Gemm*'
# The cp.async ring the TMA kernel replaced (PEREGRINE_W4_WG_TMA=0).
T=PEREGRINE_W4_WG_TMA=0
TEST_TIMEOUT=60 tests ring 'CudaQuantMatmul.W4Gemm*' $T
# PEREGRINE_W4_MMA_BLOCKS=132: the K split aimed at one block an SM instead of two (fewer clusters of eight).
S=PEREGRINE_W4_MMA_BLOCKS=132
rows "${RUNS:-bf16b64:new:bf16:64 w4b64:new:w4a16:64 w4b64m:new:w4a16:64:$M w4b64s:new:w4a16:64:$S w4b64r:new:w4a16:64:$T \
bf16b128:new:bf16:128 w4b128:new:w4a16:128 w4b128r:new:w4a16:128:$T bf16b256:new:bf16:256 w4b256:new:w4a16:256 w4b256r:new:w4a16:256:$T}"
[ "${LEAN:-0}" = 1 ] || tests mmasync 'CudaQuantMatmul.W4Gemm*' $M
if [ "${TIMING:-1}" = 1 ]; then
  es="X=1 $T $M $S"; [ "${LEAN:-0}" = 1 ] && es="X=1 $T"
  for e in $es; do
    env $e timeout 100 "$b/cuda_ops_tests" --gtest_also_run_disabled_tests --gtest_filter='*W4GemmTiming' \
      >/tmp/timing.log 2>&1
    echo "timing $e rc=$?"; grep -E "^\|" /tmp/timing.log
  done
fi
if [ "${LEAN:-0}" = 1 ]; then
  env $T timeout 90 compute-sanitizer --tool memcheck .device/bin/cuda_ops_tests --gtest_filter='CudaQuantMatmul.W4GemmRowsDoNotDependOnM' >/tmp/san_tma.log 2>&1 </dev/null
  echo "sanitizer memcheck (ring) rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san_tma.log | head -3
  exit 0
fi
tests others 'CudaQuantMatmul.*:CudaSkinny*'
if [ "${SAN:-1}" = 1 ]; then
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool "$tool" "$b/cuda_ops_tests" \
      --gtest_filter='CudaQuantMatmul.W4GemmRowsDoNotDependOnM' >"/tmp/san_$tool.log" 2>&1
    echo "sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)" "/tmp/san_$tool.log" | head -4
  done
fi
rows "${RUNS3:-bf16:new:bf16:1 w4:new:w4a16:1}"
# Issue 11's prefill goal: an 8K prompt, W4A16 (dequantize + cuBLASLt at this M) beside bf16.
INPUT_LEN=8190 OUTPUT_LEN=2 SHOW=prefill rows "${RUNS4:-p8k:new:bf16:1 p8kw4:new:w4a16:1}"
