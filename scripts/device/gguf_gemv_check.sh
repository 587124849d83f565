#!/usr/bin/env bash
# The GGUF GEMV on the H200, in two calls back to back (scripts/device/gguf_gemv_bundles.sh makes the bundles;
# /tmp keeps the GGUF files between the calls while the machine stays warm):
#   1: tar -xJf .device/carry_g1/bundle.tar.xz -C .device && scripts/device/gguf_gemv_check.sh 1
#      CUDA ggml tests, memcheck on the GEMV, cuda_ops_bench --ggml-only, random 8B-shape Q8_0 / Q4_0 GGUFs
#      (and Q4_K relabelled from Q4_0) made in /tmp
#   2: tar -xJf .device/carry_g2/bundle.tar.xz -C .device && source .device/carry_g2/env.sh && scripts/device/gguf_gemv_check.sh 2
#      peregrine bench latency on those files at batch 1 and 8
set -uo pipefail
part=${1:?part 1|2}
out=${OUT:-/tmp/gguf_gemv_check}
mkdir -p "$out"
bin=.device/bin
start=$(date +%s)
case "$part" in
1)
  timeout 150 "$bin/cuda_ops_tests" --gtest_filter='CudaGgml*' >"$out/ggml_tests.log" 2>&1
  echo "cuda_ops_tests CudaGgml* rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[       OK" "$out/ggml_tests.log" | head -12
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaGgmlMatmul.RowsDoNotDependOnMWithinAPath' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
  timeout 120 "$bin/cuda_ops_bench" --ggml-only "$out/ggml_bench.md" >"$out/ggml_bench.txt" 2>&1
  echo "cuda_ops_bench rc=$?"
  source "$(dirname "$0")/make_8b_ggufs.sh"
  make_8b_ggufs "$out/make.log" q8_0 q4_0 q4_k
  echo "made: $(ls /tmp/8b-*.gguf 2>/dev/null | tr '\n' ' ')"; tail -2 "$out/make.log"
  grep -E "^\| (Q|q|copy|read|HBM)|ggml type" "$out/ggml_bench.txt" | head -40
  ;;
2)
  for f in q8_0 q4_0 q4_k; do
    for bs in 1 8; do
      [ -f "/tmp/8b-$f.gguf" ] || continue
      timeout 120 "$bin/peregrine" bench latency --model "/tmp/8b-$f.gguf" --device cuda --input-len 512 --output-len 64 \
        --batch-size "$bs" --iterations 2 >"$out/gguf_${f}_bs$bs.txt" 2>&1
      echo "gguf $f bs=$bs rc=$? $(grep -E 'decode' "$out/gguf_${f}_bs$bs.txt" | head -1)"
    done
  done
  ;;
esac
echo "total: $(( $(date +%s) - start )) s"
