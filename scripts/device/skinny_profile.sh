#!/usr/bin/env bash
# Where the W4A16 skinny kernel's time goes at bs 1 (issue 11): Nsight Compute's full set on a few decode launches
# (q/k/v, o, gate/up, down) with source-level SASS counters, beside bf16 and W4A16 decode figures of the same call.
# Here: scripts/device/skinny_bundles.sh (its .device/carry_k1: peregrine, cuda_ops_tests and the configs) and
# scripts/device/carry_light.sh on; there: source .device/carry_k1/env.sh && scripts/device/skinny_profile.sh
# (ENGINE_TESTS needs engine_model_tests and the model's weights too: carry_k2, whose model goes to models/pycoder-tiny).
# TESTS / ENGINE_TESTS: gtest filters run first. BENCH: the decode figures (see below). NCU=0 skips the profiles;
# PROFILE_ENVS="VAR=VALUE ..." one profile per setting (X=1: none). QUANT (default w4a16) picks the scheme profiled;
# SKIP / COUNT the skinny launches skipped and profiled. The profiles are left out once the call
# has run 330 s (a device call has 600).
# Out: details_N.csv and source_N.csv (ncu's pages per profile; read them here), and a short table on stdout.
set -uo pipefail
out=${OUT:-/tmp/skinny_profile}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
if [ -n "${TESTS:-}" ]; then
  timeout 150 "$bin/cuda_ops_tests" --gtest_filter="$TESTS" >"$out/tests.log" 2>&1
  t "cuda_ops_tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]" "$out/tests.log" | head -20
fi
if [ -n "${ENGINE_TESTS:-}" ]; then
  timeout 200 "$bin/engine_model_tests" --gtest_filter="$ENGINE_TESTS" >"$out/engine_tests.log" 2>&1
  t "engine_model_tests rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|SKIPPED|^\[       OK" "$out/engine_tests.log" | head -20
fi
lat() {  # label quant [env...]
  local label=$1 q=$2 qf=""; shift 2
  [ "$q" != bf16 ] && qf="--quantization $q"
  env "$@" timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len 1024 --output-len 64 --batch-size 1 --iterations 2 $qf >"$out/lat_$label.txt" 2>&1
  t "latency $label rc=$? $(grep -E '^decode' "$out/lat_$label.txt" | head -1)"
}
# BENCH: label:scheme[:ENV=VALUE], e.g. "bf16:bf16 w4:w4a16 w4nofold:w4a16:PEREGRINE_SKINNY_FOLD=0"
for spec in ${BENCH:-bf16:bf16 w4a16:w4a16}; do
  IFS=: read -r label scheme envv <<<"$spec"
  lat "$label" "$scheme" "${envv:-X=1}"
done
[ "${NCU:-1}" = 0 ] && exit 0
q=${QUANT:-w4a16}
n=0
for penv in ${PROFILE_ENVS:-X=1}; do  # one profile per switch setting: details_N.csv, source_N.csv
  n=$((n + 1))
  [ $(( $(date +%s) - start )) -gt 330 ] && { t "profile $n ($penv) left out: no time"; continue; }
  env "$penv" timeout 150 ncu --kernel-name regex:'skinny_gemm_kernel' --launch-skip "${SKIP:-129}" \
    --launch-count "${COUNT:-4}" --set full --import-source yes -f -o "$out/prof" "$bin/peregrine" bench latency \
    --random-weights --config "$cfg" --device cuda --input-len 128 --output-len 4 --batch-size 1 --iterations 1 \
    --quantization "$q" >"$out/ncu_run_$n.txt" 2>&1
  t "ncu $n ($penv) rc=$?"; tail -2 "$out/ncu_run_$n.txt"
  ncu --import "$out/prof.ncu-rep" --page details --csv >"$out/details_$n.csv" 2>/dev/null
  ncu --import "$out/prof.ncu-rep" --page source --csv --print-source sass >"$out/source_$n.csv" 2>/dev/null
  rm -f "$out/prof.ncu-rep"
  python3 - "$out/details_$n.csv" <<'EOF2'
import csv, sys
want = ["Duration", "DRAM Throughput", "Achieved Occupancy", "Registers Per Thread", "Executed Instructions",
        "Issue Slots Busy", "Warp Cycles Per Issued Instruction", "Grid Size", "SM Frequency",
        "No Eligible", "Active Warps Per Scheduler", "Eligible Warps Per Scheduler", "L1/TEX Hit Rate"]
kernels = {}
for r in csv.DictReader(open(sys.argv[1])):
    key = (r.get("ID"), r.get("Kernel Name", "")[:70])
    kernels.setdefault(key, {})[r.get("Metric Name")] = (r.get("Metric Value"), r.get("Metric Unit"))
for (kid, name), m in kernels.items():
    print(f"kernel {kid} {name}")
    print("  " + "; ".join(f"{w} {m[w][0]} {m[w][1]}" for w in want if w in m))
EOF2
done
t "done"
