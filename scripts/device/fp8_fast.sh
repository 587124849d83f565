#!/usr/bin/env bash
# FP8 per channel with and without cuBLASLt's fast accumulation (PEREGRINE_FP8_FAST_ACCUM=1 / 0; on by default
# since this ran on an H200, 2026-12-06) and the block-FP8 cuBLASLt path (PEREGRINE_FP8_BLOCK_LT, likewise) on the
# GPU (issue 12): the scale-layout probe, the W8A8 op tests, the fp8-per-channel and fp8-block128 fixtures on CUDA,
# then the Llama-3-8B shape: prefill 8,190 (bf16; FP8 per channel fast / not; FP8 blocks), decode bs 1 (bf16, FP8)
# and bs 64 (bf16, FP8 blocks), offline 1024 / 400 at concurrency ${CONC:-256} (bf16 / bf16 KV, FP8 / FP8 KV), and
# (PROFILE=1, the default) ncu on the attention kernels.
# Here: scripts/device/kv_attn.sh bundle; mkdir -p .device/quant; cp -r ../shared/models/quant/fp8-{block128,per-channel}
# .device/quant/; scripts/device/carry_light.sh on (off right after).
# There: source .device/carry_kv/env.sh && scripts/device/fp8_fast.sh   (carry .device/carry_kv and .device/quant)
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
export PEREGRINE_FP8_BLOCK_LT=1
timeout 60 "$bin/cuda_ops_tests" --gtest_filter='CudaW8Matmul.Fp8BlockLayoutProbe' >/tmp/probe.log 2>&1
t "layout probe rc=$?"; grep -E "matching|Failure|^\[  (PASSED|FAILED)" /tmp/probe.log | head -6
for fa in 1 0; do
  PEREGRINE_FP8_FAST_ACCUM=$fa timeout 120 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaW8Matmul.*:CudaW8*:CudaInt8*}" \
    >/tmp/ops_$fa.log 2>&1
  t "op tests (fast accum $fa) rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|element" /tmp/ops_$fa.log | head -12
done
mkdir -p /tmp/sh/models/quant
for f in fp8-per-channel fp8-block128; do ln -sfn "$PWD/.device/quant/$f" /tmp/sh/models/quant/$f; done
for fa in 1 0; do
  PEREGRINE_FP8_FAST_ACCUM=$fa PEREGRINE_SHARED_DIR=/tmp/sh timeout 120 "$bin/model_tests" \
    --gtest_filter='Fixtures/W8A8Model.*fp8*cuda*' >/tmp/model_$fa.log 2>&1
  t "fixtures fp8 on cuda (fast accum $fa) rc=$?"
  grep -E "vs cases|Failure|^\[  (PASSED|FAILED)|^\[       OK" /tmp/model_$fa.log | head -8
done
Q= pp bf16 8190
Q=fp8 pp fp8_fast 8190 PEREGRINE_FP8_FAST_ACCUM=1
Q=fp8 pp fp8_nofast 8190 PEREGRINE_FP8_FAST_ACCUM=0
Q=fp8-block128 pp fp8_blocks 8190
Q= lat bf16_bs1
Q=fp8 lat fp8_bs1
BS=64 Q= lat bf16_bs64
BS=64 Q=fp8-block128 lat fp8_blocks_bs64
tp() {  # tp NAME KV Q [VAR=value...]  (Q "" for none)
  local name=$1 kv=$2 q=$3; shift 3
  env X=1 "$@" timeout 240 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency "${CONC:-256}" --kv-cache-dtype "$kv" \
    ${q:+--quantization $q} >"/tmp/tp_$name.txt" 2>&1
  t "throughput $name rc=$?"; grep -vE "^\[|^$" "/tmp/tp_$name.txt" | tail -5
}
tp bf16 auto ""
tp fp8_fp8kv fp8 fp8 PEREGRINE_FP8_FAST_ACCUM=1
[ -n "${MORE:-}" ] && tp fp8_fp8kv_nofast fp8 fp8 PEREGRINE_FP8_FAST_ACCUM=0
if [ "${PROFILE:-1}" = 1 ]; then  # the attention kernels under ncu: the first bf16 8K prefill and 2K / bs 64 decode
  for k in prefill_kernel decode_kernel; do
    timeout 150 ncu --kernel-name "regex:$k" --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section SchedulerStats "$bin/cuda_ops_bench" --kv-cache-only >"${OUT:-/tmp}/ncu_$k.txt" 2>&1
    t "ncu $k rc=$?"
    grep -E "Duration|Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|No Eligible|Issued Warp|Shared Memory Configuration Size|Dynamic Shared" \
      "${OUT:-/tmp}/ncu_$k.txt" | head -30
  done
fi
grep -shE "^memory bandwidth|matmul" /tmp/pp_bf16.txt | head -3
echo "| run | tok/s |"; echo "| --- | --- |"
for f in /tmp/pp_*.txt; do echo "| $(basename "$f" .txt) | $(field "$f" prefill) |"; done
for f in /tmp/lat_*.txt; do echo "| $(basename "$f" .txt) | $(field "$f" decode) |"; done
for f in /tmp/tp_*.txt; do echo "| $(basename "$f" .txt) | $(grep -E "^ +[0-9]+ +[0-9]+ " "$f" | awk '{print $4}' | tr '\n' ' ') |"; done
