#!/usr/bin/env bash
# One device call for the GPU model path: build the whole project (CUDA), run the model tests on the GPU
# (fidelity against transformers, determinism), then `peregrine bench latency` on Llama-3-8B-shaped random weights
# (bs=1 decode, 8K prefill, offline throughput at several batch sizes) and a PyTorch + transformers baseline.
# Run from the repository root on the GPU machine: source .device/env.sh && scripts/device/model_check.sh [out_dir]
set -uo pipefail
out=${1:-${OUT:-/tmp/model_check}}
mkdir -p "$out"
build=build/device-full
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# Fixtures: what travelled in .device/shared, plus the embedded model.
mkdir -p .device/shared/models
ln -sfn "$PWD/models/pycoder-tiny" .device/shared/models/pycoder-tiny

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DPEREGRINE_BUILD_TESTS=ON \
  -DPEREGRINE_BUILD_BENCH=OFF -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
  -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; echo "CONFIGURE FAILED"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target peregrine model_tests >>"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -40; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

PEREGRINE_SHARED_DIR="$PWD/.device/shared" timeout 300 "$build/tests/unit/model_tests" \
  --gtest_filter='*cuda*:Devices/Determinism.*/1' >"$out/model_tests.log" 2>&1
echo "model_tests rc=$?"
grep -E "largest|^\[  (PASSED|FAILED|SKIPPED)|Failure" "$out/model_tests.log" | head -30

cfg=.device/shared/configs/llama-3-8b.json
lat() { timeout 240 "$build/peregrine" bench latency --random-weights --config "$cfg" --device cuda --json "$@" \
          2>>"$out/bench.err" | tee -a "$out/latency.jsonl"; }
lat --input-len 1024 --output-len 128 --batch-size 1 --iterations 2
lat --input-len 8192 --output-len 8 --batch-size 1 --iterations 2
for bs in ${BATCHES:-8 64 256}; do lat --input-len 1024 --output-len 400 --batch-size "$bs" --iterations 1; done
tail -5 "$out/bench.err" 2>/dev/null

PYTHONUNBUFFERED=1 timeout 300 python3 scripts/device/torch_baseline.py "$cfg" --compile 2>&1 | tee "$out/torch.log" | grep -E "^torch|Error" 
echo "total: $(( $(date +%s) - start )) s"
