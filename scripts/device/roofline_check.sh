#!/usr/bin/env bash
# Offline throughput on the Llama-3-8B shape (random bf16 weights) against the workload's roofline, both limits
# measured in the same run, with a plot; and TensorRT-LLM's short workloads (128/128, 2048/128) at concurrency 256.
# Here: SHARED=configs BINARIES=peregrine scripts/device/prepare.sh --binaries; there: source .device/carry/env.sh &&
# scripts/device/roofline_check.sh
set -uo pipefail
out=${OUT:-/tmp/roofline_check}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout 240 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
  --device cuda --input-len 1024 --output-len 400 --concurrency "${CONCURRENCY:-1,8,32,64,128,256}" \
  --plot "$out/throughput_1024_400.svg" >"$out/tp_1024_400.txt" 2>&1
echo "1024/400 rc=$?"
for w in 128/128 2048/128; do
  timeout 100 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len "${w%/*}" --output-len "${w#*/}" --concurrency 256 >"$out/tp_${w%/*}_${w#*/}.txt" 2>&1
  echo "$w rc=$?"
done
echo "total: $(( $(date +%s) - start )) s"
echo "== 1024 in / 400 out"; sed -n '/^limits/,$p' "$out/tp_1024_400.txt"
for w in 128_128 2048_128; do echo "== $w at 256"; grep -E "^ +256" "$out/tp_$w.txt"; done
