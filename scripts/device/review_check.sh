#!/usr/bin/env bash
# A short call after a refactor of the attention kernels' shared helpers (attention_mma.cuh: for_each_kv_chunk,
# scale_probabilities): the attention op tests over bf16 and 8-bit caches, the model-level KV fidelity test,
# memcheck of the row-exact pieces; then FP8 bs=1 with the launcher's even split of tiles, fixed runs of 2 and 4
# (PEREGRINE_W8_TILES_PER_BLOCK), and x quantized in the blocks only up to K = 4096 (PEREGRINE_W8_QUANT_X_MAX_K).
# Here: scripts/device/kv_attn.sh bundle, carry_light.sh on. There: source .device/carry_kv/env.sh &&
# scripts/device/review_check.sh
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
ln -sfn "$PWD/models/pycoder-tiny" .device/shared/models/pycoder-tiny
export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 240 "$bin/cuda_ops_tests" --gtest_filter='CudaAttention.*:CudaKvQuant.*:CudaW8Matmul.*:CudaFusedMatmul.*' >/tmp/ops.log 2>&1
t "op tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' /tmp/ops.log | tr '\n' ' ')"; grep -E "Failure|FAILED  \]" /tmp/ops.log | head
timeout 120 "$bin/model_tests" --gtest_filter='KvCacheQuant.*Cuda*' >/tmp/model.log 2>&1
t "model test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' /tmp/model.log | tr '\n' ' ')"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
  --gtest_filter='CudaKvQuant.*:CudaAttention.RowExact*' >/tmp/san.log 2>&1
t "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' /tmp/san.log)"
Q=fp8 lat fp8
Q=fp8 lat fp8_runs_of_2 PEREGRINE_W8_TILES_PER_BLOCK=2
Q=fp8 lat fp8_runs_of_4 PEREGRINE_W8_TILES_PER_BLOCK=4
Q=fp8 lat fp8_quant_x_to_4096 PEREGRINE_W8_QUANT_X_MAX_K=4096
