#!/usr/bin/env bash
# One call for the session's closing figures (H100/H200): FP8 / int8 W8A8 bs=1 decode with one or two fused-kernel
# blocks per SM beside bf16; the offline 8B throughput with an fp8 KV cache (the decode kernel's fragment version)
# and with FP8 weights too; the prefix-cache tiers' TTFT (host tier; disk tier behind a 0.25 GiB host tier).
# Here: scripts/device/kv_attn.sh bundle, carry_light.sh on. There: source .device/carry_kv/env.sh &&
# scripts/device/w8_final.sh
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 "$bin/cuda_ops_tests" --gtest_filter='CudaW8Matmul.*:CudaFusedMatmul.*' >/tmp/ops.log 2>&1
t "op tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' /tmp/ops.log | tr '\n' ' ')"; grep -E "Failure|FAILED  \]" /tmp/ops.log | head
for q in fp8 w8a8-int8; do
  fused_equals_unfused "$q" "def fibonacci(n):" "class Stack:" "import os" "# sort a list"
done
Q= lat bf16
Q=fp8 lat fp8
Q=fp8 lat fp8_one_block_per_sm PEREGRINE_W8_BLOCKS_PER_SM=1
Q=fp8 lat fp8_before PEREGRINE_FUSE=0 PEREGRINE_W8_QUANT_X=0 PEREGRINE_W8_TILES_PER_BLOCK=1
Q=w8a8-int8 lat int8
Q=w8a8-int8 lat int8_one_block_per_sm PEREGRINE_W8_BLOCKS_PER_SM=1
for run in "auto" "fp8" "fp8 fp8"; do
  set -- $run
  q=(); [ -n "${2:-}" ] && q=(--quantization "$2")
  timeout 150 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency 64,256 --kv-cache-dtype "$1" "${q[@]}" \
    >"/tmp/tp_${1}_${2:-bf16}.txt" 2>&1
  t "throughput kv $1 weights ${2:-bf16} rc=$?"; grep -vE "^\[|^$" "/tmp/tp_${1}_${2:-bf16}.txt" | tail -6
done
lines='^(prompt|TTFT|ratio|host|tiers|disk|copies|copy rate) '
timeout 100 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights --config "$cfg" \
  --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 16 \
  --kv-cache-memory-bytes 4294967296 >/tmp/host.txt 2>&1
t "host tier rc=$?"; grep -E "$lines" /tmp/host.txt
rm -rf /tmp/peregrine_kvdisk
timeout 120 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights --config "$cfg" \
  --device cuda --prompt-len 8000 --cached-len 7200 --repeats 2 --kv-offloading-size 0.25 \
  --kv-cache-dir /tmp/peregrine_kvdisk --kv-cache-disk-gb 40 --kv-cache-memory-bytes 4294967296 >/tmp/disk.txt 2>&1
t "disk tier rc=$?"; grep -E "$lines" /tmp/disk.txt
rm -rf /tmp/peregrine_kvdisk
for f in /tmp/lat_*.txt; do echo "$(basename "$f" .txt): $(grep -E '^decode' "$f" | head -1)"; done
