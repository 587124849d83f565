#!/usr/bin/env bash
# One device call for the prefix cache's host tier on CUDA: the exactness test (a host-tier hit equals a device-tier
# hit, real D2H/H2D copies), the same under compute-sanitizer, and `bench prefix-cache` TTFT cold / device hit /
# host-tier hit on pycoder-tiny and on the Llama-3-8B shape (random weights).
# Here: scripts/device/prepare.sh --binaries; there: source .device/carry/env.sh && scripts/device/tier_check.sh
set -uo pipefail
out=${OUT:-/tmp/tier_check}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout 120 "$bin/engine_model_tests" --gtest_filter='EngineModelTest.HostTier*' >"$out/tier_test.log" 2>&1
echo "host tier tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|SKIPPED \]" "$out/tier_test.log" | head -8
if command -v compute-sanitizer >/dev/null; then
  timeout 200 compute-sanitizer --tool memcheck --leak-check none "$bin/engine_model_tests" \
    --gtest_filter='EngineModelTest.HostTierHitsEqualDeviceHitsOnCuda' >"$out/tier_memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" "$out/tier_memcheck.log" | head -3
fi
timeout 120 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --device cuda --prompt-len 2000 \
  --cached-len 1800 --repeats 5 --kv-offloading-size 2 --num-gpu-blocks-override 400 >"$out/tiny.txt" 2>&1
echo "bench tiny rc=$?"
cfg=.device/shared/configs/llama-3-8b.json
timeout 300 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights --config "$cfg" \
  --device cuda --prompt-len 8192 --cached-len 7372 --repeats 3 --kv-offloading-size 16 \
  --kv-cache-memory-bytes 4294967296 >"$out/8b.txt" 2>&1
echo "bench 8b rc=$?"
echo "total: $(( $(date +%s) - start )) s"
echo "== pycoder-tiny, H200"; cat "$out/tiny.txt"
echo "== Llama-3-8B shape, random weights, H200 (device KV 4 GiB, host tier 16 GiB)"; cat "$out/8b.txt"
