#!/usr/bin/env bash
# Prefill-side figures under switch sets, one call (issues 14, 12, 13), 8B shape, random weights: per entry of
# VARIANTS (label:ENV=V,ENV=V or label: for the defaults) the prefill of 8,190 tokens with bf16 and FP8 weights, the
# prefix-cache device and host-tier hits (8,000-token prompt, 7,200 cached), and with TP=1 the offline 1024 in / 400
# out at concurrency CONC (256). Op tests first (OPS filter; none to skip). A table last.
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, scripts/device/carry_light.sh on (off right after);
# there: source .device/carry_w4/env.sh && VARIANTS="new: old:PEREGRINE_ROPE_ROWS=0" scripts/device/prefill_ab.sh
set -uo pipefail
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${OPS:-}" != none ]; then
  timeout 240 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaRope*:CudaKvWrite*:CudaW8Matmul.*}" >/tmp/ops.log 2>&1
  t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]" /tmp/ops.log | head -20
fi
field() { grep -E "^$2 " "$1" | head -1 | sed -E 's/.*: ([0-9.]+) tokens\/s.*/\1/'; }
rows=()
for v in ${VARIANTS:-new:}; do
  label=${v%%:*}; envs=${v#*:}; e=(X=1); [ -n "$envs" ] && IFS=, read -ra e <<<"$envs"
  for q in bf16 fp8; do
    qf=(); [ "$q" != bf16 ] && qf=(--quantization "$q")
    env "${e[@]}" timeout 120 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
      --input-len 8190 --output-len 2 --batch-size 1 --iterations 3 "${qf[@]}" >"/tmp/pp_${label}_$q.txt" 2>&1
    t "$label prefill $q rc=$? $(field "/tmp/pp_${label}_$q.txt" prefill)"
  done
  env "${e[@]}" timeout 150 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights \
    --config "$cfg" --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 --kv-offloading-size 16 \
    --kv-cache-memory-bytes 4294967296 >"/tmp/pc_$label.txt" 2>&1
  t "$label prefix-cache rc=$?"; grep -E '^(TTFT|ratio|host) ' "/tmp/pc_$label.txt"
  tp="-"
  if [ "${TP:-0}" = 1 ]; then
    env "${e[@]}" timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights \
      --config "$cfg" --device cuda --input-len 1024 --output-len 400 --concurrency "${CONC:-256}" >"/tmp/tp_$label.txt" 2>&1
    t "$label throughput rc=$?"; grep -vE "^\[|^$" "/tmp/tp_$label.txt" | tail -4
    tp=$(awk -v c="${CONC:-256}" '$1 == c {print $4; exit}' "/tmp/tp_$label.txt")
  fi
  rows+=("| $label | ${envs:-defaults} | $(field "/tmp/pp_${label}_bf16.txt" prefill) | $(field "/tmp/pp_${label}_fp8.txt" prefill) | $(grep -E '^TTFT' "/tmp/pc_$label.txt" | head -1 | cut -c11-) | $tp |")
done
echo "| variant | switches | prefill 8190 bf16 tok/s | prefill 8190 fp8 tok/s | TTFT (prefix-cache) | c ${CONC:-256} output tok/s |"
printf '%s\n' "${rows[@]}"
