#!/usr/bin/env bash
# The W4A8 GPU checks of issue 12, in parts (one device call each), on binaries carried from this machine's CUDA
# build. Here, once: scripts/device/w4a8_bundle.sh (after building build/cuda's peregrine and cuda_ops_tests).
# There:
#   t    run(command="scripts/device/w4a8_check.sh t", carry=[".device/carry_w4a8_t"])              (~1-2 min)
#        cuda_ops_tests: CudaW4A8Matmul.* (every element against the ref backend: the warp GEMV at M <= 16 and
#        the large-M path, bf16 / f32 activations, group 32..1024 and per channel; rows across M within a path;
#        refused shapes), beside CudaQuantMatmul.* and CudaW8Matmul.* (the paths it is compared with); then
#        compute-sanitizer memcheck on CudaW4A8Matmul.*.
#   b    run(command="scripts/device/w4a8_check.sh b 1 16", carry=[".device/carry_w4a8_b"])         (~4-6 min)
#        run(command="scripts/device/w4a8_check.sh b 64 256", carry=[".device/carry_w4a8_b"])
#        bench latency on the Llama-3-8B shape with random weights, one process per scheme and batch size: bf16,
#        W4A16 (int4 g128), W4A8 (int4 g128, int8 activations per token), W8A8 int8 and FP8 (per channel,
#        activations per token); decode tokens/s (and ms per step) at the batch sizes given, then a table with
#        W4A8's ratio to each. SCHEMES="bf16 w4a16 w4a8 w8a8-int8 fp8" picks a subset.
# Without the carried binaries the part builds them first (cmake + ninja on the device: several minutes more).
set -uo pipefail
part=${1:?part t | b BATCH...}
shift
out=${OUT:-/tmp/w4a8_check}
mkdir -p "$out"
start=$(date +%s)
case "$part" in
t) carry=.device/carry_w4a8_t ;;
b) carry=.device/carry_w4a8_b ;;
*) echo "w4a8_check.sh: unknown part '$part' (t or b)" >&2; exit 2 ;;
esac
if [ -f "$carry/bundle.tar.xz" ]; then
  tar -xJf "$carry/bundle.tar.xz" -C .device || { echo "bundle extraction failed"; exit 1; }
  # shellcheck disable=SC1091
  source "$carry/env.sh"
fi
bin=.device/bin
need=cuda_ops_tests
[ "$part" = b ] && need=peregrine
if [ ! -x "$bin/$need" ]; then
  echo "no carried $bin/$need: building it here"
  build=build/device-cuda
  if ! pkg-config --exists icu-uc 2>/dev/null; then
    mkdir -p /tmp/pc-stub
    printf 'Name: icu-uc\nDescription: stub for configure only\nVersion: 72.1\nLibs:\nCflags:\n' >/tmp/pc-stub/icu-uc.pc
    export PKG_CONFIG_PATH="/tmp/pc-stub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DPEREGRINE_BUILD_TESTS=ON \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" \
    >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo "CONFIGURE FAILED"; exit 1; }
  cmake --build "$build" -j"$(nproc)" --target "$need" >>"$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$out/build.log" | head -40; echo "BUILD FAILED"; exit 1; }
  mkdir -p "$bin"
  if [ "$need" = peregrine ]; then cp "$build/peregrine" "$bin/"; else cp "$build/tests/cuda/cuda_ops_tests" "$bin/"; fi
  echo "build: $(( $(date +%s) - start )) s"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

if [ "$part" = t ]; then
  tests_rc=0
  timeout 240 "$bin/cuda_ops_tests" --gtest_filter='CudaW4A8Matmul.*:CudaQuantMatmul.*:CudaW8Matmul.*' \
    >"$out/tests.log" 2>&1 || tests_rc=$?
  grep -E "^\[  FAILED|Failure|element|^\[       OK|^\[  PASSED|^\[==========\]|no CUDA device" "$out/tests.log" | head -40
  grep -q "^\[  PASSED" "$out/tests.log" || { [ "$tests_rc" -ne 0 ] || tests_rc=1; echo "no test passed"; }
  memcheck_rc=0
  if command -v compute-sanitizer >/dev/null 2>&1; then
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
      --gtest_filter='CudaW4A8Matmul.*' >"$out/memcheck.log" 2>&1 || memcheck_rc=$?
    grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" "$out/memcheck.log" | head -5
  else
    memcheck_rc=-1; echo "compute-sanitizer not found"
  fi
  echo "tests rc=$tests_rc memcheck rc=$memcheck_rc total $(( $(date +%s) - start )) s"
  exit $(( tests_rc != 0 || memcheck_rc > 0 ))
fi

# part b: decode at the batch sizes given.
batches=${*:-1 16 64 256}
schemes=${SCHEMES:-bf16 w4a16 w4a8 w8a8-int8 fp8}
cfg=.device/shared/configs/llama-3-8b.json
[ -f "$cfg" ] || cfg=${PEREGRINE_SHARED_DIR:-../shared}/configs/llama-3-8b.json
for bs in $batches; do
  for s in $schemes; do
    q=()
    [ "$s" != bf16 ] && q=(--quantization "$s")
    timeout 110 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --iterations 2 \
      --input-len 512 --output-len 32 --batch-size "$bs" "${q[@]}" >"$out/${s}_bs$bs.txt" 2>&1
    echo "$s bs=$bs rc=$? ($(( $(date +%s) - start )) s): $(grep -E '^decode' "$out/${s}_bs$bs.txt" | cut -c1-90)"
    grep -iE "error" "$out/${s}_bs$bs.txt" | head -2
  done
done
dec() { grep -oE "^decode +[0-9.]+ tokens/s" "$out/$1.txt" 2>/dev/null | grep -oE "[0-9.]+" | head -1; }
ms() { grep -oE "\([0-9.]+ ms/step\)" "$out/$1.txt" 2>/dev/null | grep -oE "[0-9.]+" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-" }'; }
echo
echo "Llama-3-8B shape, random weights, decode tokens/s (ms/step), 512 in / 32 out, best of 2:"
header="| batch |"; sep="| --- |"
for s in $schemes; do header="$header $s |"; sep="$sep --- |"; done
echo "$header W4A8 / W4A16 | W4A8 / W8A8 int8 | W4A8 / FP8 | W4A8 / bf16 |"
echo "$sep --- | --- | --- | --- |"
for bs in $batches; do
  row="| $bs |"
  for s in $schemes; do row="$row $(dec "${s}_bs$bs") ($(ms "${s}_bs$bs")) |"; done
  w=$(dec "w4a8_bs$bs")
  echo "$row $(ratio "$w" "$(dec "w4a16_bs$bs")") | $(ratio "$w" "$(dec "w8a8-int8_bs$bs")") | $(ratio "$w" "$(dec "fp8_bs$bs")") | $(ratio "$w" "$(dec "bf16_bs$bs")") |"
done
echo "total $(( $(date +%s) - start )) s"
