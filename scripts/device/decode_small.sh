#!/usr/bin/env bash
# Batch-1 decode's small kernels (issues 14, 11): the decode attention's split size (PEREGRINE_DECODE_SPLIT_TILES)
# against the defaults in one call (the split combine's wide form, measured here, is the default since 2026-12-07),
# bf16 / W4A16 / W8A16 at batch 1, 8 and 64, with the attention, quant and fused-matmul op tests and ncu of a W4A16 step.
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle (peregrine and cuda_ops_tests in .device/carry_w4), then
# scripts/device/carry_light.sh on; there: source .device/carry_w4/env.sh && scripts/device/decode_small.sh.
# RUNS as w4_skinny.sh takes them (default below); PROFILE_ENV: the switches of the ncu step profile (w4a16 bs 1);
# QUICK=1: no attention tests and no ncu (a call with less time left).
set -uo pipefail
source scripts/device/op_tests_lib.sh
T2=PEREGRINE_DECODE_SPLIT_TILES=2
tests ops "${OPS:-CudaKvQuant*:CudaFusedMatmul.*:CudaQuant*:CudaRope*:CudaKvWrite*:CudaSkinny*}"
[ "${QUICK:-0}" = 1 ] || tests attention 'CudaAttention*:CudaGraph*'
[ "${QUICK:-0}" = 1 ] || tests tiles1 'CudaAttention*' PEREGRINE_DECODE_SPLIT_TILES=1
TESTS=0 RUNS="${RUNS:-bf16:new:bf16:1 bf16t2:new:bf16:1:$T2 w4:new:w4a16:1 w4t2:new:w4a16:1:$T2 w8:new:w8a16:1 \
w8t2:new:w8a16:1:$T2 bf16b8:new:bf16:8 bf16b8t2:new:bf16:8:$T2 \
w4b8:new:w4a16:8 bf16b64:new:bf16:64 bf16b64t2:new:bf16:64:$T2 w4b64:new:w4a16:64}" \
  scripts/device/w4_skinny.sh run 2>&1 | grep -E "^\||rc="
[ "${QUICK:-0}" = 1 ] || BENCH=bf16:1 PROFILE="w4a16:1" PCTX=1024 PROFILE_ENV="${PROFILE_ENV:-X=1}" \
  scripts/device/decode_profile.sh 2>&1 | grep -A14 "^| kernel | grid"
