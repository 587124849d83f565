#!/usr/bin/env bash
# Batch-1 decode's small kernels (issue 14): the decode attention's split size and the skinny kernel's blocks an SM,
# measured against the defaults in one call, with the attention tests at the default and at one-tile splits.
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle (peregrine and cuda_ops_tests in .device/carry_w4), then
# scripts/device/carry_light.sh on; there: source .device/carry_w4/env.sh && scripts/device/decode_small.sh.
# RUNS as w4_skinny.sh takes them (default below); PROFILE_ENV: the switches of the ncu step profile (w4a16 bs 1).
set -uo pipefail
b=.device/bin
tests() {  # label filter [ENV=V]
  local label=$1 filter=$2; shift 2
  env "$@" timeout 200 "$b/cuda_ops_tests" --gtest_filter="$filter" >"/tmp/tests_$label.log" 2>&1
  echo "tests $label rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure" "/tmp/tests_$label.log" | head -12
}
tests default "${OPS:-CudaAttention*:CudaKvQuant*:CudaGraph*:CudaFusedMatmul.*:CudaQuant*:CudaRope*:CudaKvWrite*}"
tests tiles1 'CudaAttention*:CudaKvQuant*' PEREGRINE_DECODE_SPLIT_TILES=1
tests wide 'CudaAttention*:CudaKvQuant*' PEREGRINE_DECODE_COMBINE_WIDE=1 PEREGRINE_DECODE_SPLIT_TILES=1
T1=PEREGRINE_DECODE_SPLIT_TILES=1 CW=PEREGRINE_DECODE_COMBINE_WIDE=1 BI=PEREGRINE_SKINNY_BIASED=1
TESTS=0 RUNS="${RUNS:-bf16:new:bf16:1 bf16t2:new:bf16:1:PEREGRINE_DECODE_SPLIT_TILES=2 bf16t1:new:bf16:1:$T1 \
w4:new:w4a16:1 w4t1:new:w4a16:1:$T1 w4cw:new:w4a16:1:$CW w4bi:new:w4a16:1:$BI w4bi8:new:w4a16:8:$BI w4b8:new:w4a16:8 \
w8f1:new:w8a16:1:PEREGRINE_SKINNY_FACT3=1 w8:new:w8a16:1 bf16cw:new:bf16:1:$CW \
bf16b8:new:bf16:8 bf16b8t2:new:bf16:8:PEREGRINE_DECODE_SPLIT_TILES=2 bf16b64:new:bf16:64 bf16b64t2:new:bf16:64:PEREGRINE_DECODE_SPLIT_TILES=2}" \
  scripts/device/w4_skinny.sh run 2>&1 | grep -E "^\|"
BENCH=bf16:1 PROFILE="w4a16:1" PCTX=1024 PROFILE_ENV="${PROFILE_ENV:-X=1}" \
  scripts/device/decode_profile.sh 2>&1 | grep -A14 "^| kernel | grid"
