#!/usr/bin/env bash
# Long prompts end to end (issue 14): the Llama-3.1-8B shape (128K positions), random bf16 weights, one sequence,
# prefilled in the engine's chunks over the paged cache, then 8 tokens decoded at that context, for each length in
# ${LENS:-32760 131000}: prefill tok/s and TFLOP/s (matmuls + causal attention), decode tok/s and its bytes against
# the copy bandwidth measured in the same run.
# Here: scripts/device/prefill_wgmma_bundle.sh, carry_light.sh on; carry .device/carry_kv.
# There: source .device/carry_kv/env.sh && scripts/device/long_context.sh
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
for len in ${LENS:-32760 131000}; do
  timeout 200 "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights \
    --config .device/shared/configs/llama-3.1-8b.json --device cuda --input-len "$len" --output-len 8 --batch-size 1 \
    --iterations 1 >"/tmp/long_$len.txt" 2>&1
  t "length $len rc=$?"; grep -E "^(memory|prefill|decode)" "/tmp/long_$len.txt"
done
