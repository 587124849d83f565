#!/usr/bin/env bash
# A short device call: rebuild, rerun the GPU model tests (bf16 fidelity with f32 logits, determinism), one bs=1
# latency row, and, when the engine's throughput bench exists, offline throughput at a few concurrencies.
# Run from the repository root on the GPU machine: source .device/env.sh && scripts/device/final_check.sh [out_dir]
set -uo pipefail
out=${1:-${OUT:-/tmp/final_check}}
mkdir -p "$out"
build=build/device-full
start=$(date +%s)
mkdir -p .device/shared/models
ln -sfn "$PWD/models/pycoder-tiny" .device/shared/models/pycoder-tiny
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DPEREGRINE_BUILD_TESTS=ON \
  -DPEREGRINE_BUILD_BENCH=OFF -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
  -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
timeout 150 cmake --build "$build" -j"$(nproc)" --target peregrine model_tests >>"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -20; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
PEREGRINE_SHARED_DIR="$PWD/.device/shared" timeout 60 "$build/tests/unit/model_tests" \
  --gtest_filter='*pycoder_tiny_cuda*:*arch*cuda*:Devices/Determinism.*/1' >"$out/model_tests.log" 2>&1
echo "model_tests rc=$?"
grep -E "largest|^\[  (PASSED|FAILED)" "$out/model_tests.log" | head -12
cfg=.device/shared/configs/llama-3-8b.json
timeout 40 "$build/peregrine" bench latency --random-weights --config "$cfg" --device cuda --json \
  --input-len 1024 --output-len 64 --iterations 1 | tee "$out/latency.jsonl"
if "$build/peregrine" bench throughput --help >/dev/null 2>&1; then
  timeout 100 "$build/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 400 --concurrency "${CONCURRENCY:-1,2,4,8,16,32,64,128,256}" 2>&1 |
    tee "$out/throughput.log" | tail -15
fi
echo "total: $(( $(date +%s) - start )) s"
