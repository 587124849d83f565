#!/usr/bin/env bash
# One device call for the W4A16 tensor-core GEMM at 16 < M <= 512 (issue 11, w4_gemm.cuh): its tests against ref
# (every element, rows across M), a per-shape timing beside bf16 (and the old dequantize + cuBLASLt path, and the
# split rule's block target as given in W4_TARGETS), then the Llama-3-8B shape with random weights, bf16 beside
# W4A16 at batch 1, 16, 64 and 256 (1K context), a table last.
# Here: BINARIES="peregrine cuda_ops_tests" SHARED=configs scripts/device/prepare.sh --binaries; there:
# source .device/carry/env.sh && scripts/device/w4_gemm_check.sh (BUDGET_S bounds the benches; TIMING=0 skips the
# timing runs; BATCHES picks the batch sizes; W4_TARGETS / W4_BMS add timings with those split targets / M tiles;
# W4_VARIANTS="ENV=VALUE@batch ..." adds W4A16 benches with a switch set).
set -uo pipefail
out=${OUT:-/tmp/w4_gemm_check}
mkdir -p "$out"
start=$(date +%s)
budget=${BUDGET_S:-300}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
bin=.device/bin
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout 150 "$bin/cuda_ops_tests" --gtest_filter="${TESTS:-CudaQuantMatmul.*:CudaMatmul.*}" >"$out/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|M [0-9]|FAILED  \]" "$out/tests.log" | head -30
if [ "${TIMING:-1}" != 0 ]; then
  timing() {  # name, then env assignments
    local name=$1; shift
    env "$@" timeout 90 "$bin/cuda_ops_tests" --gtest_also_run_disabled_tests --gtest_filter='*W4GemmTiming' \
      2>&1 | grep -E "^\|" >"$out/timing_$name.md"
    echo "== timing $name ($*)"; cat "$out/timing_$name.md"
  }
  timing new
  [ "${OLD:-1}" != 0 ] && timing old PEREGRINE_W4_MMA=0
  for bm in ${W4_BMS:-}; do timing "bm$bm" PEREGRINE_W4_MMA_BM=$bm; done
  for tgt in ${W4_TARGETS:-}; do timing "blocks$tgt" PEREGRINE_W4_MMA_BLOCKS=$tgt; done
fi
for m in ${NCU_M:-}; do  # Nsight Compute on the kernel's first launch at this M (q/o shape): where it stalls
  PEREGRINE_W4_TIMING_M=$m timeout 120 ncu --clock-control none -k regex:w4_gemm_kernel --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    "$bin/cuda_ops_tests" --gtest_also_run_disabled_tests --gtest_filter='*W4GemmTiming' >"$out/ncu_m$m.txt" 2>&1
  echo "== ncu M=$m rc=$?"; grep -E "Duration|Throughput|Stall|Issue|Eligible|Registers|Occupancy|Pipe|Warp Cycles|Bank" \
    "$out/ncu_m$m.txt" | tr -s ' ' | head -60
done
cfg=.device/shared/configs/llama-3-8b.json
if [ -n "${SASS:-}" ]; then  # opcode counts of one instantiation (SASS=<part of the mangled name>)
  cuobjdump -sass "$bin/cuda_ops_tests" 2>/dev/null | awk -v pat="$SASS" '/Function :/ { on = index($0, pat) > 0 } on' \
    >"$out/sass.txt"
  echo "== sass $SASS: $(grep -c "HMMA" "$out/sass.txt") HMMA of $(grep -cE "^ +/\*[0-9a-f]{4}\*/" "$out/sass.txt") instructions"
  grep -oE "^ +/\*[0-9a-f]{4}\*/ +[A-Z0-9_]+" "$out/sass.txt" | awk '{print $2}' | sort | uniq -c | sort -rn | head -24 | tr '\n' ' '
  echo
fi
for spec in ${NCU_BENCH:-}; do  # scheme:batch — kernel times of one decode step (ncu_step.py --by-grid)
  q=${spec%%:*}; bs=${spec##*:}; qf=""; [ "$q" != bf16 ] && qf="--quantization $q"
  timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$out/ncu_${q}_$bs.csv" "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len 128 --output-len 3 --batch-size "$bs" --iterations 1 $qf >/dev/null 2>&1
  echo "== ncu $q bs $bs rc=$?"
  python3 scripts/device/ncu_step.py "$out/ncu_${q}_$bs.csv" "one $q decode step (bs=$bs, ctx ~130)" --by-grid || true
done
bench() {  # name, then bench latency flags
  local name=$1; shift
  if [ $(( $(date +%s) - start )) -gt "$budget" ]; then echo "$name: skipped (budget)"; return; fi
  timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --iterations 1 "$@" \
    >"$out/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E "decode|prefill" "$out/$name.txt" | tr -s ' ' | tr '\n' ' ')"
}
for bs in ${BATCHES:-1 16 64 256}; do
  ol=8; [ "$bs" -le 16 ] && ol=32
  bench "bf16_bs$bs" --input-len 1024 --output-len $ol --batch-size "$bs"
  bench "w4_bs$bs" --input-len 1024 --output-len $ol --batch-size "$bs" --quantization w4a16
done
for v in ${W4_VARIANTS:-}; do  # ENV=VALUE@batch: W4A16 again with a tuning/comparison switch
  e=${v%@*}; bs=${v##*@}; ol=8; [ "$bs" -le 16 ] && ol=32
  ( export "$e"; bench "w4_${e}_bs$bs" --input-len 1024 --output-len $ol --batch-size "$bs" --quantization w4a16 )
done
echo "total: $(( $(date +%s) - start )) s"
echo "| batch | bf16 decode tok/s (ms/step) | W4A16 decode tok/s (ms/step) | W4A16 / bf16 |"
for bs in ${BATCHES:-1 16 64 256}; do
  b=$(grep -oE "decode +[0-9.]+ tokens/s \([0-9.]+ ms/step\)" "$out/bf16_bs$bs.txt" 2>/dev/null | grep -oE "[0-9.]+ tokens/s \([0-9.]+ ms" | head -1)
  w=$(grep -oE "decode +[0-9.]+ tokens/s \([0-9.]+ ms/step\)" "$out/w4_bs$bs.txt" 2>/dev/null | grep -oE "[0-9.]+ tokens/s \([0-9.]+ ms" | head -1)
  bt=${b%% *}; wt=${w%% *}
  r=$(awk -v a="$wt" -v b="$bt" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else print "-" }')
  echo "| $bs | $b) | $w) | $r |"
done
