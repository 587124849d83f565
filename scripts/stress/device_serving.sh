#!/usr/bin/env bash
# Serving benchmarks on the GPU machine, in phases that fit one device call each:
#   build   configure (CUDA on) and build peregrine and the engine tests; run the tests
#   offline bench throughput (pycoder-tiny; Llama-3-8B shape with random weights), bench prefix-cache, CPU too
#   online  peregrine serve on the GPU + bench serve: 64 concurrent streams (step split), Poisson load on
#           code-dev.json, 1,000 concurrent streaming connections; then SIGTERM and its exit code
# Needs the carried .device (PCRE2, xxHash, ICU) and .servecarry/code-dev.json. Usage: scripts/stress/device_serving.sh PHASE
set -uo pipefail
phase=${1:-build}
out=${OUT:-/tmp/serving}
mkdir -p "$out"
[ -f .device/env.sh ] && source .device/env.sh
build=build/device-serve
bin=$build/peregrine
model=models/pycoder-tiny
llama8b=.device/shared/configs/llama-3-8b.json

case "$phase" in
build)
  start=$(date +%s)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DPEREGRINE_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" \
    >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo CONFIGURE FAILED; exit 1; }
  cmake --build "$build" -j"$(nproc)" --target peregrine scheduler_tests engine_tests >>"$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$out/build.log" | head -30; echo BUILD FAILED; exit 1; }
  echo "build: $(( $(date +%s) - start )) s"
  "$build/tests/unit/scheduler_tests" --gtest_brief=1 2>&1 | tail -2
  "$build/tests/unit/engine_tests" --gtest_brief=1 2>&1 | tail -2
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  timeout 120 "$bin" bench throughput --model "$model" --device cuda --input-len 128 --output-len 32 --concurrency 1,8
  ;;
offline)
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
  timeout 150 "$bin" bench throughput --model "$model" --device cuda --input-len 1024 --output-len 400 \
    --concurrency 1,16,64,256 2>&1 | tee "$out/throughput_tiny_cuda.txt"
  timeout 200 "$bin" bench throughput --model "$model" --random-weights --config "$llama8b" --device cuda \
    --input-len 1024 --output-len 128 --concurrency 1,32,128 2>&1 | tee "$out/throughput_llama8b_cuda.txt"
  timeout 60 "$bin" bench prefix-cache --model "$model" --device cuda 2>&1 | tee "$out/prefix_cuda.txt"
  timeout 120 "$bin" bench prefix-cache --model "$model" --device cpu --repeats 3 2>&1 | tee "$out/prefix_cpu.txt"
  timeout 120 "$bin" bench throughput --model "$model" --device cpu --input-len 256 --output-len 64 \
    --concurrency 1,16,64 2>&1 | tee "$out/throughput_tiny_cpu.txt"
  ;;
online)
  dev=${2:-cuda}
  "$bin" serve "$model" --device "$dev" --port 8321 --max-num-seqs 256 --max-queued-requests 4096 >"$out/serve_$dev.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do grep -q "serving" "$out/serve_$dev.log" && break; sleep 0.5; done
  cat "$out/serve_$dev.log"
  echo "== 64 concurrent streams (per-step split) =="
  timeout 120 "$bin" bench serve --port 8321 --num-prompts 64 --request-rate 0 --input-len 256 --output-len 256 2>&1 |
    tee "$out/serve64_$dev.txt"
  echo "== Poisson 20 req/s, code-dev.json =="
  timeout 120 "$bin" bench serve --port 8321 --num-prompts 400 --request-rate 20 --dataset .servecarry/code-dev.json \
    --input-len 512 --output-len 128 2>&1 | tee "$out/poisson_$dev.txt"
  echo "== 1,000 concurrent streaming connections =="
  timeout 200 "$bin" bench serve --port 8321 --num-prompts 1000 --request-rate 0 --input-len 64 --output-len 64 2>&1 |
    tee "$out/stress1000_$dev.txt"
  curl -s localhost:8321/metrics | grep -E "^(vllm:num_requests_running|peregrine:kv_blocks_used|peregrine:http)" || true
  kill -TERM $pid
  wait $pid
  echo "server exit code after SIGTERM: $?"
  ;;
esac
