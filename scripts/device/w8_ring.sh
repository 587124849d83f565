#!/usr/bin/env bash
# The W8A8 ring kernel (issue 12: weights streamed into shared memory by bulk copies at M <= 8): op tests (the ring's
# rows are the rounds kernel's bits), greedy pycoder-tiny outputs ring vs rounds and fused vs unfused (identical JSON,
# logprobs included), compute-sanitizer, then 8B-shape decode: bf16, FP8 and int8 W8A8 on the ring and on the rounds
# kernel (PEREGRINE_W8_RING=0), ring depths, batch 8; ncu over one FP8 step last.
# Here: scripts/device/kv_attn.sh bundle (.device/carry_kv) and scripts/device/carry_light.sh on (off right after).
# There: source .device/carry_kv/env.sh && scripts/device/w8_ring.sh   (NCU=0 skips ncu, SAN=0 compute-sanitizer)
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaW8Matmul.*:CudaFusedMatmul.*:CudaSkinny*:CudaRmsNorm.*}" \
  >/tmp/ops.log 2>&1
t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|element|differ" /tmp/ops.log | head -30
prompts=("def fibonacci(n):" "class Stack:" "import os" "# sort a list")
for q in fp8 w8a8-int8; do
  fused_equals_unfused "$q" "${prompts[@]}"
  args=(); for p in "${prompts[@]}"; do args+=(--prompt "$p"); done
  PEREGRINE_W8_RING=0 timeout 60 "$bin/peregrine" generate --model models/pycoder-tiny --device cuda -q "$q" "${args[@]}" \
    --max-tokens 48 --ignore-eos --json --logprobs 3 >"/tmp/gen_${q}_rounds.json" 2>/dev/null
  cmp -s "/tmp/gen_${q}_1.json" "/tmp/gen_${q}_rounds.json" && [ -s "/tmp/gen_${q}_rounds.json" ] &&
    t "generate $q: ring == rounds" || t "generate $q: ring and rounds DIFFER"
done
if [ "${SAN:-1}" = 1 ]; then
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaW8Matmul.SmallM*:CudaW8Matmul.Fusions*' >/tmp/san.log 2>&1
  t "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -5
fi
Q= lat bf16
Q=fp8 lat fp8_ring
Q=fp8 lat fp8_rounds PEREGRINE_W8_RING=0
Q=w8a8-int8 lat int8_ring
Q=w8a8-int8 lat int8_rounds PEREGRINE_W8_RING=0
Q=fp8 lat fp8_ring_3stages PEREGRINE_W8_RING_STAGES=3
Q=fp8 lat fp8_ring_8stages PEREGRINE_W8_RING_STAGES=8
BS=8 Q=fp8 lat fp8_bs8_ring
BS=8 Q=fp8 lat fp8_bs8_rounds PEREGRINE_W8_RING=0
for f in /tmp/lat_*.txt; do echo "$(basename "$f" .txt): $(grep -E '^decode' "$f" | head -1)"; done
[ "${NCU:-1}" = 1 ] && LAT=0 timeout 150 scripts/device/fp8_bs1.sh  # ncu over one FP8 step
