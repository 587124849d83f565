#!/usr/bin/env bash
# FP8 in 128 x 128 blocks on the 8-bit skinny kernel (issue 12): the W8A8 op tests (block FP8 against the ref, rows
# across M), compute-sanitizer, the fp8-block128 fixture through `generate` on cuda beside its reference ids, then
# 8B-shape bs=1 decode: bf16, FP8 per channel, FP8 blocks on the skinny kernel and on the warp kernel (before).
# Here: scripts/device/kv_attn.sh bundle, mkdir -p .device/quant && cp -r ../shared/models/quant/fp8-block128
# .device/quant/, scripts/device/carry_light.sh on (off right after).
# There: source .device/carry_kv/env.sh && scripts/device/fp8_blocks.sh   (carry .device/carry_kv and .device/quant)
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaW8Matmul.*}" >/tmp/ops.log 2>&1
t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|element" /tmp/ops.log | head -20
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
  --gtest_filter='CudaW8Matmul.MatchesRef*' >/tmp/san.log 2>&1
t "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -3
f=.device/quant/fp8-block128
for skinny in 1 0; do
  PEREGRINE_W8_SKINNY=$skinny timeout 60 "$bin/peregrine" generate --model "$f" --device cuda \
    --prompt-ids 644,450,938,432,90,421,127 --max-tokens 16 --temperature 0 --ignore-eos >/tmp/gen_blocks.txt 2>&1
  t "fixture fp8-block128 (skinny $skinny) rc=$?: $(tail -1 /tmp/gen_blocks.txt | cut -c1-200)"
done
echo "  reference ids: $(python3 -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))['cases_act_quant'][0]['output_ids'])))" "$f/reference.json")"
Q= lat bf16
Q=fp8 lat fp8_channel
Q=fp8-block128 lat fp8_blocks
Q=fp8-block128 lat fp8_blocks_warp_kernel PEREGRINE_W8_SKINNY=0
BS=8 Q=fp8-block128 lat fp8_blocks_bs8
BS=8 Q=fp8-block128 lat fp8_blocks_bs8_warp_kernel PEREGRINE_W8_SKINNY=0
for f in /tmp/lat_*.txt; do echo "$(basename "$f" .txt): $(grep -E '^decode' "$f" | head -1)"; done
