#!/usr/bin/env bash
# The 8-bit skinny kernel quantizing x in its blocks and its fusions (issue 12, FP8 / int8 W8A8 at batch 1..8):
# op tests (every element; the fusions bit for bit the unfused ops), greedy pycoder-tiny outputs fused vs unfused
# (identical JSON, logprobs included), compute-sanitizer, then 8B-shape bs=1 decode: bf16, FP8 and int8 W8A8 as they
# run now, FP8 with a tile a block (PEREGRINE_W8_TILES_PER_BLOCK=1), FP8 unfused (PEREGRINE_FUSE=0) and FP8 as before
# (PEREGRINE_FUSE=0 PEREGRINE_W8_QUANT_X=0), and ncu over one FP8 step.
# Here: scripts/device/kv_attn.sh bundle (.device/carry_kv) and scripts/device/carry_light.sh on (off right after).
# There: source .device/carry_kv/env.sh && scripts/device/w8_fused.sh   (NCU=0 skips ncu, SAN=0 compute-sanitizer)
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 "$bin/cuda_ops_tests" --gtest_filter="${OPS:--CudaAttention.*}" >/tmp/ops.log 2>&1
t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|element|differ" /tmp/ops.log | head -30
for q in fp8 w8a8-int8; do
  fused_equals_unfused "$q" "def fibonacci(n):" "class Stack:" "import os" "# sort a list" "def parse_args():" \
    "for i in range(10):"
done
if [ "${SAN:-1}" = 1 ]; then
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaW8Matmul.InBlock*:CudaW8Matmul.Fusions*' >/tmp/san.log 2>&1
  t "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -5
fi
Q= lat bf16
Q=fp8 lat fp8
Q=fp8 lat fp8_tile_a_block PEREGRINE_W8_TILES_PER_BLOCK=1
Q=fp8 lat fp8_unfused PEREGRINE_FUSE=0
Q=fp8 lat fp8_before PEREGRINE_FUSE=0 PEREGRINE_W8_QUANT_X=0
Q=w8a8-int8 lat int8
Q=w8a8-int8 lat int8_before PEREGRINE_FUSE=0 PEREGRINE_W8_QUANT_X=0
[ "${NCU:-1}" = 1 ] && LAT=0 scripts/device/fp8_bs1.sh  # ncu over one FP8 step
for f in /tmp/lat_*.txt; do echo "$(basename "$f" .txt): $(grep -E '^decode' "$f" | head -1)"; done
