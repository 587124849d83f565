#!/usr/bin/env bash
# W4A16 / W8A16 decode on the skinny kernel (issue 11) against a baseline binary in the same call.
# Here: OLD=path/to/old/peregrine scripts/device/w4_skinny.sh bundle (.device/carry_w4: peregrine, peregrine_old when
# OLD is set, cuda_ops_tests, EXTRA_BINS (paths under the build, e.g. bench/cuda/cuda_ops_bench), the deps' libraries, llama-3-8b.json; with MODEL=1 also model_tests, pycoder-tiny's
# weights and reference and int4 fixtures of ../shared/models/quant (QUANT_FIXTURES: which); MODEL_ONLY=1 leaves
# peregrine and the op tests out: a model-test call). The tree's copy of the model stays out either way:
# scripts/device/carry_light.sh on before the call, off right after.
# There: source .device/carry_w4/env.sh && scripts/device/w4_skinny.sh run
# RUNS: space-separated name:binary:quantization:batch[:ENV=V,...] (binary new or old; quantization bf16 for none);
# TESTS=0 skips the op tests (OPS: their filter); MODEL_TESTS: the model tests' filter (when the bundle has them;
# none skips them). PYCODER=0 leaves pycoder-tiny's weights out of a MODEL=1 bundle (room for the binaries beside
# every quantized fixture; then MODEL_TESTS='Quantized/*cuda*').
# INPUT_LEN / OUTPUT_LEN: the bench's lengths (1024 / 64); SHOW=prefill shows the prefill line instead of decode.
# Prints a table of decode tok/s last.
set -uo pipefail
case "${1:?bundle or run}" in
  bundle)
    source "$(dirname "$0")/bundle_lib.sh"
    mkdir -p "$stage/bin" "$stage/shared/configs" "$stage/shared/models/quant"
    cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
    [ "${MODEL_ONLY:-0}" = 1 ] || cp "$b/peregrine" "$b/tests/cuda/cuda_ops_tests" "$stage/bin/"
    for x in ${EXTRA_BINS:-}; do cp "$b/$x" "$stage/bin/"; done  # e.g. EXTRA_BINS=bench/cuda/cuda_ops_bench
    [ -n "${OLD:-}" ] && cp "$OLD" "$stage/bin/peregrine_old"
    cp ../shared/configs/llama-3-8b.json "$stage/shared/configs/"
    mkdir -p "$stage/tools" && cp ../shared/tools/make_random_gguf.py "$stage/tools/"  # llama_cpp_peer.sh PEER=0
    extra=()
    if [ "${MODEL:-0}" = 1 ]; then
      cp "$b/tests/unit/model_tests" "$stage/bin/"
      mkdir -p "$stage/model"
      cp ../shared/models/pycoder-tiny.reference.json "$stage/shared/models/"
      cp ../shared/models/quant/README.md "$stage/shared/models/quant/"
      for f in ${QUANT_FIXTURES:-ct-w4a16-g128 ct-w4a16-g128-asym gptq-w4g128-actorder-asym}; do
        cp -r "../shared/models/quant/$f" "$stage/shared/models/quant/"
      done
      extra=()
      if [ "${PYCODER:-1}" = 1 ]; then cp models/pycoder-tiny/model.safetensors "$stage/model/"; extra=(model); fi
    fi
    strip "$stage"/bin/*
    pack .device/carry_w4 deps bin shared tools "${extra[@]}"
    ;;
  run)
    start=$(date +%s)
    t() { echo "[$(( $(date +%s) - start )) s] $*"; }
    bin=.device/bin
    nvidia-smi --query-gpu=name --format=csv,noheader
    if [ "${TESTS:-1}" = 1 ]; then
      timeout 200 "$bin/cuda_ops_tests" --gtest_filter="${OPS:-CudaQuant*:CudaSkinny*:CudaFusedMatmul.*:CudaMatmul*}" >/tmp/ops.log 2>&1
      t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|elements out" /tmp/ops.log | head -20
    fi
    if [ -x "$bin/model_tests" ] && [ "${MODEL_TESTS:-}" != none ]; then
      [ -f models/pycoder-tiny/model.safetensors ] || [ ! -f .device/model/model.safetensors ] ||
        cp .device/model/model.safetensors models/pycoder-tiny/
      ln -sfn "$PWD/models/pycoder-tiny" .device/shared/models/pycoder-tiny
      PEREGRINE_SHARED_DIR="$PWD/.device/shared" timeout 240 "$bin/model_tests" \
        --gtest_filter="${MODEL_TESTS:-*Determinism*:Quantized/*cuda*}" >/tmp/model.log 2>&1
      t "model tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|^\[       OK|SKIPPED \]" /tmp/model.log | head -24
    fi
    rows=()
    for r in ${RUNS:-}; do
      IFS=: read -r name which q bs envs <<<"$r"
      exe="$bin/peregrine"; [ "$which" = old ] && exe="$bin/peregrine_old"
      a=(); [ "$q" != bf16 ] && a=(--quantization "$q")
      e=(X=1); [ -n "$envs" ] && IFS=, read -ra e <<<"$envs"
      env "${e[@]}" timeout 100 "$exe" bench latency --random-weights --config .device/shared/configs/llama-3-8b.json \
        --device cuda --input-len "${INPUT_LEN:-1024}" --output-len "${OUTPUT_LEN:-64}" --iterations 2 --batch-size "$bs" \
        "${a[@]}" >"/tmp/lat_$name.txt" 2>&1
      rc=$?
      d=$(grep -E "^${SHOW:-decode}" "/tmp/lat_$name.txt" | head -1)
      t "$name rc=$rc $d"
      rows+=("| $name | $which | $q | $bs | ${envs:-} | $d |")
    done
    echo "| run | binary | weights | bs | env | decode |"
    printf '%s\n' "${rows[@]}"
    ;;
esac
