#!/usr/bin/env bash
# W4A16 on the warpgroup kernel with TMA copies (the default) and splits fitted to the device's cluster capacity
# (w4_wgmma.cu fitted_splits, PEREGRINE_W4_WG_FIT=1 until measured): the W4A16 op tests (default, every forced split 3..8, the cp.async ring), decode at
# batch 64 / 128 / 256 beside bf16 and beside the fitted split (PEREGRINE_W4_WG_FIT=1), the per-projection timing
# on both, a memcheck. Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, scripts/device/carry_light.sh on (off
# right after); there: source .device/carry_w4/env.sh && scripts/device/w4_fit.sh
set -uo pipefail
b=.device/bin
source scripts/device/op_tests_lib.sh
rows() { TESTS=0 RUNS="$1" scripts/device/w4_skinny.sh run 2>&1 | grep --line-buffered -E "^\| [a-z]|rc="; }
nvidia-smi --query-gpu=name --format=csv,noheader
F=PEREGRINE_W4_WG_FIT=1
TEST_TIMEOUT=60 tests fit 'CudaQuantMatmul.W4Gemm*' $F
for s in ${SPLITS:-3 5 6 7 8}; do TEST_TIMEOUT=60 tests "split$s" 'CudaQuantMatmul.W4Gemm*' PEREGRINE_W4_WG_SPLITS=$s; done
[ "${RING:-1}" = 1 ] && TEST_TIMEOUT=60 tests ring 'CudaQuantMatmul.W4Gemm*' PEREGRINE_W4_WG_TMA=0
rows "${RUNS:-bf16b64:new:bf16:64 w4b64:new:w4a16:64 w4b64fit:new:w4a16:64:$F \
bf16b256:new:bf16:256 w4b256:new:w4a16:256 w4b256fit:new:w4a16:256:$F}"
for e in X=1 $F; do
  env $e timeout 100 "$b/cuda_ops_tests" --gtest_also_run_disabled_tests --gtest_filter='*W4GemmTiming' \
    >/tmp/timing.log 2>&1
  echo "timing $e rc=$?"; grep -E "^\|" /tmp/timing.log | grep -E "shape|layer|q/o|down"
done
env $F timeout 90 compute-sanitizer --tool memcheck "$b/cuda_ops_tests" --gtest_filter='CudaQuantMatmul.W4Gemm*' \
  >/tmp/san.log 2>&1 </dev/null
echo "sanitizer memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -3
# Last, if time is left: the wide split combine's attention tests (PEREGRINE_DECODE_COMBINE_WIDE=1, before it
# becomes the default).
TEST_TIMEOUT=100 tests wide 'CudaAttention*' PEREGRINE_DECODE_COMBINE_WIDE=1
