#!/usr/bin/env bash
# The switches that wait for their first GPU run (2026-12-07, off by default), checked and measured in one call:
#   PEREGRINE_DECODE_COMBINE_VEC=1  the split combine with four outputs a thread
#   PEREGRINE_SILU_GGML_GRID=1      SiLU·mul's GGUF x blocks from a grid over the row's pieces
#   PEREGRINE_ADJACENT_QKV=1        dense q/k/v stacked at load and run as one GEMM past M = 16
#   PEREGRINE_SPLITK_PARTIALS_MB=N  the cuBLASLt split-K row-chunk cap (default 32)
# Here: XZ_LEVEL=6 EXTRA_BINS=bench/cuda/cuda_ops_bench scripts/device/w4_skinny.sh bundle, then
# scripts/device/carry_light.sh on (off right after); there:
#   source .device/carry_w4/env.sh && OUT=$OUT scripts/device/switches_ab.sh
# Each measurement runs the default and the switch beside it, alternating; a table last. SKIP: space-separated parts
# to leave out (tests kv c256 prefill gguf): all of it is about nine minutes, so two calls (e.g. SKIP="c256 prefill",
# then SKIP="tests kv gguf").
set -uo pipefail
out=${OUT:-/tmp/switches_ab}
mkdir -p "$out"
bin=.device/bin
cfg=.device/shared/configs/llama-3-8b.json
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
skip() { [[ " ${SKIP:-} " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name --format=csv,noheader
rows=()
if ! skip tests; then
  timeout 150 "$bin/cuda_ops_tests" --gtest_filter='CudaAttention.TheFour*:CudaGgmlPacked.SiluGrid*:CudaMatmul.Adjacent*:CudaAttention.ResultDoesNotDependOnBatch:CudaGgmlPacked.NormAndSilu*' >"$out/ops.log" 2>&1
  t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure" "$out/ops.log" | head -12
  # The attention and GGUF op tests again with the switches on by default (their own comparisons aside).
  PEREGRINE_DECODE_COMBINE_VEC=1 PEREGRINE_SILU_GGML_GRID=1 timeout 150 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaAttention.*-CudaAttention.LongDecodes*:CudaGgmlPacked.*' >"$out/ops_on.log" 2>&1
  t "op tests, switches on, rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$out/ops_on.log" | head -8
fi
if ! skip kv; then
  for r in 1 2; do
    for e in X=0 PEREGRINE_DECODE_COMBINE_VEC=1; do
      env "$e" timeout 60 "$bin/cuda_ops_bench" --kv-cache-only >"$out/kv_${e%%=*}_$r.md" 2>&1
      t "kv bench $e round $r rc=$?"
      grep -E "decode attention" "$out/kv_${e%%=*}_$r.md" | grep -v int8 | sed -E 's/ +\| +/ | /g' | cut -c1-140
    done
  done
fi
# One 8B-shape run under a switch: c256 (offline 1024 / 400 at concurrency 256) or prefill (8,190 tokens), bf16.
run() {  # kind, label, env
  local kind=$1 label=$2 e=$3 line rc
  if [ "$kind" = c256 ]; then
    env "$e" timeout 150 "$bin/peregrine" bench throughput --model models/pycoder-tiny --random-weights --config "$cfg" \
      --device cuda --input-len 1024 --output-len 400 --concurrency 256 >"$out/${kind}_$label.txt" 2>&1
    rc=$?
    line=$(awk '$1 == 256 {print $4 " output tok/s, " $NF " of roof"; exit}' "$out/${kind}_$label.txt")
  else
    env "$e" timeout 90 "$bin/peregrine" bench latency --random-weights --config "$cfg" --device cuda --input-len 8190 \
      --output-len 2 --batch-size 1 --iterations 3 >"$out/${kind}_$label.txt" 2>&1
    rc=$?
    line=$(grep -E '^prefill' "$out/${kind}_$label.txt" | head -1 | sed -E 's/^prefill +//')
  fi
  t "$kind $label ($e) rc=$rc: $line"
  rows+=("| $kind bf16 | $e | $line |")
}
if ! skip c256; then
  run c256 default X=0
  run c256 combine PEREGRINE_DECODE_COMBINE_VEC=1
  run c256 qkv PEREGRINE_ADJACENT_QKV=1
  run c256 partials PEREGRINE_SPLITK_PARTIALS_MB=320
fi
if ! skip prefill; then
  run prefill default X=0
  run prefill qkv PEREGRINE_ADJACENT_QKV=1
  run prefill partials PEREGRINE_SPLITK_PARTIALS_MB=320
fi
if ! skip gguf; then
  source "$(dirname "$0")/make_8b_ggufs.sh"
  make_8b_ggufs "$out/make.log" q4_0 q4_k_m
  for r in 1 2; do
    for f in q4_k_m q4_0; do
      for e in X=0 PEREGRINE_SILU_GGML_GRID=1; do
        line=$(env "$e" timeout 100 "$bin/peregrine" bench latency --model "/tmp/8b-$f.gguf" --device cuda --input-len 512 \
          --output-len 64 --batch-size 1 --iterations 3 2>&1 | grep -E '^decode' | sed -E 's/^decode +//')
        t "gguf $f $e round $r: $line"
        rows+=("| $f bs 1, round $r | $e | $line |")
      done
    done
  done
fi
echo
echo "| run | switch | figure |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
t done
