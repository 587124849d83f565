#!/usr/bin/env bash
# Builds and runs the GGUF reader fuzzer (libFuzzer + ASan + UBSan; clang only, not part of CI: the seeds run in CI
# as io_tests GgufSeeds.*). Findings (crash-*, leak-*) and the grown corpus are in build/fuzz/gguf/.
# Usage: [JOBS=N] tests/fuzz/gguf_fuzz.sh [TOTAL_RUNS] [extra libFuzzer flags]   (default 1,000,000 runs)
# Seeds: tests/fuzz/gguf_seeds (tests/fuzz/make_gguf_seeds.py), plus the first 64 KiB of each pycoder-tiny GGUF
# in ../shared (their headers, with llama.cpp's real metadata and tokenizer).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build/fuzz/gguf"
mkdir -p "$out/corpus" "$out/seeds" "$out/obj"
runs="${1:-1000000}"
shift || true
jobs="${JOBS:-1}"
cxx="$(command -v clang++-14 || command -v clang++ || true)"
[ -n "$cxx" ] || { echo "gguf_fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }

flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/src" -I"$root/include" -I"$root/tests/fuzz" $(pkg-config --cflags libpcre2-8 icu-uc))
sources=("$root/src/io/gguf.cpp" "$root/src/io/gguf_config.cpp" "$root/src/io/hf_config.cpp" "$root/src/io/mapped_file.cpp" "$root/src/io/safetensors.cpp"
         "$root/src/core/ggml_quant.cpp" "$root/src/core/dtype.cpp" "$root/src/core/tensor.cpp" "$root/tests/fuzz/gguf_fuzz.cpp")
# The tokenizer the file carries (Tokenizer::from_gguf) is fuzzed too.
for t in added_tokens bpe_model byte_level decoders fast_split gguf_tokenizer json_reader normalizers post_processors \
         pre_tokenizers regex streaming_detokenizer tokenizer unicode; do
  sources+=("$root/src/tokenizer/$t.cpp")
done
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  '"$0" "$@" -c "{}" -o "'"$out"'/obj/$(basename "{}" .cpp).o"' "$cxx" "${flags[@]}"
"$cxx" -fsanitize=fuzzer,address,undefined "$out"/obj/*.o $(pkg-config --libs libpcre2-8 icu-uc) -lpthread -o "$out/gguf_fuzz"

cp "$root"/tests/fuzz/gguf_seeds/*.gguf "$out/seeds/"
for f in "$root"/../shared/models/gguf/*.gguf; do
  [ -f "$f" ] && head -c 65536 "$f" > "$out/seeds/head-$(basename "$f")"
done
cat > "$out/gguf.dict" <<'DICT'
"GGUF"
"\x03\x00\x00\x00"
"\x02\x00\x00\x00"
"general.architecture"
"general.alignment"
"llama"
"llama.embedding_length"
"llama.block_count"
"llama.attention.head_count"
"llama.attention.head_count_kv"
"llama.feed_forward_length"
"llama.rope.scaling.type"
"tokenizer.ggml.tokens"
"tokenizer.ggml.model"
"tokenizer.ggml.merges"
"tokenizer.ggml.scores"
"tokenizer.ggml.token_type"
"tokenizer.ggml.pre"
"tokenizer.ggml.bos_token_id"
"gpt2"
"token_embd.weight"
"rope_freqs.weight"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"\x09\x00\x00\x00"
DICT

cd "$out"
common=(-max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -dict=gguf.dict)
if [ "$jobs" -gt 1 ]; then
  ./gguf_fuzz -jobs="$jobs" -workers="$jobs" -runs=$((runs / jobs)) "${common[@]}" "$@" corpus seeds
  grep -h "^Done\|ERROR\|SUMMARY\|stat::number_of_executed_units" fuzz-*.log || true
else
  UBSAN_OPTIONS=halt_on_error=1 ./gguf_fuzz -runs="$runs" "${common[@]}" "$@" corpus seeds
fi
