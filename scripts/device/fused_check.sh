#!/usr/bin/env bash
# Fused decode matmuls (norm prologue, residual and SiLU-mul epilogues in the skinny kernel) on the H200, from
# binaries built here (scripts/device/fused_bundle.sh). Two calls:
#   1: tar -xJf .device/carry_f1/bundle.tar.xz -C .device && source .device/carry_f1/env.sh &&
#      scripts/device/fused_check.sh 1
#     the CUDA fused / skinny / quant / graph / rope tests, memcheck and racecheck on the fused tests, and 8B-shape decode
#     at bs 1/8/16 (bf16 and W4A16) fused (PEREGRINE_FUSE=1) and unfused (PEREGRINE_FUSE=0) in the same call
#   2 (scripts/device/carry_light.sh on): tar -xJf .device/carry_f2/bundle.tar.xz -C .device &&
#      source .device/carry_f2/env.sh && scripts/device/fused_check.sh 2
#     the model tests on CUDA (fidelity against transformers, determinism) and the engine's CUDA tests (on the
#     fused path unless PEREGRINE_FUSE=0 is set)
# Both parts in one call (scripts/device/carry_light.sh on, scripts/device/fused_bundle.sh's .device/carry_fall):
#   source .device/carry_fall/env.sh && scripts/device/fused_check.sh all
set -uo pipefail
part=${1:?part 1|2|all}
if [ "$part" = all ]; then "$0" 1; "$0" 2; exit; fi
out=${OUT:-/tmp/fused_check}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
[ -e /work/main/models ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
case "$part" in
1)
  timeout 200 "$bin/cuda_ops_tests" --gtest_filter='CudaFused*:CudaSkinny*:CudaQuant*:CudaGraph*:CudaMatmul*:CudaRope*:CudaKvWrite*' \
    >"$out/tests.log" 2>&1
  echo "cuda_ops_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[==========\]" "$out/tests.log" | head -30
  grep -B2 -A8 "Failure" "$out/tests.log" | head -60
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaFusedMatmul.MatchesTheReference*:CudaFusedMatmul.Refuses*:CudaRopeKvWrite.*' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaFusedMatmul.MatchesTheReference*' >"$out/racecheck.log" 2>&1
  echo "racecheck rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" "$out/racecheck.log" | head -4
  # fused: PEREGRINE_FUSE=1; unfused: PEREGRINE_FUSE=0; rope2: fused, RoPE and the KV write as two launches
  # (PEREGRINE_ROPE_KV=0). EXTRA (default "none:1:rope2 none:1:fused none:1:unfused") adds runs after the table
  # (quant:batch:mode), for the one-launch RoPE + KV write and the spread of repeated runs.
  lat_run() {  # quant bs mode
    local q=$1 bs=$2 mode=$3 qflag="" env_flag
    [ "$q" = w4a16 ] && qflag="--quantization w4a16"
    case "$mode" in
      fused) env_flag="PEREGRINE_FUSE=1" ;;
      unfused) env_flag="PEREGRINE_FUSE=0" ;;
      rope2) env_flag="PEREGRINE_FUSE=1 PEREGRINE_ROPE_KV=0" ;;
    esac
    local lat=$out/lat.txt  # one run's output; all of them in latency.log (the call returns 8 files at most)
    env $env_flag timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
      --input-len 1024 --output-len 64 --batch-size "$bs" --iterations 2 $qflag >"$lat" 2>&1
    local rc=$?
    { echo "== $q $mode bs=$bs rc=$rc"; cat "$lat"; } >>"$out/latency.log"
    echo "latency $q $mode bs=$bs rc=$rc $(grep -E '^decode' "$lat" | head -1)"
    rm -f "$lat"
  }
  for q in ${QUANTS:-none w4a16}; do
    for bs in ${BATCHES:-1 8 16}; do
      for mode in fused unfused; do lat_run "$q" "$bs" "$mode"; done
    done
  done
  for e in ${EXTRA-none:1:rope2 none:1:fused none:1:unfused}; do lat_run ${e//:/ }; done
  echo "total: $(( $(date +%s) - start )) s"
  ;;
2)
  export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
  [ -f models/pycoder-tiny/model.safetensors ] || ln -s "$PWD/.device/model/model.safetensors" models/pycoder-tiny/
  timeout 200 "$bin/model_tests" --gtest_filter='*cuda*:*Cuda*' >"$out/model_tests.log" 2>&1
  echo "model_tests rc=$?"; grep -E "^\[  FAILED|^\[  PASSED|^\[==========\]|max|worst|largest" "$out/model_tests.log" | head -30
  timeout 250 "$bin/engine_model_tests" --gtest_filter='*Cuda*:*cuda*' >"$out/engine_tests.log" 2>&1
  echo "engine_model_tests rc=$?"; grep -E "^\[  FAILED|^\[  PASSED|^\[==========\]" "$out/engine_tests.log" | head -30
  echo "total: $(( $(date +%s) - start )) s"
  ;;
esac
