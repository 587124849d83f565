#!/usr/bin/env bash
# Where a decode step's time goes on the H200 (issue 14): bench latency at the given batch sizes (bf16 and any
# QUANTS), then Nsight Compute on one step per PROFILE entry (scheme:batch), with each kernel's time and DRAM bytes
# read, summed per kernel and per matmul grid (rate = bytes / time), beside the step's wall time.
# Here: BINARIES="peregrine cuda_ops_tests" SHARED=configs scripts/device/prepare.sh --binaries; there:
# source .device/carry/env.sh && scripts/device/decode_profile.sh. VARIANTS="ENV=VALUE@scheme:batch ..." adds benches
# with a switch set. CTX sets the bench's input length (default 1024), PCTX the profiled run's (default 128).
set -uo pipefail
out=${OUT:-/tmp/decode_profile}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
[ -n "${TESTS:-}" ] && { timeout 200 "$bin/cuda_ops_tests" --gtest_filter="$TESTS" >"$out/tests.log" 2>&1;
  echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]" "$out/tests.log" | head -30; }
bench() {  # label scheme batch [env]
  local label=$1 q=$2 bs=$3 qf="" ol=32; shift 3
  [ "$q" != bf16 ] && qf="--quantization $q"
  [ "$bs" -gt 16 ] && ol=8
  env "$@" timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len "${CTX:-1024}" --output-len $ol --batch-size "$bs" --iterations "${ITER:-2}" $qf >"$out/lat.txt" 2>&1
  local rc=$?
  { echo "== $label rc=$rc"; cat "$out/lat.txt"; } >>"$out/latency.log"
  printf '| %s | %s |\n' "$label" "$(grep -E '^decode' "$out/lat.txt" | tr -s ' ' | head -1)" >>"$out/table.md"
  rm -f "$out/lat.txt"
}
for spec in ${BENCH:-bf16:1}; do bench "$spec" "${spec%%:*}" "${spec##*:}"; done
for v in ${VARIANTS:-}; do e=${v%@*}; s=${v##*@}; bench "$e $s" "${s%%:*}" "${s##*:}" "$e"; done
grep -m1 "memory bandwidth" "$out/latency.log"
for spec in ${PROFILE-bf16:1}; do
  q=${spec%%:*}; bs=${spec##*:}; qf=""; [ "$q" != bf16 ] && qf="--quantization $q"
  env ${PROFILE_ENV:-} timeout 240 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    --log-file "$out/ncu_${q}_$bs.csv" "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len "${PCTX:-128}" --output-len 3 --batch-size "$bs" --iterations 1 $qf >/dev/null 2>&1
  echo "== ncu $q bs $bs rc=$?"
  python3 scripts/device/ncu_step.py "$out/ncu_${q}_$bs.csv" "one $q decode step (bs=$bs, ctx ~${PCTX:-128})" --by-grid || true
done
echo "total: $(( $(date +%s) - start )) s"
echo "| run | decode |"; echo "| --- | --- |"; cat "$out/table.md"
