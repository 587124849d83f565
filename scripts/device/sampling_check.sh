#!/usr/bin/env bash
# One device call for sampling on the GPU (Backend::sample wired into the engine): the kernels against the host
# reference, the engine's CUDA tests (device-sampled greedy = host-sampled greedy; seeded runs reproducible),
# memcheck on the kernel test, and offline throughput on the Llama-3-8B shape with rows sampled on the host
# (PEREGRINE_SAMPLING=host) and on the GPU, in the same run.
# Here: SHARED=configs BINARIES="peregrine cuda_ops_tests" scripts/device/prepare.sh --binaries (engine_model_tests
# does not fit beside them: send it in a second call, then TESTS_ONLY=1);
# there: source .device/carry/env.sh && scripts/device/sampling_check.sh
set -uo pipefail
out=${OUT:-/tmp/sampling_check}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout 150 "$bin/cuda_ops_tests" >"$out/kernels.log" 2>&1
echo "cuda_ops_tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|CudaSampling.*OK" "$out/kernels.log" | head -12
if [ -x "$bin/engine_model_tests" ]; then
  timeout 200 "$bin/engine_model_tests" --gtest_filter='EngineModelTest.*Cuda*' >"$out/engine.log" 2>&1
  echo "engine CUDA tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|OK \]" "$out/engine.log" | head -10
fi
[ "${TESTS_ONLY:-0}" = 1 ] && exit 0
if command -v compute-sanitizer >/dev/null; then
  timeout 120 compute-sanitizer --tool memcheck "$bin/cuda_ops_tests" \
    --gtest_filter='CudaSampling.AgreesWithTheHostReference' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | head -2
fi
cfg=.device/shared/configs/llama-3-8b.json
conc=${CONCURRENCY:-1,64,256}
len=${OUTPUT_LEN:-200}
for where in host device; do
  if [ "$where" = host ]; then export PEREGRINE_SAMPLING=host; else unset PEREGRINE_SAMPLING; fi
  timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len "$len" --concurrency "$conc" >"$out/throughput_$where.log" 2>&1
  echo "throughput ($where sampling) rc=$?"
done
unset PEREGRINE_SAMPLING
echo "total: $(( $(date +%s) - start )) s"
for where in host device; do
  echo "== bench throughput 1024/$len, Llama-3-8B shape bf16, sampling on the $where"; tail -12 "$out/throughput_$where.log"
done
