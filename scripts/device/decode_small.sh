#!/usr/bin/env bash
# Batch-1 decode's small kernels (issues 14, 11): the decode attention's split size and fused split combine, the
# codes' norm after the residual add (NORM_AFTER=1) and the skinny kernel's biased
# int4 codes, measured in one call, with the attention tests under the fused combine over one-tile splits and the
# fused-matmul / quant / RoPE / KV op tests.
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle (peregrine and cuda_ops_tests in .device/carry_w4), then
# scripts/device/carry_light.sh on; there: source .device/carry_w4/env.sh && scripts/device/decode_small.sh.
# RUNS as w4_skinny.sh takes them (default below); PROFILE_ENV: the switches of the ncu step profile (w4a16 bs 1);
# QUICK=1: fewer runs, no attention tests under the fused combine, no ncu (a call with less time left).
set -uo pipefail
b=.device/bin
tests() {  # label filter [ENV=V]
  local label=$1 filter=$2; shift 2
  env "$@" timeout 200 "$b/cuda_ops_tests" --gtest_filter="$filter" >"/tmp/tests_$label.log" 2>&1
  echo "tests $label rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure" "/tmp/tests_$label.log" | head -12
}
T1=PEREGRINE_DECODE_SPLIT_TILES=1 T2=PEREGRINE_DECODE_SPLIT_TILES=2 FC=PEREGRINE_DECODE_FUSED_COMBINE=1
BI=PEREGRINE_SKINNY_BIASED=1 NA1=PEREGRINE_FUSE_NORM_AFTER=1
tests new 'CudaFusedMatmul.NormAfter*:CudaAttention.FusedCombine*' $NA1
[ "${QUICK:-0}" = 1 ] || tests fused 'CudaAttention.MixedBatch*:CudaAttention.ResultDoesNotDependOnBatch:CudaAttention.RowExact*:CudaGraph*' $FC $T1
[ "${QUICK:-0}" = 1 ] && RUNS=${RUNS:-"bf16:new:bf16:1 bf16fc:new:bf16:1:$FC w4:new:w4a16:1 w4na1:new:w4a16:1:$NA1 \
w4fc:new:w4a16:1:$FC w4both:new:w4a16:1:$FC,$NA1 w8:new:w8a16:1 w8na1:new:w8a16:1:$NA1 bf16b64:new:bf16:64 \
bf16b64fc:new:bf16:64:$FC"}
TESTS=0 RUNS="${RUNS:-bf16:new:bf16:1 bf16fc:new:bf16:1:$FC w4:new:w4a16:1 w4na1:new:w4a16:1:$NA1 \
w4fc:new:w4a16:1:$FC w4both:new:w4a16:1:$FC,$NA1 w8:new:w8a16:1 w8na1:new:w8a16:1:$NA1 bf16t2fc:new:bf16:1:$T2,$FC \
w4t1fc:new:w4a16:1:$T1,$FC,$NA1 w4bi:new:w4a16:1:$BI w4b8:new:w4a16:8 w4b8na1:new:w4a16:8:$NA1 bf16b8:new:bf16:8 \
bf16b8fc:new:bf16:8:$FC bf16b64:new:bf16:64 bf16b64fc:new:bf16:64:$FC}" \
  scripts/device/w4_skinny.sh run 2>&1 | grep -E "^\||rc="
[ "${QUICK:-0}" = 1 ] || BENCH=bf16:1 PROFILE="w4a16:1" PCTX=1024 PROFILE_ENV="${PROFILE_ENV:-PEREGRINE_DECODE_FUSED_COMBINE=1 PEREGRINE_FUSE_NORM_AFTER=1}" \
  scripts/device/decode_profile.sh 2>&1 | grep -A14 "^| kernel | grid"
tests default "${OPS:-CudaKvQuant*:CudaFusedMatmul.*:CudaQuant*:CudaRope*:CudaKvWrite*:CudaSkinny*}"
