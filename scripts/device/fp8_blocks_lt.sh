#!/usr/bin/env bash
# FP8 in 128 x 128 blocks past the skinny kernel's M on cuBLASLt's block-scaled FP8 GEMM (issue 12): the scale-layout
# probe (if the backend's layout does not match and another does, the rest runs with PEREGRINE_FP8_BLOCK_LAYOUT set to
# it, and says so), the W8A8 op tests, the fp8-block128 fixture on CUDA against its act-quant reference (64- and
# 200-token prefills; LTS="1 0" also on the warp kernel), then the Llama-3-8B shape: prefill 8,190 for bf16, FP8
# blocks and FP8 per channel, decode at bs 64 for bf16 and FP8 blocks (MORE=1: a 1K block prefill on the warp
# kernel, FP8 per channel at bs 64), and compute-sanitizer on the probe (SAN=0 skips it).
# Here: scripts/device/kv_attn.sh bundle, mkdir -p .device/quant && cp -r ../shared/models/quant/fp8-block128
# .device/quant/, scripts/device/carry_light.sh on (off right after).
# There: source .device/carry_kv/env.sh && scripts/device/fp8_blocks_lt.sh   (carry .device/carry_kv and .device/quant)
set -uo pipefail
PP_TIMEOUT=90
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 "$bin/cuda_ops_tests" --gtest_filter='CudaW8Matmul.Fp8BlockLayoutProbe' >/tmp/probe.log 2>&1
t "layout probe rc=$?"; grep -E "matching|SKIPPED|Failure|^\[  (PASSED|FAILED)" /tmp/probe.log | head -8
line=$(grep -E "^fp8 block layouts matching:" /tmp/probe.log | head -1)
mine=$(echo "$line" | sed -E 's/.*backend.s: ([0-9]+).*/\1/')
found=$(echo "$line" | sed -E 's/.*matching:([0-9 ]*) \(.*/\1/' | xargs)
if [ -n "$found" ] && ! echo " $found " | grep -q " $mine "; then
  export PEREGRINE_FP8_BLOCK_LAYOUT=${found%% *}
  t "the backend's layout $mine does not match; running on with PEREGRINE_FP8_BLOCK_LAYOUT=$PEREGRINE_FP8_BLOCK_LAYOUT"
fi
export PEREGRINE_FP8_BLOCK_LT=1  # the default since 2026-12-06 (scripts/device/fp8_fast.sh); set here for older binaries
timeout 90 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaW8Matmul.*}" >/tmp/ops.log 2>&1
t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|element" /tmp/ops.log | head -20
mkdir -p /tmp/sh/models/quant && ln -sfn "$PWD/.device/quant/fp8-block128" /tmp/sh/models/quant/fp8-block128
for lt in ${LTS:-1}; do
  PEREGRINE_FP8_BLOCK_LT=$lt PEREGRINE_SHARED_DIR=/tmp/sh timeout 90 "$bin/model_tests" \
    --gtest_filter='Fixtures/W8A8Model.*fp8_block128_cuda*' >/tmp/model_$lt.log 2>&1
  t "fixture fp8-block128 on cuda (cuBLASLt $lt) rc=$?: $(grep -E 'vs cases_act_quant' /tmp/model_$lt.log | head -1)"
  grep -E "Failure|^\[  (PASSED|FAILED)" /tmp/model_$lt.log | head -4
done
Q= pp bf16 8190
Q=fp8-block128 pp fp8_blocks 8190
Q=fp8 pp fp8_channel 8190
BS=64 Q= lat bf16_bs64
BS=64 Q=fp8-block128 lat fp8_blocks_bs64
[ -n "${MORE:-}" ] && { Q=fp8-block128 pp fp8_blocks_warp_1k 1024 PEREGRINE_FP8_BLOCK_LT=0; BS=64 Q=fp8 lat fp8_channel_bs64; }
if [ "${SAN:-1}" = 1 ]; then
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaW8Matmul.Fp8BlockLayoutProbe' >/tmp/san.log 2>&1
  t "memcheck (probe) rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -3
fi
grep -shE "^memory bandwidth|matmul" /tmp/pp_bf16.txt | head -3
echo "| run | tok/s |"; echo "| --- | --- |"
for f in /tmp/pp_*.txt; do echo "| $(basename "$f" .txt) | $(field "$f" prefill) |"; done
for f in /tmp/lat_*.txt; do echo "| $(basename "$f" .txt) | $(field "$f" decode) |"; done
