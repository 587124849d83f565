#!/usr/bin/env bash
# Speculative decoding on the GPU with pycoder-tiny (issue 10): the engine's CUDA tests and `bench speculative`.
# Here: scripts/device/spec_gpu.sh bundle (.device/carry_sp: peregrine, engine_model_tests, the deps' libraries,
# pycoder-tiny's weights and code-dev.json; DRAFT=1: pycoder-draft instead of engine_model_tests, for the 64 MiB)
# and scripts/device/carry_light.sh on (off right after).
# There: source .device/carry_sp/env.sh && scripts/device/spec_gpu.sh run
# TESTS: the engine tests' gtest filter (default: the CUDA ones); BENCH=0 skips the benchmark; LEVELS, LEN, PROMPTS,
# REPEATS, WORKLOADS: its concurrency levels, output length, prompts per level, repeats and workloads.
set -uo pipefail
case "${1:?bundle or run}" in
  bundle)
    source "$(dirname "$0")/bundle_lib.sh"
    mkdir -p "$stage/bin" "$stage/spec" "$stage/model"
    cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
    cp "$b/peregrine" "$stage/bin/"
    [ "${DRAFT:-0}" = 1 ] || cp "$b/tests/unit/engine_model_tests" "$stage/bin/"
    strip "$stage"/bin/*
    cp models/pycoder-tiny/model.safetensors "$stage/model/"
    cp ../shared/data/code-dev.json "$stage/spec/"
    # DRAFT=1: pycoder-draft instead of the engine tests (both, with the tree, pass the 64 MiB of a call).
    [ "${DRAFT:-0}" = 1 ] && cp -r ../shared/models/pycoder-draft "$stage/spec/"
    pack .device/carry_sp deps bin spec model
    ;;
  run)
    start=$(date +%s)
    t() { echo "[$(( $(date +%s) - start )) s] $*"; }
    cp .device/model/model.safetensors models/pycoder-tiny/
    nvidia-smi --query-gpu=name --format=csv,noheader
    [ -x .device/bin/engine_model_tests ] && timeout 200 .device/bin/engine_model_tests --gtest_filter="${TESTS:-*OnCuda*:SpeculativeModel.*Cuda*}" >/tmp/spec_tests.log 2>&1
    t "engine tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|^\[       OK" /tmp/spec_tests.log | head -20
    [ "${BENCH:-1}" = 0 ] && exit 0
    draft=()
    [ -d .device/spec/pycoder-draft ] &&
      draft=(--speculative-config '{"method": "draft_model", "num_speculative_tokens": 4, "model": ".device/spec/pycoder-draft"}')
    timeout 300 .device/bin/peregrine bench speculative --model models/pycoder-tiny --dataset .device/spec/code-dev.json \
      --device cuda --concurrency "${LEVELS:-1,8,32}" --num-prompts "${PROMPTS:-0}" --output-len "${LEN:-128}" \
      --repeats "${REPEATS:-2}" --workloads "${WORKLOADS:-edit,complete}" \
      --speculative-config '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}' \
      --speculative-config '{"method": "lookahead", "num_speculative_tokens": 6}' \
      --speculative-config '{"method": "lookahead", "num_speculative_tokens": 5, "num_branches": 3, "max_tree_tokens": 12}' \
      "${draft[@]}" \
      --speculative-config '{"method": "self", "draft_num_layers": 3, "num_speculative_tokens": 3}' 2>&1 | grep -v "^\["
    t "bench done"
    ;;
esac
