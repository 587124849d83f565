#!/usr/bin/env bash
# GGUF Q8_0 / Q4_0 / Q4_K (and the Q4_K_M / Q5_K_M mixes) on the int8 tensor-core kernel, on the H200 in one call (bundle from
# scripts/device/ggml_mma_bundle.sh):
#   tar -xJf .device/carry_m/bundle.tar.xz -C .device && source .device/carry_m/env.sh && scripts/device/ggml_mma_check.sh
# CUDA ggml op tests, memcheck on the packed kernel, the GGUF fixtures against llama.cpp on CUDA, random 8B-shape
# GGUFs made in /tmp, then `bench latency` with the packed kernel and with PEREGRINE_GGML_PACK=0 (the GEMV before).
# BATCHES (default "1 8 32") and TYPES (default "q8_0 q4_0 q4_k") narrow the benchmark; TESTS picks the op tests;
# NCU and MIX below add a profile and Q4_K_M- / Q5_K_M-like files.
set -uo pipefail
out=${OUT:-/tmp/ggml_mma_check}
mkdir -p "$out"
bin=.device/bin
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout 240 "$bin/cuda_ops_tests" --gtest_filter="${TESTS:-CudaGgml*}" >"$out/ggml_tests.log" 2>&1
echo "cuda_ops_tests ${TESTS:-CudaGgml*} rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|worst" "$out/ggml_tests.log" | head -24; grep -c "^\[       OK" "$out/ggml_tests.log"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
  --gtest_filter='CudaGgmlPacked.GroupedMatmulsEqualSeparateOnes:CudaGgmlPacked.OnlyTypes*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
timeout 200 "$bin/model_tests" --gtest_filter='Cuda/GgufModel.*' >"$out/gguf_model.log" 2>&1
echo "model_tests Cuda/GgufModel rc=$?"; grep -E "^\[  FAILED|^\[  PASSED|^\[       OK|agree with|SKIPPED" "$out/gguf_model.log" | head -12
source "$(dirname "$0")/make_8b_ggufs.sh"
make_8b_ggufs "$out/make.log" q8_0 q4_0 q4_k
echo "made: $(ls /tmp/8b-*.gguf 2>/dev/null | tr '\n' ' ') at $(( $(date +%s) - start )) s"; tail -2 "$out/make.log"
# One table row: the file (label F, /tmp/8b-F.gguf) at batch size BS, packed and in the file layout.
bench_row() {
  local f=$1 bs=$2 row="| $1 | $2 |" pack rc tok
  for pack in 1 0; do
    PEREGRINE_GGML_PACK=$pack timeout 100 "$bin/peregrine" bench latency --model "/tmp/8b-$f.gguf" --device cuda \
      --input-len 512 --output-len 64 --batch-size "$bs" --iterations 2 >"$out/${f}_bs${bs}_p$pack.txt" 2>&1
    rc=$?
    tok=$(grep -oE 'decode[^|]*' "$out/${f}_bs${bs}_p$pack.txt" | head -1)
    row="$row rc=$rc ${tok:-$(tail -1 "$out/${f}_bs${bs}_p$pack.txt")} |"
  done
  echo "$row"
}
echo "| file | batch | packed (int8 mma) tok/s | file layout (GEMV / dequant + GEMM) tok/s |"
echo "| --- | --- | --- | --- |"
for f in ${TYPES:-q8_0 q4_0 q4_k}; do
  [ -f "/tmp/8b-$f.gguf" ] || continue
  for bs in ${BATCHES:-1 8 32}; do bench_row "$f" "$bs"; done
done
# NCU="q4_k q4_0": ncu's kernel times of one bs=1 decode step on those files.
for f in ${NCU:-}; do
  timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$out/ncu_$f.csv" "$bin/peregrine" bench latency --model "/tmp/8b-$f.gguf" --device cuda \
    --input-len 128 --output-len 3 --batch-size 1 --iterations 1 >"$out/ncu_${f}_run.txt" 2>&1
  echo "ncu $f rc=$?"
  python3 scripts/device/ncu_step.py "$out/ncu_$f.csv" "one $f decode step (bs=1, ctx ~130)" --by-grid | head -24 || true
done
# MIX="q4_k_m q5_k_m": Q4_K_M- / Q5_K_M-like 8B files (bench/gguf_mix_q4_k_m.py: Q4_K or Q5_K with Q6_K attn_v /
# ffn_down / output) at BATCHES (MIX=1 is q4_k_m).
for mx in ${MIX:-}; do
  [ "$mx" = 1 ] && mx=q4_k_m
  make_8b_ggufs "$out/make.log" "$mx"
  echo "$mx made rc=$? $(ls -la "/tmp/8b-$mx.gguf" 2>/dev/null | awk '{print $5}') bytes; at $(( $(date +%s) - start )) s"
  for bs in ${BATCHES:-1 8 32}; do bench_row "$mx" "$bs"; done
done
echo "total: $(( $(date +%s) - start )) s"
