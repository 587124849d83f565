#!/usr/bin/env bash
# Issue 15's GPU checks and figures on binaries carried from this machine's CUDA build
# (scripts/device/structured_bundles.sh makes .device/carry_s1, _s2 and _s3). There, one call per part, e.g.
#   tar -xJf .device/carry_s1/bundle.tar.xz -C .device && source .device/carry_s1/env.sh && scripts/device/structured_check.sh s
# with carry_s1 for part s, carry_s2 for m, carry_s3 for t:
#   t  cuda_ops_tests (sampling with token masks, memcheck) and engine_model_tests (constrained rows on the GPU)
#   m  structured_bench on one idle core (DFA built at compile time, and lazily)
#   s  serve throughput at concurrency 32 on the H200 (pycoder-tiny), unconstrained and constrained alternated three
#      times each (b: m and s)
set -uo pipefail
part=${1:?part t|m|s|b}
out=${OUT:-/tmp/structured_check}
mkdir -p "$out"
bin=.device/bin
start=$(date +%s)
case "$part" in
t)
  timeout 120 "$bin/cuda_ops_tests" --gtest_filter='CudaSampling.*' >"$out/cuda_sampling.log" 2>&1
  echo "cuda_ops_tests CudaSampling.* rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED" "$out/cuda_sampling.log" | head
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaSampling.TokenMasks*:CudaSampling.AgreesWithTheHostReference' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
  timeout 240 "$bin/engine_model_tests" --gtest_filter='*Constrained*:*CudaSampling*:*Cuda*' >"$out/engine_model.log" 2>&1
  echo "engine_model_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[       OK" "$out/engine_model.log" | head -20
  ;;
b|m)
  tok=.device/tokenizer-llama3
  for run in 1 2; do
    taskset -c 3 "$bin/structured_bench" "$tok" tests/e2e/fixtures/structured_schemas.json 64 >"$out/structured_bench_$run.txt" 2>&1
    echo "structured_bench run $run rc=$?"
  done
  taskset -c 3 "$bin/structured_bench" "$tok" tests/e2e/fixtures/structured_schemas.json 64 lazy >"$out/structured_bench_lazy.txt" 2>&1
  echo "structured_bench lazy rc=$?"
  echo "== structured_bench (idle core)"
  for f in "$out"/structured_bench_*.txt; do echo "-- $(basename "$f" .txt)"; grep -E "DFA built|compile|mask" "$f"; done
  ;;&
b|s)
  port=18431
  "$bin/peregrine" serve models/pycoder-tiny --device cuda --port $port --max-model-len 1024 >"$out/serve.log" 2>&1 &
  srv=$!
  for i in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  schema='{"type":"array","items":{"type":"object","properties":{"name":{"type":"string","maxLength":20},"n":{"type":"integer"}},"required":["name","n"],"additionalProperties":false}}'
  extra="{\"structured_outputs\": {\"json\": $(printf '%s' "$schema" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}}"
  bench() {  # name, then extra flags
    local name=$1; shift
    timeout 120 "$bin/peregrine" bench serve --port $port --num-prompts 1024 --max-concurrency 32 --input-len 32 \
      --output-len 64 --vocab-size 8000 "$@" >"$out/$name.txt" 2>&1
    echo "$name rc=$?"
  }
  bench warmup
  for r in 1 2 3; do
    bench plain_$r
    bench constrained_$r --extra-body "$extra"
  done
  kill $srv 2>/dev/null; wait $srv 2>/dev/null
  grep -E "backend_sampled|error" "$out/serve.log" | head -5
  for f in "$out"/plain_*.txt "$out"/constrained_*.txt; do
    echo "$(basename "$f" .txt): $(grep -E 'output throughput' "$f" | head -1)"
  done
  ;;
esac
echo "total: $(( $(date +%s) - start )) s"
