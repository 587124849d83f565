#!/usr/bin/env bash
# One device call for quantized weights (issue 11): the CUDA W4A16/W8A16 kernels against ref (every element, rows
# across M), the quantized fixtures on CUDA (f32 and bf16 paths), and the Llama-3-8B shape with random weights: bs=1
# decode bf16 vs W4A16 vs W8A16, batch 64 and 256 steps, an 8K prefill, each the best of its iterations.
# Here: SHARED_EXTRA=models/quant scripts/device/prepare.sh --binaries; there: source .device/carry/env.sh &&
# scripts/device/quant_check.sh (BUDGET_S bounds the benches: later ones are skipped past it).
set -uo pipefail
out=${OUT:-/tmp/quant_check}
mkdir -p "$out"
start=$(date +%s)
budget=${BUDGET_S:-160}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bin=.device/bin
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout 60 "$bin/cuda_ops_tests" --gtest_filter='CudaQuantMatmul.*:CudaMatmul.CublasLt*' >"$out/cuda_quant.log" 2>&1
echo "cuda quant tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|M [0-9]" "$out/cuda_quant.log" | head -20
timeout 60 "$bin/model_tests" --gtest_filter='Quantized/*cuda*' >"$out/fidelity.log" 2>&1
echo "quantized fixtures on cuda rc=$?"; grep -E "largest|^\[  (PASSED|FAILED)|Failure" "$out/fidelity.log" | head -16
cfg=.device/shared/configs/llama-3-8b.json
bench() {  # name, then bench latency flags
  local name=$1; shift
  if [ $(( $(date +%s) - start )) -gt "$budget" ]; then echo "$name: skipped (budget)"; return; fi
  timeout 60 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --iterations 1 "$@" \
    >"$out/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -E "weights|decode|prefill|memory bandwidth" "$out/$name.txt"
}
bench bf16_bs1 --input-len 1024 --output-len 32
bench w4_bs1 --input-len 1024 --output-len 32 --quantization w4a16
bench w8_bs1 --input-len 1024 --output-len 32 --quantization w8a16
bench w4_bs64 --input-len 1024 --output-len 8 --batch-size 64 --quantization w4a16
bench bf16_bs64 --input-len 1024 --output-len 8 --batch-size 64
bench w4_prefill8k --input-len 8190 --output-len 2 --quantization w4a16
bench bf16_prefill8k --input-len 8190 --output-len 2
bench bf16_bs256 --input-len 1024 --output-len 8 --batch-size 256
bench w4_bs256 --input-len 1024 --output-len 8 --batch-size 256 --quantization w4a16
echo "total: $(( $(date +%s) - start )) s"
