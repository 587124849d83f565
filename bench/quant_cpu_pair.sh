#!/usr/bin/env bash
# CPU decode/prefill of the 1B shape with random W4A16 / W8A16 weights (issue 11's CPU goals), Peregrine beside
# llama.cpp (node-llama-cpp) on random Q4_0 / Q8_0 GGUFs of the same shape, alternated in one sitting. Files and peer
# as bench/gguf_cpu_pair.sh says (/tmp/1b-q4_0.gguf, /tmp/1b-q8_0.gguf; PEER_DIR).
# Usage: bench/quant_cpu_pair.sh [ROUNDS=2] [PAIRS="w4a16:q4_0 w8a16:q8_0"]
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${PEREGRINE_BIN:-$root/build/current/peregrine}"
peer="${PEER_DIR:-/tmp/llamacpp_peer}"
rounds="${1:-2}"
pairs="${2:-w4a16:q4_0 w8a16:q8_0}"
for r in $(seq "$rounds"); do
  for p in $pairs; do
    q=${p%%:*} t=${p##*:}
    f="/tmp/1b-$t.gguf"
    [ -f "$f" ] || { echo "missing $f" >&2; continue; }
    echo "== round $r $q vs $t load $(cut -d' ' -f1 /proc/loadavg)"
    "$bin" bench latency --random-weights --config "$root/../shared/configs/llama-3.2-1b.json" --device cpu \
      --threads 2 --input-len 128 --output-len 64 --iterations 2 --quantization "$q" 2>&1 |
      grep -E "memory bandwidth|prefill|decode"
    cat "$f" > /dev/null  # the peer reads its weights from the file's map: into the page cache first
    (cd "$peer" && node llama_cpp_bench.mjs "$f" 128 64 2 2>/dev/null | tail -1)
  done
done
