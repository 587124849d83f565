#!/usr/bin/env bash
# Quick views (issues 14, 12), 8B shape, random weights, kernel durations only (one metric: no replays). OPS: op tests;
# ATTN_ENVS: decode attention's switch sets to compare (see below).
#  1. FP8 prefill of 8,190 tokens under each PEREGRINE_PREQUANT value of PREQUANTS (wall time) and NCU_PREQUANTS
#     (only the kernels around the W8A8 matmuls profiled, KERNELS regex, the rest at speed; summed per kernel);
#  2. (DECODE=1) one bf16 decode step at batch BS (256) and context ~1K: only launches inside the runner's NVTX
#     "decode" ranges profiled (LAUNCHES of them), summed per kernel and grid.
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, scripts/device/carry_light.sh on (off right after);
# TP: offline throughput runs (below).
# there: source .device/carry_w4/env.sh && OUT=$OUT scripts/device/step_profile.sh
set -uo pipefail
out=${OUT:-/tmp/step_profile}
mkdir -p "$out"
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
nvidia-smi --query-gpu=name --format=csv,noheader
sum_kernels() {  # csv, label
  python3 - "$1" "$2" <<'EOF'
import collections, csv, sys
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
agg, n, tot = collections.OrderedDict(), 0, 0.0
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1e-3)
    k = r["Kernel Name"].split("(")[0][:70]
    c, s = agg.get(k, (0, 0.0))
    agg[k] = (c + 1, s + v)
    n += 1
    tot += v
print(f"{sys.argv[2]}: {n} launches, {tot:.0f} us")
for k, (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:10]:
    print(f"  {s:9.0f} us {c:5d} x {k}")
EOF
}
if [ -n "${OPS:-}" ]; then
  timeout 120 "$bin/cuda_ops_tests" --gtest_filter="$OPS" >"$out/ops.log" 2>&1
  t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]" "$out/ops.log" | head -10
fi
# Decode attention (cuda_ops_bench --kv-cache-only, when carried: EXTRA_BINS=bench/cuda/cuda_ops_bench) under each
# switch set of ATTN_ENVS (ENV=V,ENV=V; "-" for none, e.g. "- PEREGRINE_DECODE_WAVES=0"), and the attention op tests
# under each set but the first.
first=1
n=0
for e in ${ATTN_ENVS:-}; do
  n=$((n + 1))
  ev=(X=1); [ "$e" != - ] && IFS=, read -ra ev <<<"$e"
  if [ "$first" = 0 ]; then
    env "${ev[@]}" timeout 120 "$bin/cuda_ops_tests" --gtest_filter='CudaAttention*:CudaKvQuant*' \
      >"$out/attn_tests_$n.log" 2>&1
    t "attention tests, $e: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/attn_tests_$n.log" | tr '\n' ' ')"
  fi
  first=0
  [ -x "$bin/cuda_ops_bench" ] || continue
  env "${ev[@]}" timeout 120 "$bin/cuda_ops_bench" --kv-cache-only "$out/attn_$n.md" >"$out/attn_$n.log" 2>&1
  t "cuda_ops_bench --kv-cache-only, $e: rc=$?"
  grep -iE "decode" "$out/attn_$n.md" | head -12
done
# FP8 prefill of 8,190 tokens under each PEREGRINE_PREQUANT value (PREQUANTS; "-" for unset), wall time.
for v in ${PREQUANTS:--}; do
  e=(X=1); [ "$v" != - ] && e=(PEREGRINE_PREQUANT="$v")
  env "${e[@]}" timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len 8190 --output-len 2 --batch-size 1 --iterations 3 --quantization fp8 >"$out/lat_prequant_$v.txt" 2>&1
  t "fp8 prefill PEREGRINE_PREQUANT=$v rc=$? $(grep -E '^prefill' "$out/lat_prequant_$v.txt")"
done
# The same under ncu, only the kernels around the W8A8 matmuls profiled (KERNELS regex; the rest run at speed).
for v in ${NCU_PREQUANTS:-}; do
  e=(X=1); [ "$v" != - ] && e=(PEREGRINE_PREQUANT="$v")
  env "${e[@]}" timeout 150 ncu --clock-control none --kernel-name "regex:${KERNELS:-act_quant|silu|rms_norm}" \
    --metrics gpu__time_duration.sum --csv --log-file "$out/ncu_prequant_$v.csv" "$bin/peregrine" bench latency \
    --random-weights --config "$cfg" --device cuda --input-len 8190 --output-len 2 --batch-size 1 --iterations 1 \
    --quantization fp8 >/dev/null 2>&1
  t "ncu fp8 prefill PEREGRINE_PREQUANT=$v rc=$?"
  sum_kernels "$out/ncu_prequant_$v.csv" "fp8 prefill (all steps), PEREGRINE_PREQUANT=$v"
done
# TP: offline 1024 / 400 at concurrency 256 for each scheme listed (bf16; fp8 = FP8 weights + fp8 KV), with the
# bench's split of the time into steps with prompt tokens and pure decode steps.
for q in ${TP:-}; do
  qf=(); [ "$q" != bf16 ] && qf=(--quantization fp8 --kv-cache-dtype fp8)
  timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency 256 "${qf[@]}" >"$out/tp_$q.txt" 2>&1
  t "throughput c 256 $q rc=$?"; grep -vE "^\[|^$" "$out/tp_$q.txt" | tail -4
done
if [ "${DECODE:-1}" = 1 ]; then
  # Only kernels inside the runner's "decode" ranges (Backend::trace_push, NVTX): warm-up steps are "warmup" and
  # steps with prompt tokens "step". Through `bench throughput`, whose first pure decode step is the whole batch
  # (`bench latency`'s decode pass begins with single-sequence steps over its cached prompts).
  timeout "${DECODE_TIMEOUT:-200}" ncu --clock-control none --nvtx --nvtx-include "decode/" \
    --launch-count "${LAUNCHES:-1200}" --metrics gpu__time_duration.sum --csv --log-file "$out/ncu_decode.csv" \
    "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" --device cuda \
    --input-len 1024 --output-len 4 --concurrency "${BS:-256}" >"$out/lat_decode.txt" 2>&1
  t "ncu decode bs ${BS:-256} rc=$?"
  python3 scripts/device/ncu_step.py "$out/ncu_decode.csv" "one bf16 decode step (bs ${BS:-256}, ctx ~1K)" --by-grid || true
  gzip -f "$out/ncu_decode.csv"
fi
t done
