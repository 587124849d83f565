#!/usr/bin/env bash
# This wave's GPU checks in parts, one device call each, on binaries carried from this machine's CUDA build (the
# tracked tree is ~46 MiB of a call's 64, so each part carries only what it needs; .device/bin accumulates while the
# machine stays warm). Build the bundles here with scripts/device/wave_bundles.sh, then there:
#   a: tar -xJf .device/carry/a.tar.xz -C .device && source .device/carry/env.sh && scripts/device/wave_check.sh a
#   (b, c, d, e alike). Each part ends with a short table.
#   a  peregrine: GGUF 8B-shape decode (bs 1, 32; Q8_0, Q4_0, Q4_K made here), FP8 W8A8 vs bf16 (bs=1, prefill 8K),
#      fp8 KV decode
#   b  cuda_ops_tests + cuda_ops_bench: every CUDA op test, memcheck on the new kernels, ggml and FP8 kernel benches
#   c  model_tests + the 8-bit fixtures: model tests on CUDA (fidelity, determinism, W8A8 fixtures)
#   d  the GGUF q4_0 fixture: GGUF model test on CUDA against llama.cpp's references
#   e  engine_model_tests: the engine's CUDA tests (GPU sampling, tiers, quantized KV through the tiers)
set -uo pipefail
part=${1:?part a|b|c|d|e}
out=${OUT:-/tmp/wave_check}
mkdir -p "$out"
start=$(date +%s)
bin=.device/bin
export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
cfg=.device/shared/configs/llama-3-8b.json
case "$part" in
a)
  tools=.device/shared/tools
  for d in q8_0 q4_0; do
    [ -f "/tmp/8b-$d.gguf" ] || timeout 200 python3 "$tools/make_random_gguf.py" --hidden 4096 --layers 32 --heads 32 \
      --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 8192 --dtype "$d" --out "/tmp/8b-$d.gguf" >>"$out/make.log" 2>&1
  done
  [ -f /tmp/8b-q4_k.gguf ] || python3 bench/gguf_q4_0_to_q4_k.py /tmp/8b-q4_0.gguf /tmp/8b-q4_k.gguf >>"$out/make.log" 2>&1
  echo "made: $(ls /tmp/8b-*.gguf 2>/dev/null | tr '\n' ' ') ($(( $(date +%s) - start )) s)"; tail -2 "$out/make.log"
  for f in q8_0 q4_0 q4_k; do
    for bs in 1 32; do
      [ -f "/tmp/8b-$f.gguf" ] || continue
      timeout 120 "$bin/peregrine" bench latency --model "/tmp/8b-$f.gguf" --device cuda --input-len 512 --output-len 64 \
        --batch-size "$bs" --iterations 2 >"$out/gguf_${f}_bs$bs.txt" 2>&1
      echo "gguf $f bs=$bs rc=$?"
    done
  done
  lat() {  # name, then flags
    local name=$1; shift
    timeout 100 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --iterations 1 "$@" \
      >"$out/$name.txt" 2>&1
    echo "$name rc=$?"
  }
  lat bf16_bs1 --input-len 1024 --output-len 32
  lat fp8_bs1 --input-len 1024 --output-len 32 --quantization fp8
  lat bf16_prefill8k --input-len 8190 --output-len 2
  lat fp8_prefill8k --input-len 8190 --output-len 2 --quantization fp8
  lat fp8kv_bs1 --input-len 1024 --output-len 32 --kv-cache-dtype fp8
  lat w8a8int8_bs1 --input-len 1024 --output-len 32 --quantization w8a8-int8
  echo "total: $(( $(date +%s) - start )) s"
  for f in "$out"/gguf_*.txt "$out"/bf16_*.txt "$out"/fp8*.txt "$out"/w8a8*.txt; do
    [ -f "$f" ] || continue
    echo "== $(basename "$f" .txt)"; grep -E "decode|prefill|error|Error" "$f" | head -4
  done
  ;;
b)
  timeout 200 "$bin/cuda_ops_tests" >"$out/cuda_ops_tests.log" 2>&1
  echo "cuda_ops_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|^\[==========\]" "$out/cuda_ops_tests.log" | head -20
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaGgml*:CudaW8Matmul.*:CudaKvQuant.*:CudaSampling.*' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" "$out/memcheck.log" | head -4
  timeout 150 "$bin/cuda_ops_bench" --ggml-only >"$out/ggml_bench.log" 2>&1; echo "ggml bench rc=$?"
  timeout 120 "$bin/cuda_ops_bench" --fp8-only "$out/fp8_bench.md" >"$out/fp8_bench.log" 2>&1; echo "fp8 bench rc=$?"
  echo "total: $(( $(date +%s) - start )) s"
  echo "== ggml kernels"; sed -n '/^| measurement/,$p' "$out/ggml_bench.log"
  echo "== fp8"; tail -8 "$out/fp8_bench.log"
  ;;
c)
  timeout 300 "$bin/model_tests" --gtest_filter='*cuda*:*Cuda*:*CUDA*' >"$out/model_tests.log" 2>&1
  echo "model_tests (CUDA cases) rc=$?"
  grep -E "^\[  FAILED|Failure|largest|^\[  PASSED|^\[  SKIPPED|OK \]" "$out/model_tests.log" | head -40
  ;;
d)
  timeout 300 "$bin/model_tests" --gtest_filter='Cuda/GgufModel.*' >"$out/gguf_model.log" 2>&1
  echo "GGUF model tests on CUDA rc=$?"
  grep -E "steps|^\[  FAILED|Failure|^\[  PASSED|^\[  SKIPPED|OK \]|agree" "$out/gguf_model.log" | head -20
  ;;
e)
  timeout 300 "$bin/engine_model_tests" --gtest_filter='*Cuda*:*Quantized*' >"$out/engine.log" 2>&1
  echo "engine_model_tests rc=$?"; grep -E "^\[  FAILED|Failure|^\[  PASSED|OK \]|SKIPPED" "$out/engine.log" | head -20
  ;;
esac
