#!/usr/bin/env bash
# The issues' headline figures in one call (issues 14, 12, 11), 8B shape, random weights, whatever card the call got:
# batch-1 decode for bf16 and each of BS1_QUANTS, the 8,190-token prefill for bf16 and FP8, offline 1024 in / 400 out
# at concurrency CONC for bf16 and for FP8 weights + fp8 KV (their step splits), then (NCU=1) a batch-256 decode
# step under Nsight Compute (the runner's NVTX "decode" ranges only) while the call's time lasts (BUDGET seconds in
# all). Op tests first (OPS; none to skip). BATCH_RUNS adds decode at larger batches (scheme:batch, e.g. w4a16:256);
# TRT TensorRT-LLM's published workloads (below). NCU_FLAGS: the profiled run's extra flags (e.g. --quantization fp8
# --kv-cache-dtype fp8); NCU_RANGE the runner's range profiled (decode; step: steps with prompt tokens). SWEEP=0
# skips the measurements (op tests and profile only).
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, scripts/device/carry_light.sh on (off right after);
# there: source .device/carry_w4/env.sh && OUT=$OUT scripts/device/goals_sweep.sh
set -uo pipefail
out=${OUT:-/tmp/goals_sweep}
mkdir -p "$out"
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - start) )); }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu"
if [ "${OPS:-none}" != none ]; then
  timeout 200 "$bin/cuda_ops_tests" --gtest_filter="$OPS" >"$out/ops.log" 2>&1
  t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]" "$out/ops.log" | head -20
fi
rows=()
# SWEEP=0: only the op tests and the profile (NCU=1).
if [ "${SWEEP:-1}" = 1 ]; then
lat() {  # label, then bench latency's arguments
  local label=$1; shift
  timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda "$@" >"$out/lat_$label.txt" 2>&1
  local rc=$?
  t "$label rc=$rc"
  grep -E "^(decode|prefill|memory|limits)" "$out/lat_$label.txt" | head -3
}
for q in bf16 ${BS1_QUANTS-w4a16 w8a16 fp8}; do
  qf=(); [ "$q" != bf16 ] && qf=(--quantization "$q")
  lat "bs1_$q" --input-len 1024 --output-len 64 --batch-size 1 --iterations 2 "${qf[@]}"
done
# BATCH_RUNS: scheme:batch pairs for decode at larger batches (issue 11's W4A16 at 64 / 256 beside bf16).
for r in ${BATCH_RUNS:-}; do
  q=${r%%:*}; bs=${r##*:}; qf=(); [ "$q" != bf16 ] && qf=(--quantization "$q")
  lat "bs${bs}_$q" --input-len 1024 --output-len 16 --batch-size "$bs" --iterations 2 "${qf[@]}"
done
for q in bf16 fp8; do
  qf=(); [ "$q" != bf16 ] && qf=(--quantization "$q")
  lat "prefill_$q" --input-len 8190 --output-len 2 --batch-size 1 --iterations 3 "${qf[@]}"
done
# PREFILL_ENVS: switch sets (ENV=V,ENV=V) for another FP8 prefill each, beside the default one.
n=0
for e in ${PREFILL_ENVS:-}; do
  n=$((n + 1))
  IFS=, read -ra ev <<<"$e"
  env "${ev[@]}" timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len 8190 --output-len 2 --batch-size 1 --iterations 3 --quantization fp8 >"$out/lat_prefill_fp8_v$n.txt" 2>&1
  t "prefill fp8 $e rc=$? $(grep -E '^prefill' "$out/lat_prefill_fp8_v$n.txt")"
done
for q in bf16 fp8; do
  qf=(); [ "$q" != bf16 ] && qf=(--quantization fp8 --kv-cache-dtype fp8)
  timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency "${CONC:-256}" "${qf[@]}" >"$out/tp_$q.txt" 2>&1
  t "throughput $q rc=$?"; grep -vE "^\[|^$" "$out/tp_$q.txt" | tail -4
done
# TRT: TensorRT-LLM's published workloads (issue 14), input:output:concurrency[:scheme] entries, e.g.
# TRT="128:128:1024 2048:128:256 1000:1000:448 1000:1000:448:fp8" (fp8: FP8 weights + fp8 KV), while time lasts.
for w in ${TRT:-}; do
  IFS=: read -r il ol cc sch <<<"$w"
  [ "$(left)" -gt 90 ] || { t "TRT $w skipped: out of time"; continue; }
  qf=(); [ "${sch:-bf16}" != bf16 ] && qf=(--quantization fp8 --kv-cache-dtype fp8)
  timeout "$(( $(left) - 30 ))" "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights \
    --config "$cfg" --device cuda --input-len "$il" --output-len "$ol" --concurrency "$cc" "${qf[@]}" \
    >"$out/trt_${il}_${ol}_${cc}_${sch:-bf16}.txt" 2>&1
  t "TRT $w rc=$?"; grep -vE "^\[|^$" "$out/trt_${il}_${ol}_${cc}_${sch:-bf16}.txt" | tail -3
done
fi
if [ "${NCU:-0}" = 1 ] && [ "$(left)" -gt 60 ]; then
  # Only the runner's "decode" NVTX ranges (warm-up and prefill steps are named otherwise), LAUNCHES launches, through
  # `bench throughput`.
  # Decode steps of fewer than BS / 2 sequences (the first requests' before the rest arrive) are named otherwise.
  PEREGRINE_TRACE_DECODE_MIN_SEQS=$(( ${BS:-256} / 2 )) timeout "$(( $(left) - 15 ))" ncu --clock-control none --nvtx --nvtx-include "${NCU_RANGE:-decode}/" --launch-count "${LAUNCHES:-1200}" \
    --metrics gpu__time_duration.sum --csv --log-file "$out/ncu_decode.csv" \
    "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" --device cuda \
    --input-len 1024 --output-len 48 --concurrency "${BS:-256}" ${NCU_FLAGS:-} >/dev/null 2>&1
  t "ncu rc=$?"
  python3 scripts/device/ncu_step.py "$out/ncu_decode.csv" "one ${NCU_RANGE:-decode} step (bs ${BS:-256}, ctx ~1K${NCU_FLAGS:+, $NCU_FLAGS})" --by-grid || true
  gzip -f "$out/ncu_decode.csv"
fi
[ "${SWEEP:-1}" = 1 ] || { t done; exit 0; }
val() { grep -E "^$2" "$out/$1" 2>/dev/null | head -1 | sed -E 's/^[a-z]+ +//; s/ +/ /g'; }
echo
echo "| $gpu | figure |"
echo "| --- | --- |"
echo "| limits | $(val lat_bs1_bf16.txt memory) |"
for q in bf16 ${BS1_QUANTS-w4a16 w8a16 fp8}; do echo "| decode bs 1 $q | $(val "lat_bs1_$q.txt" decode) |"; done
for r in ${BATCH_RUNS:-}; do q=${r%%:*}; bs=${r##*:}; echo "| decode bs $bs $q | $(val "lat_bs${bs}_$q.txt" decode) |"; done
for q in bf16 fp8; do echo "| prefill 8190 $q | $(val "lat_prefill_$q.txt" prefill) |"; done
n=0
for e in ${PREFILL_ENVS:-}; do n=$((n + 1)); echo "| prefill 8190 fp8, $e | $(val "lat_prefill_fp8_v$n.txt" prefill) |"; done
for w in ${TRT:-}; do
  IFS=: read -r il ol cc sch <<<"$w"
  echo "| TRT $il/$ol c $cc ${sch:-bf16} | $(awk -v c="$cc" '$1 == c {print $4 " output tok/s, " $NF " of roof"; exit}' "$out/trt_${il}_${ol}_${cc}_${sch:-bf16}.txt" 2>/dev/null) |"
done
for q in bf16 fp8; do
  echo "| c ${CONC:-256} $q | $(awk -v c="${CONC:-256}" '$1 == c {print $4 " output tok/s, " $6 " steps, " $7 " ms a step, forward " $8 ", " $NF " of roof"; exit}' "$out/tp_$q.txt") |"
done
t done
