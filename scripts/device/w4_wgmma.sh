#!/usr/bin/env bash
# W4A16 at 16 < M on the warpgroup-MMA kernel (w4_wgmma.cu, PEREGRINE_W4_WGMMA=1; issue 11's batch 64 / 256 goal)
# against mma.sync's w4_gemm (the default) and bf16, in one call: the W4A16 op tests on both kernels, decode at
# batch 64 / 128 / 256 (8B shape, 1K context), then the per-projection timing test on both.
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, then scripts/device/carry_light.sh on (off right after);
# there: source .device/carry_w4/env.sh && scripts/device/w4_wgmma.sh
# RUNS / RUNS2 / RUNS3: bench rows as w4_skinny.sh takes them (defaults below); TIMING=0 skips the timing tests,
# SAN=0 the compute-sanitizer memcheck / racecheck of the new kernel's op test. PEREGRINE_W4_WGMMA_NT=128: 128-token
# tiles above M 64.
set -uo pipefail
b=.device/bin
tests() {  # label filter [ENV=V]
  local label=$1 filter=$2; shift 2
  env "$@" timeout 150 "$b/cuda_ops_tests" --gtest_filter="$filter" >"/tmp/tests_$label.log" 2>&1
  echo "tests $label rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure|elements out|Expected|Which is|M [0-9]" "/tmp/tests_$label.log" | head -16
}
nvidia-smi --query-gpu=name --format=csv,noheader
W=PEREGRINE_W4_WGMMA=1 B256=PEREGRINE_W4_MMA_MAX_M=256 N128=PEREGRINE_W4_WGMMA_NT=128
rows() { TESTS=0 RUNS="$1" scripts/device/w4_skinny.sh run 2>&1 | grep --line-buffered -E "^\| [a-z]|rc="; }
# In order of need (a call cut short keeps what came first): the new kernel's tests, batch 64 / 128 beside mma.sync
# and bf16, 128-token tiles, batch 256, the timing tests, the sanitizers, batch 1 (and the wide split combine).
tests wgmma 'CudaQuantMatmul.W4Gemm*' $W
rows "${RUNS:-bf16b64:new:bf16:64 w4b64wg:new:w4a16:64:$W w4b64:new:w4a16:64 bf16b128:new:bf16:128 \
w4b128wg:new:w4a16:128:$W w4b128:new:w4a16:128}"
tests wgmma128 'CudaQuantMatmul.W4Gemm*' $W $N128
rows "${RUNS2:-w4b128wg128:new:w4a16:128:$W,$N128 bf16b256:new:bf16:256 w4b256:new:w4a16:256 \
w4b256wg:new:w4a16:256:$W,$B256 w4b256wg128:new:w4a16:256:$W,$B256,$N128}"
if [ "${TIMING:-1}" = 1 ]; then
  for e in PEREGRINE_W4_WGMMA=1 X=1 "PEREGRINE_W4_WGMMA=1 PEREGRINE_W4_WGMMA_NT=128"; do
    env $e timeout 100 "$b/cuda_ops_tests" --gtest_also_run_disabled_tests --gtest_filter='*W4GemmTiming' \
      >/tmp/timing.log 2>&1
    echo "timing $e rc=$?"; grep -E "^\|" /tmp/timing.log
  done
fi
tests others 'CudaQuantMatmul.*:CudaSkinny*' $W
if [ "${SAN:-1}" = 1 ]; then
  for tool in memcheck racecheck; do
    PEREGRINE_W4_WGMMA=1 timeout 90 compute-sanitizer --tool "$tool" "$b/cuda_ops_tests" \
      --gtest_filter='CudaQuantMatmul.W4GemmRowsDoNotDependOnM' >"/tmp/san_$tool.log" 2>&1
    echo "sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)" "/tmp/san_$tool.log" | head -4
  done
fi
CW=PEREGRINE_DECODE_COMBINE_WIDE=1  # the wide split combine (an experiment still to measure)
rows "${RUNS3:-bf16:new:bf16:1 bf16cw:new:bf16:1:$CW w4:new:w4a16:1 w4cw:new:w4a16:1:$CW w8:new:w8a16:1 \
fp8:new:fp8:1 bf16b64cw:new:bf16:64:$CW}"
# Issue 11's prefill goal: an 8K prompt, W4A16 (dequantize + cuBLASLt at this M) beside bf16.
INPUT_LEN=8190 OUTPUT_LEN=2 SHOW=prefill rows "${RUNS4:-p8k:new:bf16:1 p8kw4:new:w4a16:1}"
