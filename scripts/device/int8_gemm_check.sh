#!/usr/bin/env bash
# int8 W8A8 at large M (cuBLASLt's int8 GEMM + the warp kernel's epilogue) and the op tests of the 8-bit and GGUF
# packed kernels, on the H200 (bundle from `FIXTURES= scripts/device/ggml_mma_bundle.sh`):
#   tar -xJf .device/carry_m/bundle.tar.xz -C .device && source .device/carry_m/env.sh && scripts/device/int8_gemm_check.sh
# Llama-3-8B shape, random weights: prefill 8,190 tokens and decode at bs 1 and 32 for bf16, FP8 and int8 W8A8, and
# int8 with PEREGRINE_W8_INT8_GEMM=0 (the warp kernel at every M) at a 1K prefill. QUANTS narrows the weights
# (default "none fp8 w8a8-int8"), BATCHES the decode batches (default "1 32"), SHORT=1 skips the prefill runs.
set -uo pipefail
out=${OUT:-/tmp/int8_gemm_check}
mkdir -p "$out"
bin=.device/bin
start=$(date +%s)
timeout 200 "$bin/cuda_ops_tests" --gtest_filter="${TESTS:-CudaW8Matmul.*:CudaGgmlPacked.*}" >"$out/tests.log" 2>&1
echo "cuda_ops_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[       OK" "$out/tests.log" | head -20
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
  --gtest_filter='CudaW8Matmul.LargeM*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
cfg=.device/shared/configs/llama-3-8b.json
field() { grep -E "^$2" "$1" | grep -oE "[0-9.]+ tokens/s" | grep -oE "[0-9.]+" | head -1; }
echo "| weights | prefill 8190 tok/s |$(for bs in ${BATCHES:-1 32}; do printf ' bs %s decode |' "$bs"; done)"
echo "| --- | --- |$(for bs in ${BATCHES:-1 32}; do printf ' --- |'; done)"
for q in ${QUANTS:-none fp8 w8a8-int8}; do
  flags=(); [ "$q" != none ] && flags=(--quantization "$q")
  r1=skipped
  if [ -z "${SHORT:-}" ]; then
    timeout 100 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --input-len 8190 \
      --output-len 2 --batch-size 1 --iterations 2 "${flags[@]}" >"$out/${q}_pp.txt" 2>&1
    r1=$?
  fi
  row="| $q | $( [ "$r1" = 0 ] && field "$out/${q}_pp.txt" prefill || echo "$r1") |"
  for bs in ${BATCHES:-1 32}; do
    timeout 100 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --input-len 1024 \
      --output-len 32 --batch-size "$bs" --iterations 2 "${flags[@]}" >"$out/${q}_bs$bs.txt" 2>&1 ||
      echo "$q bs $bs rc=$?"
    row="$row $(field "$out/${q}_bs$bs.txt" decode) |"
  done
  echo "$row"
done
[ -n "${SHORT:-}" ] || PEREGRINE_W8_INT8_GEMM=0 timeout 100 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
  --input-len 1024 --output-len 2 --batch-size 1 --iterations 1 --quantization w8a8-int8 >"$out/int8_warp_pp.txt" 2>&1
[ -n "${SHORT:-}" ] || echo "int8 warp kernel (before), prefill 1024: $(field "$out/int8_warp_pp.txt" prefill) tok/s"
grep -shE "^memory bandwidth" "$out/none_bs1.txt"
echo "total: $(( $(date +%s) - start )) s"
