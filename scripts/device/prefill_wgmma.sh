#!/usr/bin/env bash
# The wgmma prefill attention (issue 14): op tests (every attention case, the 8-bit caches' too), compute-sanitizer
# over the prefill cases, the 8K causal kernel against the mma.sync one (PEREGRINE_PREFILL_WGMMA=0) in the same run,
# then the 8B shape end to end: prefill 8K, the prefix-cache device / host-tier hits (issue 13), offline c 256.
# Here: scripts/device/kv_attn.sh bundle and scripts/device/carry_light.sh on (off right after); carry .device/carry_kv.
# There: source .device/carry_kv/env.sh && scripts/device/prefill_wgmma.sh
# PERF=0 stops after the tests; TP=0 skips the offline run.
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
ln -sfn "$PWD/models/pycoder-tiny" .device/shared/models/pycoder-tiny
export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaAttention.*:CudaKvQuant.*}" >/tmp/ops.log 2>&1
t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|elements out|max abs" /tmp/ops.log | head -20
if [ "${SAN:-1}" = 1 ]; then
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaAttention.MixedBatchBf16Gqa4:CudaAttention.SlidingWindow:CudaAttention.GqaRatiosAndHeadDims' \
    >/tmp/san.log 2>&1
  t "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -5
fi
[ "${PERF:-1}" = 1 ] || exit 0
timeout 150 "$bin/cuda_ops_bench" --kv-cache-only >/tmp/kv_wg.txt 2>&1
t "kv bench (wgmma prefill) rc=$?"
PEREGRINE_PREFILL_WGMMA=0 timeout 150 "$bin/cuda_ops_bench" --kv-cache-only >/tmp/kv_fa2.txt 2>&1
t "kv bench (mma.sync prefill) rc=$?"
pp wg 8190
pp fa2 8190 PEREGRINE_PREFILL_WGMMA=0
for v in 1 0; do
  PEREGRINE_PREFILL_WGMMA=$v timeout 120 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny \
    --random-weights --config "$cfg" --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 \
    --kv-offloading-size 16 --kv-cache-memory-bytes 4294967296 >"/tmp/pc_$v.txt" 2>&1
  t "prefix-cache wgmma=$v rc=$?"; grep -E '^(prompt|TTFT|ratio|host) ' "/tmp/pc_$v.txt"
done
if [ "${TP:-1}" = 1 ]; then
  timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency "${CONC:-256}" >/tmp/tp.txt 2>&1
  t "throughput rc=$?"; grep -vE "^\[|^$" /tmp/tp.txt | tail -6
fi
echo "== prefill attention, wgmma vs mma.sync (same run)"
grep -E "prefill" /tmp/kv_wg.txt | grep -E "^\| "; grep -E "prefill" /tmp/kv_fa2.txt | grep -E "^\| "
echo "== prefill 8K end to end: wgmma $(field /tmp/pp_wg.txt prefill) tok/s, mma.sync $(field /tmp/pp_fa2.txt prefill) tok/s"
