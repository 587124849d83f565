#!/usr/bin/env bash
# One device call for GGUF models on the GPU: build (CUDA), run the GGUF model tests on the CUDA backend (the
# pycoder-tiny q8_0/q4_0/q4_k fixtures against llama.cpp's references; a test skips while the CUDA backend refuses
# ggml blocks with kUnsupported), then `peregrine bench latency` on 8B-shaped random GGUFs (Q8_0, Q4_0, Q4_K: made here
# with make_random_gguf.py when numpy is importable, at bs=1 and bs=32). Prints a short table last.
# Prepare with the fixtures and tools: SHARED_EXTRA="models/gguf tools" scripts/device/prepare.sh
# Run from the repository root on the GPU machine: source .device/env.sh && scripts/device/gguf_check.sh [out_dir]
set -uo pipefail
out=${1:-${OUT:-/tmp/gguf_check}}
mkdir -p "$out"
build=build/device-gguf
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DPEREGRINE_BUILD_TESTS=ON \
  -DPEREGRINE_BUILD_BENCH=OFF -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
  -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; echo "CONFIGURE FAILED"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target peregrine model_tests >>"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -40; echo "BUILD FAILED"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

PEREGRINE_SHARED_DIR="$PWD/.device/shared" timeout 300 "$build/tests/unit/model_tests" \
  --gtest_filter='*GgufModel*' >"$out/model_tests.log" 2>&1
echo "model_tests rc=$?"
grep -E "steps, |^\[  (PASSED|FAILED|SKIPPED)|Failure|unsupported" "$out/model_tests.log" | head -30

tools=.device/shared/tools
if [ -f "$tools/make_random_gguf.py" ] && python3 -c "import numpy" 2>/dev/null; then
  for d in q8_0 q4_0; do
    [ -f "/tmp/8b-$d.gguf" ] || python3 "$tools/make_random_gguf.py" --hidden 4096 --layers 32 --heads 32 --kv-heads 8 \
      --ffn 14336 --vocab 128256 --ctx 8192 --dtype "$d" --out "/tmp/8b-$d.gguf" >>"$out/make.log" 2>&1
  done
  [ -f /tmp/8b-q4_k.gguf ] || python3 bench/gguf_q4_0_to_q4_k.py /tmp/8b-q4_0.gguf /tmp/8b-q4_k.gguf >>"$out/make.log" 2>&1
else
  echo "no numpy or no $tools/make_random_gguf.py: no 8B GGUFs to bench"
fi
rows=()
for f in /tmp/8b-q8_0.gguf /tmp/8b-q4_0.gguf /tmp/8b-q4_k.gguf; do
  [ -f "$f" ] || continue
  for bs in 1 32; do
    line=$(timeout 240 "$build/peregrine" bench latency --model "$f" --device cuda --json --input-len 512 \
             --output-len 64 --batch-size "$bs" --iterations 2 2>>"$out/bench.err" | tail -1)
    echo "$line" >>"$out/latency.jsonl"
    rows+=("$(basename "$f") bs=$bs: $line")
  done
done
echo "== GGUF on CUDA =="
for r in "${rows[@]}"; do echo "$r" | cut -c1-300; done
echo "total: $(( $(date +%s) - start )) s"
