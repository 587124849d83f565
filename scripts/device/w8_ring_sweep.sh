#!/usr/bin/env bash
# The W8A8 ring kernel's stage sizes against the rounds kernel (issue 12), FP8 at batch 1, 8B shape; the ring's op
# tests at each stage size first. There: source .device/carry_kv/env.sh && scripts/device/w8_ring_sweep.sh
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
for v in "PEREGRINE_W8_RING_ROW_KIB=1" "PEREGRINE_W8_RING_ROW_KIB=2" "PEREGRINE_W8_RING_ROW_KIB=4 PEREGRINE_W8_RING_STAGES=2"; do
  env $v timeout 100 "$bin/cuda_ops_tests" --gtest_filter='CudaW8Matmul.SmallM*:CudaW8Matmul.Fusions*:CudaW8Matmul.InBlock*' >/tmp/ops.log 2>&1
  t "op tests ($v) rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure" /tmp/ops.log | head -5
done
Q= lat bf16
Q=fp8 lat fp8_rounds PEREGRINE_W8_RING=0
Q=fp8 lat fp8_r1
Q=fp8 lat fp8_r2 PEREGRINE_W8_RING_ROW_KIB=2
Q=fp8 lat fp8_r4_s2 PEREGRINE_W8_RING_ROW_KIB=4 PEREGRINE_W8_RING_STAGES=2
Q=w8a8-int8 lat int8_rounds PEREGRINE_W8_RING=0
Q=w8a8-int8 lat int8_r2 PEREGRINE_W8_RING_ROW_KIB=2
