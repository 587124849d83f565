#!/usr/bin/env bash
# Host/disk tier figures on the H200 with the carried peregrine binary: TTFT cold / device hit / host hit on
# pycoder-tiny and the Llama-3-8B shape (with the tier's copy rate beside the pinned bandwidth of the same run),
# the same with most of the prefix on the disk tier (a 0.25 GiB host tier: 128 blocks of the 450 cached; the
# "tiers" line says how many cached tokens the device, the host and the disk served, the "disk" line what went
# past the host tier, how long the engine waited for the disk tier and whether writes were dropped), and offline
# throughput at c=64 with and without a host tier (copy-downs of evicted blocks).
# Here: SHARED=configs BINARIES=peregrine scripts/device/prepare.sh --binaries; there: source .device/carry/env.sh &&
# scripts/device/tier_bench.sh
set -uo pipefail
out=${OUT:-/tmp/tier_bench}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout 120 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --device cuda --prompt-len 2000 \
  --cached-len 1800 --repeats 5 --kv-offloading-size 2 --num-gpu-blocks-override 400 >"$out/tiny.txt" 2>&1
echo "tiny rc=$?"
timeout 200 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights --config "$cfg" \
  --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 16 \
  --kv-cache-memory-bytes 4294967296 >"$out/8b_host.txt" 2>&1
echo "8b host rc=$?"
rm -rf /tmp/peregrine_kvdisk
timeout 200 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights --config "$cfg" \
  --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 0.25 \
  --kv-cache-dir /tmp/peregrine_kvdisk --kv-cache-disk-gb 40 \
  --kv-cache-memory-bytes 4294967296 >"$out/8b_disk.txt" 2>&1
echo "8b disk rc=$?"
for tier in 0 8; do
  extra=()
  [ "$tier" != 0 ] && extra=(--kv-offloading-size "$tier")
  timeout 120 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 200 --concurrency 64 --kv-cache-memory-bytes 4294967296 \
    "${extra[@]}" >"$out/tp_$tier.txt" 2>&1
  echo "throughput host tier ${tier} GiB rc=$?"
done
echo "total: $(( $(date +%s) - start )) s"
lines='^(prompt|TTFT|ratio|host|tiers|disk|copies|copy rate) '
echo "== pycoder-tiny"; grep -E "$lines" "$out/tiny.txt"
echo "== 8B shape, host tier 16 GiB"; grep -E "$lines" "$out/8b_host.txt"
echo "== 8B shape, host tier 0.25 GiB + disk tier"; grep -E "$lines" "$out/8b_disk.txt"
du -sh /tmp/peregrine_kvdisk 2>/dev/null
for tier in 0 8; do echo "== throughput c=64, device KV 4 GiB, host tier $tier GiB"; grep -E "^ +64|host tier" "$out/tp_$tier.txt"; done
