#!/usr/bin/env bash
# Where a concurrency-256 run's time goes (issue 14): the offline 1024 in / 400 out run (its step split), a decode
# step at batch 256 and context ~1K under Nsight Compute (kernel durations and DRAM bytes, per kernel and per grid),
# and that bench's wall time per decode step beside it. Op tests first (OPS filter; none to skip).
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, scripts/device/carry_light.sh on (off right after);
# there: source .device/carry_w4/env.sh && scripts/device/c256_steps.sh
# QUANTS: schemes besides bf16 for the offline run (e.g. "fp8"); KV: --kv-cache-dtype for those (e.g. fp8).
set -uo pipefail
out=${OUT:-/tmp/c256_steps}
mkdir -p "$out"
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${OPS:-none}" != none ]; then
  timeout 240 "$bin/cuda_ops_tests" --gtest_filter="$OPS" >"$out/ops.log" 2>&1
  t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]" "$out/ops.log" | head -20
fi
for q in bf16 ${QUANTS:-}; do
  qf=(); [ "$q" != bf16 ] && qf=(--quantization "$q" --kv-cache-dtype "${KV:-auto}")
  timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency "${CONC:-256}" "${qf[@]}" >"$out/tp_$q.txt" 2>&1
  t "throughput $q rc=$?"; grep -vE "^\[|^$" "$out/tp_$q.txt" | tail -5
done
BS=${BS:-256}
timeout 120 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --input-len 1024 \
  --output-len 16 --batch-size "$BS" --iterations 2 >"$out/lat.txt" 2>&1
t "latency bs $BS rc=$?"; grep -E "^(decode|prefill|step|forward)" "$out/lat.txt" | head -6
if [ "${NCU:-1}" = 1 ]; then
  timeout 300 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --csv --log-file "$out/ncu_decode.csv" "$bin/peregrine" bench latency --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 3 --batch-size "$BS" --iterations 1 >/dev/null 2>&1
  t "ncu rc=$?"
  python3 scripts/device/ncu_step.py "$out/ncu_decode.csv" "one bf16 decode step (bs $BS, ctx ~1K)" --by-grid || true
  gzip -f "$out/ncu_decode.csv"
fi
[ -n "${OUT:-}" ] || true
t done
