// Patterns of tokenizer.json ("String" literals and "Regex" in Oniguruma syntax) compiled with PCRE2 + JIT in
// UTF and UCP mode. Oniguruma escapes whose meaning differs in PCRE2 (\s as White_Space, \h as a hex digit) are
// rewritten first. Compiled patterns are immutable and shared between threads; match data is per thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace peregrine::tokenizer {

// Rewrites an Oniguruma (Ruby syntax) pattern into an equivalent PCRE2 pattern.
std::string translate_oniguruma(std::string_view pattern);

class Regex {
 public:
  // Throws Error(kFormatError) with PCRE2's message and offset when the pattern does not compile.
  explicit Regex(std::string_view onig_pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Finds the leftmost match at or after `start` (a code point boundary) in valid UTF-8 `text`.
  bool find(std::string_view text, size_t start, size_t& match_begin, size_t& match_end) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// A "String" or "Regex" pattern from tokenizer.json.
class Pattern {
 public:
  static Pattern literal(std::string s);
  static Pattern regex(std::string_view onig_pattern);

  // Calls fn(begin, end) for every non-overlapping match, left to right (Oniguruma find_iter semantics: after an
  // empty match the search resumes one code point later).
  template <typename F>
  void for_each_match(std::string_view text, F&& fn) const {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t b, e;
      if (!find(text, pos, b, e)) return;
      fn(b, e);
      if (e > b) {
        pos = e;
      } else {
        if (e >= text.size()) return;
        pos = e + next_char_len(text, e);
      }
    }
  }
  bool find(std::string_view text, size_t start, size_t& b, size_t& e) const;
  bool is_literal() const { return regex_ == nullptr; }
  const std::string& literal_text() const { return literal_; }
  // The Oniguruma source of a regex pattern ("" for a literal).
  std::string_view regex_source() const { return regex_ ? std::string_view(regex_->source()) : std::string_view(); }

 private:
  static size_t next_char_len(std::string_view text, size_t i);
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

}  // namespace peregrine::tokenizer
