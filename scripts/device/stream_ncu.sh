#!/usr/bin/env bash
# ncu on the skinny matmul's decode launches (8B shape, random weights, bs 1), rounds and streaming kernels, bf16 and
# W4A16: duration, DRAM throughput, occupancy and its limits, warp stall reasons. Bundle: stream_check.sh bundle.
#   there: source .device/carry_st/env.sh && scripts/device/stream_ncu.sh
set -uo pipefail
out=${OUT:-/tmp/stream_ncu}
mkdir -p "$out"
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
for q in bf16 w4a16; do
  for st in 0 1; do
    flags=()
    [ "$q" = w4a16 ] && flags=(--quantization w4a16)
    PEREGRINE_SKINNY_STREAM=$st PEREGRINE_SKINNY_FOLD=1 timeout 100 ncu --kernel-name regex:skinny --launch-skip 258 \
      --launch-count 5 --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
      "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --input-len 128 --output-len 4 \
      --iterations 1 --batch-size 1 "${flags[@]}" >"$out/ncu_${q}_s$st.txt" 2>&1
    echo "== $q stream=$st rc=$?"
    grep -E "skinny_(gemm|stream)_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit (Registers|Shared Mem)|Grid Size|Registers Per|Dynamic Shared|Waves Per SM|Stall|Warp Cycles Per Issued" \
      "$out/ncu_${q}_s$st.txt" | sed -E 's/\(peregrine::cuda::SkinnyGemmLaunch.*//; s/  +/ /g' | head -80
  done
done
