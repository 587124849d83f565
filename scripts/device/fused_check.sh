#!/usr/bin/env bash
# Fused decode matmuls (norm prologue, residual and SiLU-mul epilogues in the skinny kernel) on the H200, from
# binaries built here (scripts/device/fused_bundle.sh). Two calls:
#   1: tar -xJf .device/carry_f1/bundle.tar.xz -C .device && source .device/carry_f1/env.sh &&
#      scripts/device/fused_check.sh 1
#     the CUDA fused / skinny / quant / graph tests, memcheck on the fused tests, and 8B-shape decode at bs 1/8/16
#     (bf16 and W4A16) fused (PEREGRINE_FUSE=1) and by default (unfused) in the same call
#   2 (scripts/device/carry_light.sh on): tar -xJf .device/carry_f2/bundle.tar.xz -C .device &&
#      source .device/carry_f2/env.sh && scripts/device/fused_check.sh 2
#     the model tests on CUDA (fidelity against transformers, determinism) and the engine's CUDA tests (set
#     PEREGRINE_FUSE=1 to run them on the fused path)
set -uo pipefail
part=${1:?part 1|2}
out=${OUT:-/tmp/fused_check}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
[ -e /work/main/models ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
case "$part" in
1)
  timeout 200 "$bin/cuda_ops_tests" --gtest_filter='CudaFused*:CudaSkinny*:CudaQuant*:CudaGraph*:CudaMatmul*' \
    >"$out/tests.log" 2>&1
  echo "cuda_ops_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[==========\]" "$out/tests.log" | head -30
  grep -B2 -A8 "Failure" "$out/tests.log" | head -60
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaFusedMatmul.MatchesTheReference*:CudaFusedMatmul.Refuses*' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
  for q in ${QUANTS:-none w4a16}; do
    qflag=""; [ "$q" = w4a16 ] && qflag="--quantization w4a16"
    for bs in ${BATCHES:-1 8 16}; do
      for mode in fused unfused; do
        env_flag=""; [ "$mode" = fused ] && env_flag="PEREGRINE_FUSE=1"
        env $env_flag timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
          --input-len 1024 --output-len 64 --batch-size "$bs" --iterations 2 $qflag >"$out/lat_${q}_${mode}_bs$bs.txt" 2>&1
        echo "latency $q $mode bs=$bs rc=$? $(grep -E '^decode' "$out/lat_${q}_${mode}_bs$bs.txt" | head -1)"
      done
    done
  done
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
