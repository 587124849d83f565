#!/usr/bin/env bash
# The skinny matmul's streaming kernel (persistent blocks, cp.async rings) on the H200, one call:
#   here: scripts/device/stream_check.sh bundle   (.device/carry_st: cuda_ops_tests, peregrine, the deps' libraries
#         and the 8B config; call with scripts/device/carry_light.sh on)
#   there: source .device/carry_st/env.sh && scripts/device/stream_check.sh
# The skinny / fused / quantized matmul tests (StreamingEqualsRounds: the same bits as the rounds kernel), memcheck on
# the streaming test, then 8B-shape decode at 1K context, bf16 / W4A16 / W8A16 at bs 1 and 16, with the streaming
# kernel and without it (PEREGRINE_SKINNY_STREAM=0) in the same call, zeros folded (PEREGRINE_SKINNY_FOLD=1) but
# for one W4A16 run.
set -uo pipefail
if [ "${1:-}" = bundle ]; then
  source "$(dirname "$0")/bundle_lib.sh"
  mkdir -p "$stage/bin" "$stage/shared/configs"
  cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
  cp ../shared/configs/llama-3-8b.json "$stage/shared/configs/"
  cp "$b/tests/cuda/cuda_ops_tests" "$b/peregrine" "$stage/bin/"
  strip "$stage"/bin/*
  pack .device/carry_st deps shared bin
  exit 0
fi
out=${OUT:-/tmp/stream_check}
mkdir -p "$out"
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
PEREGRINE_SKINNY_FOLD=1 timeout 150 "$bin/cuda_ops_tests" --gtest_filter="${TESTS:-CudaFusedMatmul.*:CudaSkinny*:CudaQuantMatmul.*}" \
  >"$out/tests.log" 2>&1
t "cuda_ops_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[==========\]" "$out/tests.log" | head -16
grep -E "Failure" -A6 "$out/tests.log" | head -30
if [ "${MEMCHECK:-1}" = 1 ]; then
  PEREGRINE_SKINNY_FOLD=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaFusedMatmul.MatchesTheReference*' >"$out/memcheck.log" 2>&1
  t "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
fi
lat() {  # name bs stream [flags...]
  local name=$1 bs=$2 st=$3; shift 3
  PEREGRINE_SKINNY_STREAM=$st PEREGRINE_SKINNY_FOLD=${FOLD:-1} timeout 80 "$bin/peregrine" bench latency --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 64 --batch-size "$bs" --iterations 2 "$@" \
    >"$out/lat_${name}_bs${bs}_s$st.txt" 2>&1
  echo "$name bs=$bs stream=$st rc=$? $(grep -E '^decode' "$out/lat_${name}_bs${bs}_s$st.txt" | head -1)" | tee -a "$out/table.txt"
}
for bs in ${BATCHES:-1 16}; do
  for st in 0 1; do
    lat bf16 "$bs" "$st"
    lat w4a16 "$bs" "$st" --quantization w4a16
    [ "$bs" = 1 ] && lat w8a16 "$bs" "$st" --quantization w8a16
  done
done
FOLD=0 lat w4a16_nofold 1 1 --quantization w4a16  # zeros' sums kept apart
FOLD=0 lat w4a16_nofold 1 0 --quantization w4a16  # the kernel before this change
PEREGRINE_FUSE=1 lat w4a16_fused 1 1 --quantization w4a16  # the norm, SiLU-mul and residual in the matmuls
t "done"
cat "$out/table.txt"
