#!/usr/bin/env bash
# One device call for speculative decoding on the H200: CUDA op tests, the cost of verifying k drafts on the
# Llama-3-8B shape (random weights; graphs for decode and verify steps), and pycoder-tiny end to end with each
# method beside plain decoding on the code workloads (outputs checked identical).
# Here: scripts/device/prepare.sh --binaries; there: source .device/carry/env.sh && scripts/device/spec_check.sh
set -uo pipefail
out=${OUT:-/tmp/spec_check}
mkdir -p "$out"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bin=.device/bin
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout 240 "$bin/cuda_ops_tests" >"$out/cuda_ops_tests.log" 2>&1; echo "cuda_ops_tests rc=$?"
grep -E "^\[  (PASSED|FAILED)" "$out/cuda_ops_tests.log" | head -5
timeout 60 "$bin/engine_model_tests" --gtest_filter='*cuda*' >"$out/kv_cuda.log" 2>&1; echo "kv cache cuda rc=$?"
cfg=.device/shared/configs/llama-3-8b.json
timeout 200 "$bin/verify_bench" --config "$cfg" --device cuda --context 1024 --batches 1,8,32 \
  --ks 0,1,2,3,4,5,7,8,15 --repeats 10 >"$out/verify_8b.txt" 2>&1; echo "verify_bench rc=$?"
data=.device/shared/code-dev.json
timeout 300 "$bin/peregrine" bench speculative --model models/pycoder-tiny --dataset "$data" --device cuda \
  --concurrency 1,8,32 --output-len 128 \
  --speculative-config '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}' \
  --speculative-config '{"method": "lookahead", "num_speculative_tokens": 6}' \
  --speculative-config '{"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3}' \
  --json-out "$out/spec_tiny.json" >"$out/spec_tiny.txt" 2>&1; echo "bench speculative rc=$?"
echo "total: $(( $(date +%s) - start )) s"
echo "== verify cost, Llama-3-8B shape (ms per step; ratio to k=0)"; cat "$out/verify_8b.txt"
echo "== pycoder-tiny on the H200"; cat "$out/spec_tiny.txt"
