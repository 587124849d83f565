#!/usr/bin/env bash
# Attention kernel variants measured side by side (issue 14; the experiment's switches PEREGRINE_PREFILL_VARIANT and
# PEREGRINE_DECODE_VARIANT, see attention_prefill.cu / attention_decode.cu): the attention op tests under each, the
# kernels alone (cuda_ops_bench --kv-cache-only), then the 8B shape end to end with the fastest prefill variant:
# prefill 8,190 (bf16, FP8) and offline 1024 / 400 at concurrency 256, against the defaults in the same call.
# Here: scripts/device/kv_attn.sh bundle, scripts/device/carry_light.sh on (off right after).
# There: source .device/carry_kv/env.sh && scripts/device/attn_variants.sh   (carry .device/carry_kv)
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
for v in ${PVARS:-1 2 3 4}; do
  PEREGRINE_PREFILL_VARIANT=$v PEREGRINE_DECODE_VARIANT=1 timeout 100 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaAttention.*' >/tmp/ops_$v.log 2>&1
  t "attention tests, prefill variant $v, decode variant 1: rc=$? $(grep -cE '^\[       OK' /tmp/ops_$v.log) ok"
  grep -E "^\[  FAILED|Failure" /tmp/ops_$v.log | head -6
done
row() { grep -E "$2" "$1" | head -1 | sed -E 's/^\| *//; s/ *\|.*$//' | grep -oE "[0-9.]+ (us|ms)" | head -1; }
for pv in 0 ${PVARS:-1 2 3 4}; do
  dv=$([ "$pv" = 0 ] && echo 0 || echo 1)
  PEREGRINE_PREFILL_VARIANT=$pv PEREGRINE_DECODE_VARIANT=$dv timeout 120 "$bin/cuda_ops_bench" --kv-cache-only \
    >/tmp/kv_$pv.txt 2>&1
  t "kv bench prefill $pv decode $dv rc=$?: prefill 8K $(row /tmp/kv_$pv.txt 'prefill attention 8K causal bf16'); decode 2K bs64 $(row /tmp/kv_$pv.txt 'ctx 2K bs 64 bf16'), 8K bs8 $(row /tmp/kv_$pv.txt 'ctx 8K bs 8 bf16'), 32K bs1 $(row /tmp/kv_$pv.txt 'ctx 32K bs 1 bf16'), 32K bs8 $(row /tmp/kv_$pv.txt 'ctx 32K bs 8 bf16')"
done
best=0; best_ms=1e9
for pv in 0 ${PVARS:-1 2 3 4}; do
  ms=$(row /tmp/kv_$pv.txt 'prefill attention 8K causal bf16' | grep -oE "[0-9.]+")
  [ -n "$ms" ] && awk "BEGIN{exit !($ms < $best_ms)}" && { best=$pv; best_ms=$ms; }
done
t "fastest prefill variant: $best ($best_ms ms)"
field() { grep -E "^$2" "$1" | grep -oE "[0-9.]+ tokens/s" | grep -oE "[0-9.]+" | head -1; }
pp() {  # pp NAME LEN [VAR=value...]
  local name=$1 len=$2; shift 2
  env X=1 "$@" timeout 120 "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len "$len" --output-len 2 --batch-size 1 --iterations 2 ${Q:+--quantization $Q} \
    >"/tmp/pp_$name.txt" 2>&1
  t "prefill $len $name rc=$?: $(field "/tmp/pp_$name.txt" prefill) tok/s"
}
left() { [ $(( $(date +%s) - start )) -lt "$1" ]; }  # true while fewer than $1 seconds have passed
Q= pp bf16_v0 8190
Q= pp bf16_v$best 8190 PEREGRINE_PREFILL_VARIANT=$best
tp() {  # tp NAME [VAR=value...]  (BUDGET: --max-num-batched-tokens)
  local name=$1; shift
  env X=1 "$@" timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency "${CONC:-256}" ${BUDGET:+--max-num-batched-tokens $BUDGET} \
    >"/tmp/tp_$name.txt" 2>&1
  t "throughput $name rc=$?: $(grep -E "^ +[0-9]+ +[0-9]+ " "/tmp/tp_$name.txt" | awk '{print $4 " tok/s, " $7 " ms a step"}' | tr '\n' ' ')"
}
left ${DEADLINE:-380} && tp bf16_p0_d0
left ${DEADLINE:-380} && tp bf16_p${best}_d1 PEREGRINE_PREFILL_VARIANT=$best PEREGRINE_DECODE_VARIANT=1
if [ "${SAN:-1}" = 1 ] && left ${DEADLINE:-380}; then
  PEREGRINE_PREFILL_VARIANT=$best PEREGRINE_DECODE_VARIANT=1 timeout 150 compute-sanitizer --tool memcheck \
    --error-exitcode 9 "$bin/cuda_ops_tests" --gtest_filter='CudaAttention.MixedBatchBf16Gqa4:CudaAttention.GqaRatios*' \
    >/tmp/san.log 2>&1
  t "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -3
fi
left ${DEADLINE:-380} && tp bf16_p0_d1 PEREGRINE_DECODE_VARIANT=1
left ${DEADLINE:-380} && Q=fp8 pp fp8_v0 8190
left ${DEADLINE:-380} && Q=fp8 pp fp8_v$best 8190 PEREGRINE_PREFILL_VARIANT=$best
left ${DEADLINE:-380} && BUDGET=16384 tp bf16_p${best}_d1_16k PEREGRINE_PREFILL_VARIANT=$best PEREGRINE_DECODE_VARIANT=1
grep -hE "^\| (decode|prefill) attention" /tmp/kv_0.txt | grep bf16 | head -6
