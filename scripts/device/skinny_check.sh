#!/usr/bin/env bash
# The skinny bf16 matmul (issue 14: decode GEMMs at the bandwidth roofline) on the H200, from binaries built here
# (scripts/device/skinny_bundles.sh). Two calls:
#   1 (the model left out of the carry): tar -xJf .device/carry_k1/bundle.tar.xz -C .device &&
#       source .device/carry_k1/env.sh && scripts/device/skinny_check.sh 1
#     the CUDA matmul tests (skinny, split-K, graphs), memcheck on the skinny tests, cuda_ops_bench --skinny-only,
#     8B-shape bs 1/8/32 decode with the default policy and with VLLM_BATCH_INVARIANT=1 (all split-K cuBLASLt),
#     and ncu's kernel times of one bs=1 decode step
#   2 (the model's weights in the bundle, carry_light.sh on): tar -xJf .device/carry_k2/bundle.tar.xz -C .device &&
#       source .device/carry_k2/env.sh && scripts/device/skinny_check.sh 2
#     the engine's CUDA tests on pycoder-tiny (speculation equals plain decoding, GPU sampling, tiers) and the model
#     tests on CUDA (fidelity against transformers, determinism alone vs batched)
set -uo pipefail
part=${1:?part 1|2}
out=${OUT:-/tmp/skinny_check}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
case "$part" in
1)
  timeout 150 "$bin/cuda_ops_tests" --gtest_filter='CudaSkinny*:CudaMatmul*:CudaGraph*:CudaQuant*:CudaGgml*' \
    >"$out/tests.log" 2>&1
  echo "cuda_ops_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[==========\]|largest difference|policy" \
    "$out/tests.log" | head -24
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaSkinnyGemm.MatchesReference*:CudaSkinnyGemm.Grouped*' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
  timeout 150 "$bin/cuda_ops_bench" --skinny-only "$out/skinny_bench.md" >"$out/skinny_bench.txt" 2>&1
  echo "cuda_ops_bench rc=$?"
  for bs in 1 8 16 32; do
    for mode in default invariant; do
      env_flag=""
      [ "$mode" = invariant ] && env_flag="VLLM_BATCH_INVARIANT=1"
      env $env_flag timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
        --input-len 1024 --output-len 64 --batch-size "$bs" --iterations 2 >"$out/lat_${mode}_bs$bs.txt" 2>&1
      echo "latency $mode bs=$bs rc=$? $(grep -E '^decode' "$out/lat_${mode}_bs$bs.txt" | head -1)"
    done
  done
  echo "before ncu: $(( $(date +%s) - start )) s"
  if [ $(( $(date +%s) - start )) -lt 380 ]; then
    timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --log-file "$out/ncu.csv" \
      "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --input-len 128 --output-len 3 \
      --batch-size 1 --iterations 1 >"$out/ncu_run.txt" 2>&1
    echo "ncu rc=$?"
    python3 scripts/device/ncu_step.py "$out/ncu.csv" "one decode step (bs=1, ctx ~130)" || true
  fi
  echo "total: $(( $(date +%s) - start )) s"
  grep -E "^\| " "$out/skinny_bench.txt" | head -48
  for f in "$out"/lat_*.txt; do echo "$(basename "$f" .txt): $(grep -E '^decode' "$f" | head -1)"; done
  ;;
2)
  export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
  # The weights travel in the bundle (the tree goes without them: carry_light.sh on).
  [ -f models/pycoder-tiny/model.safetensors ] || ln -s "$PWD/.device/model/model.safetensors" models/pycoder-tiny/
  timeout 220 "$bin/engine_model_tests" --gtest_filter='*Cuda*:*cuda*' >"$out/engine_tests.log" 2>&1
  echo "engine_model_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[==========\]|^cuda " \
    "$out/engine_tests.log" | head -30
  timeout 150 "$bin/model_tests" --gtest_filter='*Fidelity*cuda*:*Fidelity*Cuda*:*Determinism*cuda*' >"$out/model_tests.log" 2>&1
  echo "model_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[==========\]|^\[       OK|max|worst" \
    "$out/model_tests.log" | head -30
  echo "total: $(( $(date +%s) - start )) s"
  ;;
esac
