#!/usr/bin/env bash
# W4A16 / W8A16 decode on the skinny kernel (issue 11) against a baseline binary in the same call.
# Here: OLD=path/to/old/peregrine scripts/device/w4_skinny.sh bundle (.device/carry_w4: peregrine, peregrine_old when
# OLD is set, cuda_ops_tests, the deps' libraries, llama-3-8b.json; the model stays out: scripts/device/carry_light.sh
# on before the call, off right after).
# There: source .device/carry_w4/env.sh && scripts/device/w4_skinny.sh run
# RUNS: space-separated name:binary:quantization:batch[:ENV=V,...] (binary new or old; quantization bf16 for none);
# TESTS=0 skips the op tests. Prints a table of decode tok/s last.
set -uo pipefail
case "${1:?bundle or run}" in
  bundle)
    source "$(dirname "$0")/bundle_lib.sh"
    mkdir -p "$stage/bin" "$stage/shared/configs"
    cp -r .device/deps "$stage/deps" && rm -rf "$stage/deps/usr/include"
    cp "$b/peregrine" "$b/tests/cuda/cuda_ops_tests" "$stage/bin/"
    [ -n "${OLD:-}" ] && cp "$OLD" "$stage/bin/peregrine_old"
    strip "$stage"/bin/*
    cp ../shared/configs/llama-3-8b.json "$stage/shared/configs/"
    pack .device/carry_w4 deps bin shared
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
    rows=()
    for r in ${RUNS:-}; do
      IFS=: read -r name which q bs envs <<<"$r"
      exe="$bin/peregrine"; [ "$which" = old ] && exe="$bin/peregrine_old"
      a=(); [ "$q" != bf16 ] && a=(--quantization "$q")
      e=(X=1); [ -n "$envs" ] && IFS=, read -ra e <<<"$envs"
      env "${e[@]}" timeout 100 "$exe" bench latency --random-weights --config .device/shared/configs/llama-3-8b.json \
        --device cuda --input-len 1024 --output-len 64 --iterations 2 --batch-size "$bs" "${a[@]}" >"/tmp/lat_$name.txt" 2>&1
      rc=$?
      d=$(grep -E '^decode' "/tmp/lat_$name.txt" | head -1)
      t "$name rc=$rc $d"
      rows+=("| $name | $which | $q | $bs | ${envs:-} | $d |")
    done
    echo "| run | binary | weights | bs | env | decode |"
    printf '%s\n' "${rows[@]}"
    ;;
esac
