#!/usr/bin/env bash
# Where a prefill step's time goes (issues 14, 12, 13): Nsight Compute, kernel durations only, over `bench latency`
# with an 8,190-token prompt (bf16 and each of QUANTS) and over `bench prefix-cache` (a cold 8,000-token prompt, then
# a hit on its first 7,200 tokens: the hit's 800-token step), each step summed per kernel and per grid
# (ncu_step.py --largest). The same benches run without the profiler first, for the wall times.
# Here: XZ_LEVEL=6 scripts/device/w4_skinny.sh bundle, scripts/device/carry_light.sh on (off right after);
# there: source .device/carry_w4/env.sh && scripts/device/prefill_steps.sh
set -uo pipefail
out=${OUT:-/tmp/prefill_steps}
mkdir -p "$out"
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
nvidia-smi --query-gpu=name --format=csv,noheader; command -v nsys && nsys --version
[ -n "${STEP_ENV:-}" ] && export ${STEP_ENV//,/ }  # switches for every run: A=1,B=2
for q in bf16 ${QUANTS-fp8}; do
  qf=(); [ "$q" != bf16 ] && qf=(--quantization "$q")
  timeout 120 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --input-len "${LEN:-8190}" \
    --output-len 2 --batch-size 1 --iterations 3 "${qf[@]}" >"$out/lat_$q.txt" 2>&1
  t "latency $q rc=$? $(grep -E '^prefill' "$out/lat_$q.txt" | head -1)"
done
if [ "${HIT:-1}" = 1 ]; then
  timeout 120 "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --prompt-len 8000 --cached-len 7200 --repeats 3 >"$out/hit.txt" 2>&1
  t "prefix-cache rc=$?"; grep -iE "ttft|cold|hit" "$out/hit.txt" | head -6
fi
prof() {  # label, then the command
  local label=$1; shift
  timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$out/ncu_$label.csv" "$@" >/dev/null 2>&1
  t "ncu $label rc=$?"
}
for q in bf16 ${QUANTS-fp8}; do
  qf=(); [ "$q" != bf16 ] && qf=(--quantization "$q")
  prof "prefill_$q" "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len "${LEN:-8190}" --output-len 2 --batch-size 1 --iterations 1 "${qf[@]}"
  python3 scripts/device/ncu_step.py "$out/ncu_prefill_$q.csv" "prefill of ${LEN:-8190} tokens, $q" --by-grid \
    --largest 1 || true
done
if [ "${HIT:-1}" = 1 ]; then
  prof hit "$bin/peregrine" bench prefix-cache --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --prompt-len 8000 --cached-len 7200 --repeats 1
  python3 scripts/device/ncu_step.py "$out/ncu_hit.csv" "prefix-cache bench" --by-grid --largest 3 || true
fi
t "done"
