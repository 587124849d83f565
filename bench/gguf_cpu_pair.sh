#!/usr/bin/env bash
# CPU decode/prefill of random 1B-shape GGUFs, Peregrine beside llama.cpp (node-llama-cpp) in the same sitting,
# runs alternated. Make the files first:
#   /usr/bin/python3 ../shared/tools/make_random_gguf.py --hidden 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
#       --vocab 128256 --ctx 4096 --dtype q8_0|q4_0 --tied --out /tmp/1b-TYPE.gguf
#   /usr/bin/python3 bench/gguf_q4_0_to_q4_k.py /tmp/1b-q4_0.gguf /tmp/1b-q4_k.gguf
#   /usr/bin/python3 bench/gguf_mix_q4_k_m.py /tmp/1b-q4_0.gguf /tmp/1b-q4_k_m.gguf   (a Q4_K_M-like mix: Q4_K + Q6_K)
# and the peer once in a scratch folder (PEER_DIR, default /tmp/llamacpp_peer): npm install node-llama-cpp@3.22.1,
# with ../shared/tools/llama_cpp_bench.mjs copied there.
# Usage: bench/gguf_cpu_pair.sh [ROUNDS=2] [TYPES="q8_0 q4_0 q4_k"]   (also q4_k_m)
# A type written SCHEME:TYPE (e.g. w4a16:q4_0 w8a16:q8_0, issue 11's CPU goals) runs Peregrine on random weights of
# the same 1B shape quantized as SCHEME (`--random-weights --config llama-3.2-1b.json --quantization SCHEME`) beside
# llama.cpp on /tmp/1b-TYPE.gguf.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${PEREGRINE_BIN:-$root/build/current/peregrine}"
peer="${PEER_DIR:-/tmp/llamacpp_peer}"
rounds="${1:-2}"
types="${2:-q8_0 q4_0 q4_k}"
for r in $(seq "$rounds"); do
  for entry in $types; do
    t=${entry##*:} scheme=
    [ "$entry" != "$t" ] && scheme=${entry%%:*}
    f="/tmp/1b-$t.gguf"
    [ -f "$f" ] || { echo "missing $f" >&2; continue; }
    # The file read into the page cache right before each engine: this VM runs DAMON pageout (kdamond), which
    # pages out file pages left cold for some seconds, and llama.cpp reads its weights from the map while it runs.
    cat "$f" > /dev/null
    echo "== round $r $entry load $(cut -d' ' -f1 /proc/loadavg)"
    model=(--model "$f")
    [ -n "$scheme" ] && model=(--random-weights --config "$root/../shared/configs/llama-3.2-1b.json" --quantization "$scheme")
    "$bin" bench latency "${model[@]}" --device cpu --threads 2 --input-len 128 --output-len 64 --iterations 2 2>&1 |
      grep -E "memory bandwidth|prefill|decode"
    cat "$f" > /dev/null
    (cd "$peer" && node llama_cpp_bench.mjs "$f" 128 64 2 2>/dev/null | tail -1)
  done
done
