#!/usr/bin/env bash
# Issue 13's TTFT goals on the H200 (bundles: scripts/device/tier_ttft_bundle.sh bench|tests). There:
#   source .device/carry_tt/env.sh && scripts/device/tier_ttft.sh bench|tests
# bench: `bench prefix-cache` of an 8K prompt whose first 7,200 tokens were evicted, 8B shape, device KV 4 GiB: a
# host-tier hit (16 GiB), then a disk-tier hit behind a 0.25 GiB host tier with the page cache kept and dropped, and
# the disk's own read rate (O_DIRECT). tests: the tier tests on CUDA (KvCacheOps, the engine's host-tier tests) and
# KvCacheOps under compute-sanitizer. all (bundle all): the host-tier and disk-tier (page cache kept) figures, then
# the tests.
set -uo pipefail
what=${1:?bench or tests}
NAME=tier_ttft
source "$(dirname "$0")/tier_common.sh"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
lines='^(prompt|TTFT|ratio|host|tiers|disk|copies|copy rate) '
if [ "$what" = all ]; then
  timeout 100 "$bin/peregrine" bench prefix-cache --model "$tok" --random-weights --config "$cfg" --device cuda \
    --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 16 --kv-cache-memory-bytes 4294967296 \
    >"$out/host.txt" 2>&1
  t "host tier rc=$?"; grep -E "$lines" "$out/host.txt"
  PEREGRINE_KV_LAYERED_LOADS=0 timeout 100 "$bin/peregrine" bench prefix-cache --model "$tok" --random-weights \
    --config "$cfg" --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 16 \
    --kv-cache-memory-bytes 4294967296 >"$out/host_whole.txt" 2>&1
  t "host tier, whole loads rc=$?"; grep -E "$lines" "$out/host_whole.txt"
  rm -rf /tmp/peregrine_kvdisk
  timeout 100 "$bin/peregrine" bench prefix-cache --model "$tok" --random-weights --config "$cfg" --device cuda \
    --prompt-len 8000 --cached-len 7200 --repeats 2 --kv-offloading-size 0.25 --kv-cache-dir /tmp/peregrine_kvdisk \
    --kv-cache-disk-gb 40 --kv-cache-memory-bytes 4294967296 >"$out/disk.txt" 2>&1
  t "disk tier rc=$?"; grep -E "$lines" "$out/disk.txt"
  rm -rf /tmp/peregrine_kvdisk
  PEREGRINE_KV_DISK_SKIP=0 timeout 100 "$bin/peregrine" bench prefix-cache --model "$tok" --random-weights \
    --config "$cfg" --device cuda --prompt-len 8000 --cached-len 7200 --repeats 2 --kv-offloading-size 0.25 \
    --kv-cache-dir /tmp/peregrine_kvdisk --kv-cache-disk-gb 40 --kv-cache-memory-bytes 4294967296 \
    >"$out/disk_noskip.txt" 2>&1
  t "disk tier, always read rc=$?"; grep -E "$lines" "$out/disk_noskip.txt"
  rm -rf /tmp/peregrine_kvdisk
  what=tests
fi
if [ "$what" = bench ]; then
  timeout 150 "$bin/peregrine" bench prefix-cache --model "$tok" --random-weights --config "$cfg" --device cuda \
    --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 16 --kv-cache-memory-bytes 4294967296 \
    >"$out/host.txt" 2>&1
  t "host tier rc=$?"; grep -E "$lines" "$out/host.txt"
  for drop in 0 1; do
    d=/tmp/peregrine_kvdisk_$drop
    rm -rf "$d"
    extra=()
    [ "$drop" = 1 ] && extra=(--drop-page-cache)
    timeout 150 "$bin/peregrine" bench prefix-cache --model "$tok" --random-weights --config "$cfg" --device cuda \
      --prompt-len 8000 --cached-len 7200 --repeats 2 --kv-offloading-size 0.25 --kv-cache-dir "$d" \
      --kv-cache-disk-gb 40 --kv-cache-memory-bytes 4294967296 "${extra[@]}" >"$out/disk_$drop.txt" 2>&1
    t "disk tier, page cache dropped $drop rc=$?"; grep -E "$lines" "$out/disk_$drop.txt"
    rm -rf "$d"
  done
  df -h /tmp | tail -1
  dd if=/dev/zero of=/tmp/ddtest bs=8M count=128 oflag=direct 2>&1 | tail -1
  dd if=/tmp/ddtest of=/dev/null bs=8M iflag=direct 2>&1 | tail -1
  dd if=/tmp/ddtest of=/dev/null bs=2M iflag=direct 2>&1 | tail -1
  rm -f /tmp/ddtest
else
  [ -f .device/model/model.safetensors ] && cp .device/model/model.safetensors models/pycoder-tiny/
  timeout 120 "$bin/engine_model_tests" --gtest_filter='*KvCacheOps*cuda*:EngineModelTest.*OnCuda*' >"$out/tests.txt" 2>&1
  t "tier tests on CUDA rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.txt" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" -A3 "$out/tests.txt" | head -20
  timeout 50 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/engine_model_tests" \
    --gtest_filter='*KvCacheOps*cuda*' >"$out/memcheck.txt" 2>&1
  t "memcheck KvCacheOps rc=$?: $(grep -E 'ERROR SUMMARY|PASSED' "$out/memcheck.txt" | tr '\n' ' ')"
fi
t total
