// Pre-tokenizers of tokenizer.json: Split (String or Regex pattern, every behavior, invert), ByteLevel
// (add_prefix_space, use_regex), Metaspace (prepend_scheme, split), Digits, Punctuation, Whitespace,
// WhitespaceSplit and Sequence. They cut one normalized section into spans (pre-tokens), and some rewrite text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace peregrine::tokenizer {

struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
  bool at_origin = false;  // the span starts at byte 0 of the original input (Metaspace prepend_scheme "first")
};

// One section being pre-tokenized: spans over `text`. A rewriting step rebuilds `text` and the spans.
struct PreTokens {
  std::string text;
  std::vector<Span> spans;
  std::string_view view(const Span& s) const { return std::string_view(text).substr(s.begin, s.end - s.begin); }
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
SplitBehavior parse_split_behavior(const std::string& name);

class Pattern;
// Splits every span of `pt` by the matches of `pattern` (Hugging Face's NormalizedString::split).
void split_spans(PreTokens& pt, const Pattern& pattern, SplitBehavior behavior, bool invert);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokens& pt) const = 0;
  // Asks a trailing ByteLevel step to leave bytes unmapped (the BPE model then looks raw bytes up directly).
  // Returns true when the last step is ByteLevel and accepted.
  virtual bool set_raw_byte_output() { return false; }
};

// nullptr for JSON null. Throws Error(kUnsupported) for an unknown type.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config);

}  // namespace peregrine::tokenizer
