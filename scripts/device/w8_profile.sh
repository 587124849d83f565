#!/usr/bin/env bash
# Where the 8-bit skinny kernel's time goes at batch 1 (8B shape, FP8 W8A8 fused): ncu's speed-of-light, occupancy,
# warp-state and memory sections for one layer's four launches (q/k/v with the norm, o_proj, gate/up pair, down_proj)
# and the LM head, with the tiles a block takes as the launcher picks them and at 1 (PEREGRINE_W8_TILES_PER_BLOCK).
# Here: scripts/device/kv_attn.sh bundle, carry_light.sh on. There: source .device/carry_kv/env.sh &&
# scripts/device/w8_profile.sh
set -uo pipefail
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
for tpb in auto 1; do
  envs=(); [ "$tpb" != auto ] && envs=(PEREGRINE_W8_TILES_PER_BLOCK=$tpb)
  env "${envs[@]}" timeout 150 ncu --clock-control none --kernel-name regex:skinny_w8a8 --launch-skip 130 \
    --launch-count 4 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights \
    --config "$cfg" --device cuda --input-len 128 --output-len 3 --batch-size 1 --iterations 1 --quantization fp8 \
    >"/tmp/prof_$tpb.txt" 2>&1
  echo "== tiles per block $tpb (rc=$?)"
  grep -E "skinny_w8a8_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Stall|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Issue Slots Busy|Dynamic Shared|stalled|Block Limit" \
    "/tmp/prof_$tpb.txt" | sed -E 's/ {2,}/ /g' | cut -c1-400 | head -150
done
