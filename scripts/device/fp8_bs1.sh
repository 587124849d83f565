#!/usr/bin/env bash
# FP8 W8A8 decode at batch 1 beside bf16 (issue 12: >= 1.8x bf16), 8B shape, and where an FP8 step's time goes
# (ncu: each kernel's time and DRAM bytes in one decode step). Uses .device/bin/peregrine and
# .device/shared/configs/llama-3-8b.json from a bundle that has them (scripts/device/kv_attn.sh bundle).
# There: scripts/device/fp8_bs1.sh [NCU=0 skips ncu, LAT=0 the latency runs]
set -uo pipefail
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
for q in $([ "${LAT:-1}" = 1 ] && echo none fp8); do
  args=(); [ "$q" != none ] && args=(--quantization "$q")
  timeout 120 "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights --config "$cfg" --device cuda \
    --input-len 1024 --output-len 64 --batch-size 1 --iterations 2 "${args[@]}" >"/tmp/lat_$q.txt" 2>&1
  t "latency $q rc=$?: $(grep -E '^decode' "/tmp/lat_$q.txt" | head -1)"
done
if [ "${NCU:-1}" = 1 ]; then
  timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    --log-file /tmp/ncu_fp8.csv "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 128 --output-len 3 --batch-size 1 --iterations 1 --quantization fp8 >/tmp/ncu_run.txt 2>&1
  t "ncu rc=$?"
  python3 scripts/device/ncu_step.py /tmp/ncu_fp8.csv "one FP8 decode step (bs=1, ctx ~130)" | head -40
fi
