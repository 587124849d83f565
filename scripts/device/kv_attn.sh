#!/usr/bin/env bash
# 8-bit KV caches on the tensor-core attention kernels (issue 12): op tests, the model-level fidelity test, the
# kernels against the bf16 cache's, and an 8B offline run with and without --kv-cache-dtype fp8.
# Here: scripts/device/kv_attn.sh bundle (.device/carry_kv: peregrine, cuda_ops_tests, cuda_ops_bench, model_tests,
# the deps' libraries, llama-3-8b.json, pycoder-tiny's weights and reference) and scripts/device/carry_light.sh on
# (off right after).
# There: source .device/carry_kv/env.sh && scripts/device/kv_attn.sh run
# OPS: the op tests' gtest filter; MODEL_TESTS the model tests' (e.g. '*Determinism*:KvCacheQuant.*Cuda*'); SAN=0 skips compute-sanitizer; THROUGHPUT=0 skips the 8B runs (bf16; fp8 KV;
# fp8 weights + fp8 KV); CONC: their concurrency levels (default 64,256).
set -uo pipefail
case "${1:?bundle or run}" in
  bundle)
    source "$(dirname "$0")/bundle_lib.sh"
    mkdir -p "$stage/bin" "$stage/shared/configs" "$stage/shared/models" "$stage/model"
    cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
    cp "$b/peregrine" "$b/tests/cuda/cuda_ops_tests" "$b/bench/cuda/cuda_ops_bench" "$b/tests/unit/model_tests" "$stage/bin/"
    strip "$stage"/bin/*
    cp ../shared/configs/llama-3-8b.json "$stage/shared/configs/"
    cp ../shared/models/pycoder-tiny.reference.json "$stage/shared/models/"
    cp models/pycoder-tiny/model.safetensors "$stage/model/"
    pack .device/carry_kv deps bin shared model
    ;;
  run)
    start=$(date +%s)
    t() { echo "[$(( $(date +%s) - start )) s] $*"; }
    bin=.device/bin
    [ -f models/pycoder-tiny/model.safetensors ] || cp .device/model/model.safetensors models/pycoder-tiny/
    ln -sfn "$PWD/models/pycoder-tiny" .device/shared/models/pycoder-tiny
    export PEREGRINE_SHARED_DIR="$PWD/.device/shared"
    nvidia-smi --query-gpu=name --format=csv,noheader
    timeout 240 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaAttention.*:CudaKvQuant.*}" >/tmp/ops.log 2>&1
    t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|^\[       OK|elements out" /tmp/ops.log | head -30
    timeout 240 "$bin/model_tests" --gtest_filter="${MODEL_TESTS:-KvCacheQuant.*Cuda*}" >/tmp/model.log 2>&1
    t "model test rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|pycoder-tiny|greedy" /tmp/model.log | head -20
    if [ "${SAN:-1}" = 1 ]; then
      timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
        --gtest_filter='CudaKvQuant.*:CudaAttention.RowExact*' >/tmp/san.log 2>&1
      t "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -5
    fi
    timeout 150 "$bin/cuda_ops_bench" --kv-cache-only >/tmp/kvbench.txt 2>&1
    t "kv bench rc=$?"
    if [ "${THROUGHPUT:-1}" = 1 ]; then
      for run in "auto" "fp8" "fp8 fp8"; do
        set -- $run
        q=(); [ -n "${2:-}" ] && q=(--quantization "$2")
        timeout 200 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights \
          --config .device/shared/configs/llama-3-8b.json --device cuda --input-len 1024 --output-len 400 \
          --concurrency "${CONC:-64,256}" --kv-cache-dtype "$1" "${q[@]}" >"/tmp/tp_${1}_${2:-bf16}.txt" 2>&1
        t "throughput kv $1 weights ${2:-bf16} rc=$?"; grep -vE "^\[|^$" "/tmp/tp_${1}_${2:-bf16}.txt" | tail -8
      done
    fi
    grep -E "^\| " /tmp/kvbench.txt
    ;;
esac
