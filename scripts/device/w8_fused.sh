#!/usr/bin/env bash
# The 8-bit skinny kernel quantizing x in its blocks and its fusions (issue 12, FP8 / int8 W8A8 at batch 1..8):
# op tests (every element; the fusions bit for bit the unfused ops), greedy pycoder-tiny outputs fused vs unfused
# (identical JSON, logprobs included), compute-sanitizer, then 8B-shape bs=1 decode: bf16, FP8 and int8 W8A8 as they
# run now, FP8 with a tile a block (PEREGRINE_W8_TILES_PER_BLOCK=1), FP8 unfused (PEREGRINE_FUSE=0) and FP8 as before
# (PEREGRINE_FUSE=0 PEREGRINE_W8_QUANT_X=0), and ncu over one FP8 step.
# Here: scripts/device/kv_attn.sh bundle (.device/carry_kv) and scripts/device/carry_light.sh on (off right after).
# There: source .device/carry_kv/env.sh && scripts/device/w8_fused.sh   (NCU=0 skips ncu, SAN=0 compute-sanitizer)
set -uo pipefail
source "$(dirname "$0")/carry_kv_common.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 "$bin/cuda_ops_tests" --gtest_filter="${OPS:--CudaAttention.*}" >/tmp/ops.log 2>&1
t "op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|FAILED  \]|element|differ" /tmp/ops.log | head -30
prompts=(--prompt "def fibonacci(n):" --prompt "class Stack:" --prompt "import os" --prompt "# sort a list" \
         --prompt "def parse_args():" --prompt "for i in range(10):")
for q in fp8 w8a8-int8; do
  for fuse in 1 0; do
    PEREGRINE_FUSE=$fuse timeout 60 "$bin/peregrine" generate --model models/pycoder-tiny --device cuda -q "$q" \
      "${prompts[@]}" --max-tokens 48 --ignore-eos --json --logprobs 3 >"/tmp/gen_${q}_$fuse.json" 2>/tmp/gen_err.txt ||
      { echo "generate $q fuse=$fuse failed"; tail -3 /tmp/gen_err.txt; }
  done
  if cmp -s "/tmp/gen_${q}_1.json" "/tmp/gen_${q}_0.json" && [ -s "/tmp/gen_${q}_1.json" ]; then
    t "generate $q: fused == unfused ($(wc -l <"/tmp/gen_${q}_1.json") prompts, logprobs included)"
  else
    t "generate $q: fused and unfused DIFFER"; diff <(head -c 600 "/tmp/gen_${q}_1.json") <(head -c 600 "/tmp/gen_${q}_0.json")
  fi
done
if [ "${SAN:-1}" = 1 ]; then
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_ops_tests" \
    --gtest_filter='CudaW8Matmul.InBlock*:CudaW8Matmul.Fusions*' >/tmp/san.log 2>&1
  t "memcheck rc=$?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" /tmp/san.log | head -5
fi
lat() {  # name, env..., -- peregrine args
  local name=$1; shift
  env "$@" timeout 120 "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 1024 --output-len 64 --batch-size "${BS:-1}" --iterations 2 ${Q:+--quantization $Q} \
    >"/tmp/lat_$name.txt" 2>&1
  t "latency $name rc=$?: $(grep -E '^decode' "/tmp/lat_$name.txt" | head -1)"
}
Q= lat bf16 X=1
Q=fp8 lat fp8 X=1
Q=fp8 lat fp8_tile_a_block PEREGRINE_W8_TILES_PER_BLOCK=1
Q=fp8 lat fp8_unfused PEREGRINE_FUSE=0
Q=fp8 lat fp8_before PEREGRINE_FUSE=0 PEREGRINE_W8_QUANT_X=0
Q=w8a8-int8 lat int8 X=1
Q=w8a8-int8 lat int8_before PEREGRINE_FUSE=0 PEREGRINE_W8_QUANT_X=0
if [ "${NCU:-1}" = 1 ]; then
  timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    --log-file /tmp/ncu_fp8.csv "$bin/peregrine" bench latency --model models/pycoder-tiny --random-weights --config "$cfg" \
    --device cuda --input-len 128 --output-len 3 --batch-size 1 --iterations 1 --quantization fp8 >/tmp/ncu_run.txt 2>&1
  t "ncu rc=$?"
  python3 scripts/device/ncu_step.py /tmp/ncu_fp8.csv "one FP8 decode step (bs=1, ctx ~130), fused" | head -30
fi
for f in /tmp/lat_*.txt; do echo "$(basename "$f" .txt): $(grep -E '^decode' "$f" | head -1)"; done
