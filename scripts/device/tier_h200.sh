#!/usr/bin/env bash
# The prefix cache's tiers on the H200 in one call (issue 13): the staged-copy and tier tests on real D2H/H2D copies
# (and under compute-sanitizer), then the figures: an 8K prompt whose first 7,200 tokens were evicted to the host
# tier, copies staged and not (PEREGRINE_COPY_STAGING=0), beside the pinned bandwidth of the same run; the same with
# most of the prefix on the disk tier; offline 1024/200 at c = 64 with and without a host tier (continuous copy-down);
# and `bench multi-turn` with the tiers off and on. Bundle: scripts/device/tier_h200_bundle.sh (with
# scripts/device/carry_light.sh on: no weights of pycoder-tiny travel, only its tokenizer). There:
#   source .device/carry_t/env.sh && scripts/device/tier_h200.sh
set -uo pipefail
NAME=tier_h200
source "$(dirname "$0")/tier_common.sh"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
if [ -x "$bin/cuda_ops_tests" ]; then  # the checks (a bundle with only peregrine measures)
timeout 120 "$bin/cuda_ops_tests" --gtest_filter='CudaCopies.*' >"$out/copies.txt" 2>&1
t "CudaCopies rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$out/copies.txt" | tr '\n' ' ')"
timeout 120 "$bin/engine_model_tests" --gtest_filter='*KvCacheOps*cuda*' >"$out/kvops.txt" 2>&1
t "KvCacheOps on CUDA rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/kvops.txt" | tr '\n' ' ')"
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/engine_model_tests" \
  --gtest_filter='*KvCacheOps*cuda*' >"$out/memcheck.txt" 2>&1
t "memcheck KvCacheOps rc=$?: $(grep -E 'ERROR SUMMARY|PASSED' "$out/memcheck.txt" | tr '\n' ' ')"
fi
for staging in 1 0; do
  PEREGRINE_COPY_STAGING=$staging timeout 200 "$bin/peregrine" bench prefix-cache --model "$tok" --random-weights \
    --config "$cfg" --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 16 \
    --kv-cache-memory-bytes 4294967296 >"$out/8b_host_$staging.txt" 2>&1
  t "8b host tier, staging $staging rc=$?"
done
rm -rf /tmp/peregrine_kvdisk
timeout 200 "$bin/peregrine" bench prefix-cache --model "$tok" --random-weights --config "$cfg" \
  --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 0.25 \
  --kv-cache-dir /tmp/peregrine_kvdisk --kv-cache-disk-gb 40 \
  --kv-cache-memory-bytes 4294967296 >"$out/8b_disk.txt" 2>&1
t "8b disk rc=$?"
for tier in 0 8; do
  extra=()
  [ "$tier" != 0 ] && extra=(--kv-offloading-size "$tier")
  timeout 150 "$bin/peregrine" bench throughput --model "$tok" --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 200 --concurrency 64 --kv-cache-memory-bytes 4294967296 \
    "${extra[@]}" >"$out/tp_$tier.txt" 2>&1
  t "throughput host tier ${tier} GiB rc=$?"
done
timeout 240 "$bin/peregrine" bench multi-turn --model "$tok" --random-weights --config "$cfg" --device cuda \
  --conversations 32 --turns 4 --system-len 1024 --user-len 256 --output-len 64 \
  --kv-cache-memory-bytes 4294967296 --kv-offloading-size 16 >"$out/multi.txt" 2>&1
t "multi-turn rc=$?"
rm -rf /tmp/peregrine_kvdisk
timeout 240 "$bin/peregrine" bench multi-turn --model "$tok" --random-weights --config "$cfg" --device cuda \
  --conversations 32 --turns 4 --system-len 1024 --user-len 256 --output-len 64 \
  --kv-cache-memory-bytes 4294967296 --kv-offloading-size 1 --kv-cache-dir /tmp/peregrine_kvdisk \
  --kv-cache-disk-gb 40 >"$out/multi_disk.txt" 2>&1
t "multi-turn, host 1 GiB + disk rc=$?"
lines='^(prompt|TTFT|ratio|host|tiers|disk|copies|copy rate) '
for staging in 1 0; do echo "== 8B shape, host tier 16 GiB, staging $staging"; grep -E "$lines" "$out/8b_host_$staging.txt"; done
echo "== 8B shape, host tier 0.25 GiB + disk tier"; grep -E "$lines" "$out/8b_disk.txt"
du -sh /tmp/peregrine_kvdisk 2>/dev/null
for tier in 0 8; do echo "== throughput c=64, device KV 4 GiB, host tier $tier GiB"; grep -E "^ +64|host tier" "$out/tp_$tier.txt"; done
echo "== multi-turn"; tail -9 "$out/multi.txt"
echo "== multi-turn, host tier 1 GiB + disk tier"; tail -6 "$out/multi_disk.txt"
for f in "$out"/*.txt; do grep -lE "Failure|error:|terminate" "$f" >/dev/null 2>&1 && { echo "== problems in $f"; grep -E "Failure|error:|terminate" "$f" | head -5; }; done
t "total"
