// Hand-written matchers for the pre-tokenizer regexes that dominate real models, used instead of PCRE2 when a
// Split pattern is exactly one of them (same matches, several times faster):
//   Llama-3 / GPT-4 (cl100k):  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                              ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2/Qwen3: the same with \p{N} instead of \p{N}{1,3}.
// tests/unit/tokenizer compares them with PCRE2 on the corpus and on random strings.
#pragma once

#include <cstddef>
#include <string_view>

namespace peregrine::tokenizer {

enum class FastSplitKind { kNone, kLlama3, kQwen2 };

// Which fast matcher implements this (Oniguruma) pattern, if any.
FastSplitKind fast_split_kind(std::string_view pattern);

// Length in bytes of the match starting at `pos` (text is valid UTF-8, pos < text.size()). Always >= 1 for these
// patterns: every character starts some alternative.
size_t fast_split_match(FastSplitKind kind, std::string_view text, size_t pos);

}  // namespace peregrine::tokenizer
