#!/usr/bin/env bash
# One device call for issue 12 (8-bit weights and activations, quantized KV cache), about 5 minutes on one H200:
#   1. configure and build the CUDA targets (cuda_ops_tests, cuda_ops_bench, peregrine, model_tests) with Ninja;
#   2. the CUDA tests of this issue against the ref backend: CudaW8Matmul (int8 / fp8 W8A8, block FP8, weight-only
#      codes, every element, rows across M; M = 64 takes cuBLASLt's FP8 GEMM) and CudaKvQuant (int8 / fp8 KV
#      written bit-identical to ref, attention over them); the three 8-bit fixtures through `generate` on cuda
#      (bf16 activations), their greedy ids printed beside cases_act_quant's (a bf16 engine may part after a
#      near-tie; the f32 CPU path matches them exactly);
#   3. compute-sanitizer memcheck on CudaW8Matmul and CudaKvQuant;
#   4. benches on the Llama-3-8B shape, random weights, one process each, in this order: bs=1 decode bf16 vs FP8
#      W8A8, prefill 8K bf16 vs FP8, then cuda_ops_bench --fp8-only (bf16 peak and the FP8 matmul 8192^3 through
#      the backend: the FP8 matmul peak), bs=1 decode with an fp8 KV cache;
#   5. a short table last.
# Here, once:  SHARED_EXTRA=models/quant scripts/device/prepare.sh   (the 8-bit fixtures and configs, no binaries)
# There:       run(command="source .device/carry/env.sh && scripts/device/w8a8_check.sh", carry=[".device/carry"])
set -uo pipefail
out=${1:-${OUT:-/tmp/w8a8_check}}
mkdir -p "$out"
build=build/device-cuda
jobs=$(nproc)
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if ! pkg-config --exists icu-uc 2>/dev/null; then
  mkdir -p /tmp/pc-stub
  printf 'Name: icu-uc\nDescription: stub for configure only\nVersion: 72.1\nLibs:\nCflags:\n' >/tmp/pc-stub/icu-uc.pc
  export PKG_CONFIG_PATH="/tmp/pc-stub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DPEREGRINE_BUILD_TESTS=ON \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo "CONFIGURE FAILED"; exit 1; }
cmake --build "$build" -j"$jobs" --target cuda_ops_tests cuda_ops_bench peregrine >>"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -40; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

tests_rc=0
timeout 120 "$build/tests/cuda/cuda_ops_tests" --gtest_filter='CudaW8Matmul.*:CudaKvQuant.*:CudaQuantMatmul.*' \
  >"$out/tests.log" 2>&1 || tests_rc=$?
grep -E "^\[  FAILED|Failure|element|^\[  PASSED|^\[==========\]" "$out/tests.log" | head -30

memcheck_rc=0
if command -v compute-sanitizer >/dev/null 2>&1; then
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/cuda/cuda_ops_tests" \
    --gtest_filter='CudaW8Matmul.*:CudaKvQuant.*' >"$out/memcheck.log" 2>&1 || memcheck_rc=$?
  grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" "$out/memcheck.log" | head -5
else
  memcheck_rc=-1; echo "compute-sanitizer not found"
fi

# The 8-bit fixtures through the engine on cuda (greedy tokens, bf16 activations; compare with reference.json).
shared=${PEREGRINE_SHARED_DIR:-../shared}
for f in ct-w8a8-int8 fp8-per-channel fp8-block128; do
  [ -d "$shared/models/quant/$f" ] || continue
  timeout 30 "$build/peregrine" generate --model "$shared/models/quant/$f" --device cuda --prompt-ids 644,450,938,432,90,421,127 \
    --max-tokens 16 --temperature 0 --ignore-eos >"$out/gen_$f.txt" 2>&1
  echo "fixture $f on cuda rc=$?: $(tail -1 "$out/gen_$f.txt" | cut -c1-160)"
  echo "  reference (cases_act_quant[0]): $(python3 -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))['cases_act_quant'][0]['output_ids'])))" "$shared/models/quant/$f/reference.json" 2>/dev/null)"
done

cfg=configs/llama-3-8b.json
[ -f "$shared/$cfg" ] && cfg="$shared/$cfg" || cfg=".device/shared/$cfg"
bench() {  # name, then bench latency flags
  local name=$1; shift
  timeout 90 "$build/peregrine" bench latency --random-weights --config "$cfg" --device cuda --iterations 1 "$@" \
    >"$out/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -E "weights|decode|prefill|memory bandwidth" "$out/$name.txt"
}
bench bf16_bs1 --input-len 1024 --output-len 32
bench fp8_bs1 --input-len 1024 --output-len 32 --quantization fp8
bench bf16_prefill8k --input-len 8190 --output-len 2
bench fp8_prefill8k --input-len 8190 --output-len 2 --quantization fp8
bench fp8kv_bs1 --input-len 1024 --output-len 32 --kv-cache-dtype fp8
timeout 120 "$build/bench/cuda/cuda_ops_bench" --fp8-only "$out/fp8_bench.md" >"$out/fp8_bench.log" 2>&1
tail -8 "$out/fp8_bench.log"

dec() { grep -oE "decode +[0-9.]+ tokens/s" "$out/$1.txt" | grep -oE "[0-9.]+" | head -1; }
pre() { grep -oE "prefill +1 x [0-9]+ tokens: [0-9.]+" "$out/$1.txt" | grep -oE "[0-9.]+$" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-" }'; }
echo
echo "| figure | bf16 | FP8 W8A8 | ratio | goal |"
echo "| --- | --- | --- | --- | --- |"
echo "| bs=1 decode, 1K ctx (tok/s) | $(dec bf16_bs1) | $(dec fp8_bs1) | $(ratio "$(dec fp8_bs1)" "$(dec bf16_bs1)") | >= 1.8x |"
echo "| prefill 8K (tok/s) | $(pre bf16_prefill8k) | $(pre fp8_prefill8k) | $(ratio "$(pre fp8_prefill8k)" "$(pre bf16_prefill8k)") | >= 1.6x |"
echo "| bs=1 decode, fp8 KV (tok/s) | $(dec bf16_bs1) | $(dec fp8kv_bs1) (bf16 weights) | $(ratio "$(dec fp8kv_bs1)" "$(dec bf16_bs1)") | (generic attention kernel) |"
echo "| FP8 matmul 8192^3 | $(grep -oE 'bf16 matmul 8192\^3 \| [0-9]+' "$out/fp8_bench.log" | grep -oE '[0-9]+$') TFLOP/s | $(grep -oE 'cuBLASLt FP8\): [0-9.]+ ms \| [0-9]+' "$out/fp8_bench.log" | grep -oE '[0-9]+$') TFLOP/s | | peak |"
echo "tests rc=$tests_rc memcheck rc=$memcheck_rc total $(( $(date +%s) - start )) s"
