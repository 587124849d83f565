#!/usr/bin/env bash
# The 8-bit tensor-core kernels on the H200 in one call (bundle from scripts/device/ggml_mma_bundle.sh with
# FIXTURES="q4_k q4_0"): W8A8 per channel at small M (skinny_gemm.cu's launch_skinny_w8a8) and the GGUF Q5_0 / Q5_K
# packed layout beside the Q4/Q6/Q8 ones.
#   tar -xJf .device/carry_m/bundle.tar.xz -C .device && source .device/carry_m/env.sh && scripts/device/w8_ggml_check.sh
# 1. CUDA op tests (CudaW8Matmul, CudaGgml*, CudaSkinnyGemm), memcheck on the new kernels' tests, the GGUF fixtures
#    against llama.cpp on CUDA (the Q4_K_M fixture is mostly Q5_0: now packed);
# 2. Llama-3-8B shape, random weights: bs 1 / 8 / 16 decode bf16, FP8 W8A8 and int8 W8A8 (and int8 at 32), the
#    8-bit ones also with PEREGRINE_W8_SKINNY=0 (the warp kernel before) at bs 1 and 16;
# 3. a Q5_K_M-like 8B GGUF (bench/gguf_mix_q4_k_m.py q5_k_m) at bs 1 and 32, packed and in the file layout.
set -uo pipefail
out=${OUT:-/tmp/w8_ggml_check}
mkdir -p "$out"
bin=.device/bin
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout 240 "$bin/cuda_ops_tests" --gtest_filter="${TESTS:-CudaW8Matmul.*:CudaGgml*:CudaSkinnyGemm.*}" >"$out/tests.log" 2>&1
echo "cuda_ops_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|worst| ms\)$" "$out/tests.log" | head -30
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
  --gtest_filter='CudaW8Matmul.SmallM*:CudaGgmlPacked.GroupedMatmulsOfMixed*:CudaGgmlPacked.OnlyTypes*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
timeout 200 "$bin/model_tests" --gtest_filter='Cuda/GgufModel.*' >"$out/gguf_model.log" 2>&1
echo "model_tests Cuda/GgufModel rc=$?"; grep -E "^\[  FAILED|^\[  PASSED|^\[       OK|agree with|SKIPPED" "$out/gguf_model.log" | head -12
cfg=.device/shared/configs/llama-3-8b.json
dec() { grep -oE "decode +[0-9.]+ tokens/s" "$1" | grep -oE "[0-9.]+" | head -1; }
rows=()
for bs in ${BATCHES:-1 8 16 32}; do
  row="| $bs |"
  for q in none fp8 w8a8-int8 fp8:0 w8a8-int8:0; do
    name=${q%%:*} env0=""
    [ "$q" != "$name" ] && env0="PEREGRINE_W8_SKINNY=0"
    if [ -n "$env0" ] && [ "$bs" != 1 ] && [ "$bs" != 16 ]; then row="$row |"; continue; fi
    flags=(); [ "$name" != none ] && flags=(--quantization "$name")
    f="$out/${name}_bs${bs}${env0:+_warp}.txt"
    env $env0 timeout 100 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
      --input-len 1024 --output-len 32 --batch-size "$bs" --iterations 2 "${flags[@]}" >"$f" 2>&1
    rc=$?
    row="$row $( [ $rc = 0 ] && dec "$f" || echo "rc=$rc") |"
  done
  rows+=("$row")
done
echo "| batch | bf16 | FP8 W8A8 | int8 W8A8 | FP8 warp kernel (before) | int8 warp kernel (before) |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
grep -hE "^(weights|memory bandwidth)" "$out/none_bs1.txt" "$out/fp8_bs1.txt" 2>/dev/null
echo "at $(( $(date +%s) - start )) s"
if [ -n "${Q5:-1}" ]; then
  source "$(dirname "$0")/make_8b_ggufs.sh"
  make_8b_ggufs "$out/make.log" q5_k_m
  echo "q5_k_m made at $(( $(date +%s) - start )) s: $(tail -1 "$out/make.log")"
  echo "| file | batch | packed (int8 mma) tok/s | file layout tok/s |"
  echo "| --- | --- | --- | --- |"
  for bs in 1 32; do
    row="| q5_k_m | $bs |"
    for pack in 1 0; do
      PEREGRINE_GGML_PACK=$pack timeout 100 "$bin/peregrine" bench latency --model /tmp/8b-q5_k_m.gguf --device cuda \
        --input-len 512 --output-len 64 --batch-size "$bs" --iterations 2 >"$out/q5_bs${bs}_p$pack.txt" 2>&1
      rc=$?
      row="$row $( [ $rc = 0 ] && dec "$out/q5_bs${bs}_p$pack.txt" || echo "rc=$rc") |"
    done
    echo "$row"
  done
fi
echo "total: $(( $(date +%s) - start )) s"
