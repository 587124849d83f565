#!/usr/bin/env bash
# One device call for exact speculative decoding on CUDA: pycoder-tiny's greedy output with each method against
# plain decoding (engine_model_tests' CUDA case, and bench speculative's `identical` column), and what row-exact
# verification costs on the Llama-3-8B shape (verify_bench with and without it).
# Here: scripts/device/prepare.sh --binaries; there: source .device/carry/env.sh && scripts/device/spec_exact.sh
set -uo pipefail
out=${OUT:-/tmp/spec_exact}
mkdir -p "$out"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bin=.device/bin
"$bin/peregrine" --help >/dev/null 2>&1 || { echo "carried binaries do not run here"; exit 1; }
timeout 120 "$bin/cuda_ops_tests" --gtest_filter='CudaAttention.*' >"$out/cuda_attention.log" 2>&1
echo "cuda attention tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|differs" "$out/cuda_attention.log" | head -12
timeout 150 "$bin/engine_model_tests" --gtest_filter='SpeculativeModel.*Cuda*:RunnerOnModel.Padded*' \
  >"$out/exact_cuda.log" 2>&1; echo "engine_model_tests (cuda exactness) rc=$?"
grep -E "^cuda |^\[  (PASSED|FAILED)|Failure|prompt" "$out/exact_cuda.log" | head -20
timeout 120 "$bin/model_tests" --gtest_filter='Devices/Determinism*' >"$out/determinism.log" 2>&1
echo "determinism (alone vs batched vs chunked, cpu and cuda) rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[       OK" "$out/determinism.log" | head -4
data=.device/shared/code-dev.json
timeout 150 "$bin/peregrine" bench speculative --model models/pycoder-tiny --dataset "$data" --device cuda \
  --concurrency 1,8 --output-len 128 \
  --speculative-config '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}' \
  --speculative-config '{"method": "lookahead", "num_speculative_tokens": 6}' \
  --speculative-config '{"method": "lookahead", "num_speculative_tokens": 15}' \
  --speculative-config '{"method": "lookahead", "num_speculative_tokens": 5, "num_branches": 3, "max_tree_tokens": 12}' \
  --speculative-config '{"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3}' \
  --json-out "$out/spec_tiny.json" >"$out/spec_tiny.txt" 2>&1; echo "bench speculative rc=$?"
cfg=.device/shared/configs/llama-3-8b.json
for mode in exact shared; do
  flag=""; [ "$mode" = shared ] && flag="--no-row-exact"
  timeout 90 "$bin/verify_bench" --config "$cfg" --device cuda --context 1024 --batches 1,8,32 --ks 0,3,7,15 --trees 12,32,64 \
    --repeats 8 $flag >"$out/verify_8b_$mode.txt" 2>&1; echo "verify_bench $mode rc=$?"
done
echo "total: $(( $(date +%s) - start )) s"
echo "== pycoder-tiny on the H200 (identical = greedy tokens equal plain decoding's)"; cat "$out/spec_tiny.txt"
echo "== verify cost, Llama-3-8B shape, row-exact pieces (ms per step; ratio to k=0)"; cat "$out/verify_8b_exact.txt"
echo "== the same, rows sharing kernel tiles (--no-row-exact)"; cat "$out/verify_8b_shared.txt"
