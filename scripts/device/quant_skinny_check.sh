#!/usr/bin/env bash
# W4A16 / W8A16 at M <= 16 on the skinny tensor-core kernel, one call, binaries from scripts/device/skinny_bundles.sh
# and the quantized fixtures from scripts/device/quant_bundle.sh (the model left out: scripts/device/carry_light.sh on):
#   for c in k1 q; do tar -xJf .device/carry_$c/bundle.tar.xz -C .device; done && source .device/carry_k1/env.sh &&
#   scripts/device/quant_skinny_check.sh
# The CUDA quantized and skinny matmul tests, memcheck on the quantized ones, then 8B-shape decode (random codes,
# group 128, 1024-token context) at bs 1 and 16 beside bf16 in the same call, each quantized scheme on its kernels:
# the skinny kernel (default) and the warp GEMV (PEREGRINE_QUANT_SKINNY=i4|u8); then ncu's kernel times of one W4A16
# bs=1 decode step, matmuls told apart by grid.
set -uo pipefail
out=${OUT:-/tmp/quant_skinny_check}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
timeout 120 "$bin/cuda_ops_tests" --gtest_filter='CudaQuant*:CudaSkinny*:CudaMatmul*' >"$out/tests.log" 2>&1
echo "cuda_ops_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[==========\]" "$out/tests.log" | head -12
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
  --gtest_filter='CudaQuantMatmul.MatchesRef*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
if [ -x "$bin/model_tests" ]; then  # the quantized fixtures (.device/carry_q beside carry_k1)
  PEREGRINE_SHARED_DIR="$PWD/.device/shared" timeout 90 "$bin/model_tests" --gtest_filter='Quantized/*cuda*' \
    >"$out/fidelity.log" 2>&1
  echo "quantized fixtures on cuda rc=$?"; grep -E "largest|^\[  (PASSED|FAILED)|Failure" "$out/fidelity.log" | head -16
fi
lat() {  # name bs env... -- flags...
  local name=$1 bs=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len 1024 --output-len 64 --batch-size "$bs" --iterations 2 "$@" >"$out/lat_${name}_bs$bs.txt" 2>&1
  echo "latency $name bs=$bs rc=$? $(grep -E '^decode' "$out/lat_${name}_bs$bs.txt" | head -1)"
}
for bs in 1 8 16; do
  lat bf16 $bs X=1 --
  lat w4a16 $bs X=1 -- --quantization w4a16
  [ $bs = 1 ] && lat w4a16_gemv $bs PEREGRINE_QUANT_SKINNY=i4 -- --quantization w4a16
  lat w8a16 $bs X=1 -- --quantization w8a16
  [ $bs = 1 ] && lat w8a16_gemv $bs PEREGRINE_QUANT_SKINNY=u8 -- --quantization w8a16
done
echo "before ncu: $(( $(date +%s) - start )) s"
if [ $(( $(date +%s) - start )) -lt 330 ]; then
  timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --log-file "$out/ncu_w4.csv" "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda \
    --input-len 128 --output-len 3 --batch-size 1 --iterations 1 --quantization w4a16 >"$out/ncu_w4_run.txt" 2>&1
  echo "ncu rc=$?"
  python3 scripts/device/ncu_step.py "$out/ncu_w4.csv" "one W4A16 decode step (bs=1, ctx ~130)" --by-grid || true
fi
echo "total: $(( $(date +%s) - start )) s"
for f in "$out"/lat_*.txt; do echo "$(basename "$f" .txt): $(grep -E '^decode' "$f" | head -1)"; done
