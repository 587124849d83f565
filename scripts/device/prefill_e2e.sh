#!/usr/bin/env bash
# End-to-end figures after prefill-attention changes (issues 14, 12, 13), 8B shape, random weights, one call:
# prefill of 8,190 tokens with bf16 weights, FP8 weights, FP8 weights + fp8 KV cache; the prefix-cache device and
# host-tier hits (8,000-token prompt, 7,200 cached); offline 1024 in / 400 out at concurrency ${CONC:-256}.
# Here: scripts/device/prefill_wgmma_bundle.sh, carry_light.sh on; carry .device/carry_kv.
# There: source .device/carry_kv/env.sh && scripts/device/prefill_e2e.sh   (TP=0 skips the offline run)
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
pp bf16 8190
Q=fp8 pp fp8 8190
timeout 120 "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights --config "$cfg" --device cuda \
  --input-len 8190 --output-len 2 --batch-size 1 --iterations 2 --quantization fp8 --kv-cache-dtype fp8 \
  >/tmp/pp_fp8kv.txt 2>&1
t "prefill 8190 fp8 + fp8 KV rc=$?: $(field /tmp/pp_fp8kv.txt prefill) tok/s"
timeout 120 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights --config "$cfg" \
  --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 16 \
  --kv-cache-memory-bytes 4294967296 >/tmp/pc.txt 2>&1
t "prefix-cache rc=$?"; grep -E '^(TTFT|ratio|host) ' /tmp/pc.txt
if [ "${TP:-1}" = 1 ]; then
  timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency "${CONC:-256}" >/tmp/tp.txt 2>&1
  t "throughput rc=$?"; grep -vE "^\[|^$" /tmp/tp.txt | tail -4
fi
echo "== prefill 8190 tok/s: bf16 $(field /tmp/pp_bf16.txt prefill), fp8 $(field /tmp/pp_fp8.txt prefill), fp8 + fp8 KV $(field /tmp/pp_fp8kv.txt prefill)"
