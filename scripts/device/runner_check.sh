#!/usr/bin/env bash
# One device call for the model-runner house (issue 9): CUDA op tests, KV block copy/swap on CUDA, fidelity and
# determinism through the Engine on CUDA, then the old binary against the new one, alternating, on the 8B shape:
# bs=1 decode (bench latency) and offline throughput at concurrency 64.
# Here: scripts/device/prepare.sh --binaries --old OLD_BINARY; there:
#   source .device/carry/env.sh && scripts/device/runner_check.sh
set -uo pipefail
out=${OUT:-/tmp/runner_check}
mkdir -p "$out"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader
bin=.device/bin
if ! "$bin/peregrine" --help >/dev/null 2>&1; then
  echo "carried binaries do not run here ($("$bin/peregrine" --help 2>&1 | head -2)); building"
  b=build/device
  cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" -DPEREGRINE_BUILD_BENCH=OFF >"$out/build.log" 2>&1 &&
  cmake --build "$b" -j"$(nproc)" --target peregrine model_tests engine_model_tests cuda_ops_tests >>"$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$out/build.log" | head -20; echo "BUILD FAILED"; exit 1; }
  mkdir -p "$b/bin" && cp "$b/peregrine" "$b/tests/unit/model_tests" "$b/tests/unit/engine_model_tests" \
    "$b/tests/cuda/cuda_ops_tests" "$b/bin/" && cp "$bin/peregrine-old" "$b/bin/" 2>/dev/null
  bin="$b/bin"
  echo "build: $(( $(date +%s) - start )) s"
fi

summary() { grep -E "^\[  (PASSED|FAILED)|^\[  FAILED  \]|largest" "$1" | head -${2:-12}; }
timeout 240 "$bin/cuda_ops_tests" >"$out/cuda_ops_tests.log" 2>&1; echo "cuda_ops_tests rc=$?"; summary "$out/cuda_ops_tests.log"
timeout 60 "$bin/engine_model_tests" --gtest_filter='*cuda*' >"$out/kv_cuda.log" 2>&1; echo "kv cache cuda rc=$?"
summary "$out/kv_cuda.log"
timeout 240 "$bin/model_tests" --gtest_filter='*cuda*:Devices/Determinism.*/1' >"$out/model_tests.log" 2>&1
echo "model_tests cuda rc=$?"; summary "$out/model_tests.log" 16
echo "tests: $(( $(date +%s) - start )) s"

cfg=.device/shared/configs/llama-3-8b.json
for round in 1 2; do
  for b in peregrine-old peregrine; do
    timeout 150 "$bin/$b" bench latency --random-weights --config "$cfg" --device cuda --json --input-len 1024 \
      --output-len 128 --iterations 2 2>>"$out/bench.err" | sed "s/^/{\"bin\":\"$b\",\"round\":$round,\"r\":/; s/\$/}/" |
      tee -a "$out/latency.jsonl" >/dev/null
  done
done
for round in 1 2; do
  for b in peregrine-old peregrine; do
    echo "== $b round $round" >>"$out/throughput.log"
    timeout 150 "$bin/$b" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" --device cuda \
      --input-len 1024 --output-len 400 --concurrency 64 >>"$out/throughput.log" 2>&1
  done
done
echo "total: $(( $(date +%s) - start )) s"
python3 - "$out" <<'PY'
import json, sys, re
out = sys.argv[1]
print("bs=1 decode, Llama-3-8B shape (1024 in / 128 out, best of 2 iterations)")
print(f"{'binary':15} {'round':>5} {'tok/s':>8} {'ms/step':>8} {'%copy':>6} {'prefill TF/s':>12} {'ready s':>8}")
for line in open(f"{out}/latency.jsonl"):
    try: j = json.loads(line)
    except Exception: continue
    r = j["r"]
    print(f"{j['bin']:15} {j['round']:>5} {r['decode_tokens_per_s']:8.1f} {r['decode_ms_per_step']:8.2f} "
          f"{100*r['decode_fraction_of_copy_bw']:6.1f} {r['prefill_tflops']:12.1f} {r['ready_s']:8.2f}")
print("offline 1024/400 at concurrency 64")
name = None
for line in open(f"{out}/throughput.log"):
    if line.startswith("=="): name = line.strip("= \n")
    elif re.match(r"\s*64\s", line): print(f"{name:25} {line.strip()}")
PY
