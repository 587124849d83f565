#!/usr/bin/env bash
# Per-instruction stall samples of the wgmma prefill attention (issue 14): one 8K causal bf16 launch of
# `cuda_ops_bench --kv-cache-only` under ncu with the source counters, its SASS page as CSV into $OUT (each
# instruction with its warp-state samples), and a short summary of where the samples fall.
# Here: scripts/device/prefill_wgmma_bundle.sh, carry_light.sh on; carry .device/carry_kv.
# There: source .device/carry_kv/env.sh && scripts/device/prefill_profile.sh [VAR=value ...]
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
out=${OUT:-/tmp}; mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader
env X=1 "$@" timeout 200 ncu --clock-control none -k regex:prefill_ --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no \
  -o /tmp/prof -f "$bin/cuda_ops_bench" --kv-cache-only >/tmp/ncu_run.txt 2>&1
t "ncu rc=$?"; grep -E "==PROF==|==ERROR==" /tmp/ncu_run.txt | head -5
ncu -i /tmp/prof.ncu-rep --page details --print-units base >"$out/details.txt" 2>&1
grep -E "Duration|Throughput|Warp Cycles|Issued|Eligible" "$out/details.txt" | sed 's/  */ /g' | head -12
ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass >"$out/sass.csv" 2>/tmp/src_err.txt
t "source page rc=$? $(wc -l <"$out/sass.csv") lines"; head -c 600 /tmp/src_err.txt
head -3 "$out/sass.csv" | cut -c1-600
cp /tmp/prof.ncu-rep "$out/" 2>/dev/null
