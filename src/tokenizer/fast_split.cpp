// Hand-written Llama-3 / Qwen2 pre-tokenizer matchers (see fast_split.h).
#include "tokenizer/fast_split.h"

#include <unicode/uchar.h>

#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {
namespace {

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum CharClass : uint8_t { kLetter, kNumber, kSpace, kCrLf, kOther };

struct AsciiTable {
  uint8_t cls[128];
  AsciiTable() {
    for (int c = 0; c < 128; ++c) {
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cls[c] = kLetter;
      else if (c >= '0' && c <= '9') cls[c] = kNumber;
      else if (c == '\r' || c == '\n') cls[c] = kCrLf;
      else if (c == ' ' || c == '\t' || c == '\v' || c == '\f') cls[c] = kSpace;
      else cls[c] = kOther;
    }
  }
};
const AsciiTable kAscii;

struct Char {
  uint8_t cls;
  uint8_t len;
  uint32_t cp;
};

inline Char char_at(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return Char{kAscii.cls[b], 1, b};
  size_t j = i;
  uint32_t cp = next_code_point(s, j);
  uint8_t cls;
  uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(cp));
  if (mask & U_GC_L_MASK) cls = kLetter;
  else if (mask & U_GC_N_MASK) cls = kNumber;
  else if (cp == 0x85 || (mask & U_GC_Z_MASK)) cls = kSpace;  // White_Space beyond ASCII
  else cls = kOther;
  return Char{cls, static_cast<uint8_t>(j - i), cp};
}

inline bool is_ws(uint8_t cls) { return cls == kSpace || cls == kCrLf; }

// Case-insensitive ASCII letter test with PCRE2's Unicode caseless sets for the contraction letters.
inline bool folds_to(std::string_view s, size_t i, char lower, size_t& len) {
  if (i >= s.size()) return false;
  auto b = static_cast<unsigned char>(s[i]);
  if (b == static_cast<unsigned char>(lower) || b == static_cast<unsigned char>(lower - 32)) {
    len = 1;
    return true;
  }
  if (lower == 's' && b == 0xC5 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0xBF) {  // U+017F ſ
    len = 2;
    return true;
  }
  return false;
}

size_t contraction(std::string_view s, size_t pos) {
  // pos holds '\''.
  size_t i = pos + 1, l1 = 0, l2 = 0;
  if (folds_to(s, i, 's', l1) || folds_to(s, i, 't', l1) || folds_to(s, i, 'm', l1) || folds_to(s, i, 'd', l1)) return 1 + l1;
  if ((folds_to(s, i, 'r', l1) || folds_to(s, i, 'v', l1)) && folds_to(s, i + l1, 'e', l2)) return 1 + l1 + l2;
  if (folds_to(s, i, 'l', l1) && folds_to(s, i + l1, 'l', l2)) return 1 + l1 + l2;
  return 0;
}

}  // namespace

FastSplitKind fast_split_kind(std::string_view pattern) {
  if (pattern == kLlama3Pattern) return FastSplitKind::kLlama3;
  if (pattern == kQwen2Pattern) return FastSplitKind::kQwen2;
  return FastSplitKind::kNone;
}

size_t fast_split_match(FastSplitKind kind, std::string_view s, size_t pos) {
  const size_t n = s.size();
  Char c = char_at(s, pos);
  // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c.cp == '\'') {
    if (size_t len = contraction(s, pos)) return len;
  }
  // 2. [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t i = pos;
    bool ok = false;
    if (c.cls == kLetter) {
      ok = true;
    } else if (c.cls != kCrLf && c.cls != kNumber && pos + c.len < n && char_at(s, pos + c.len).cls == kLetter) {
      i += c.len;
      ok = true;
    }
    if (ok) {
      while (i < n) {
        Char d = char_at(s, i);
        if (d.cls != kLetter) break;
        i += d.len;
      }
      return i - pos;
    }
  }
  // 3. \p{N}{1,3} (Llama-3) or \p{N} (Qwen2)
  if (c.cls == kNumber) {
    size_t i = pos + c.len;
    int max = kind == FastSplitKind::kLlama3 ? 3 : 1;
    for (int k = 1; k < max && i < n; ++k) {
      Char d = char_at(s, i);
      if (d.cls != kNumber) break;
      i += d.len;
    }
    return i - pos;
  }
  // 4. ' '?[^\s\p{L}\p{N}]+[\r\n]*
  {
    size_t i = pos;
    bool ok = false;
    if (c.cls == kOther) {
      ok = true;
    } else if (c.cp == ' ' && pos + 1 < n && char_at(s, pos + 1).cls == kOther) {
      i += 1;
      ok = true;
    }
    if (ok) {
      while (i < n) {
        Char d = char_at(s, i);
        if (d.cls != kOther) break;
        i += d.len;
      }
      while (i < n && (s[i] == '\r' || s[i] == '\n')) ++i;
      return i - pos;
    }
  }
  // Whitespace: c is \s here. Find the run [pos, end) and its last CR/LF.
  size_t end = pos, last_crlf = std::string_view::npos;
  size_t prev = pos;  // start of the last character of the run
  while (end < n) {
    Char d = char_at(s, end);
    if (!is_ws(d.cls)) break;
    if (d.cls == kCrLf) last_crlf = end;
    prev = end;
    end += d.len;
  }
  // 5. \s*[\r\n]+
  if (last_crlf != std::string_view::npos) return last_crlf + 1 - pos;
  // 6. \s+(?!\S): the whole run at the end of text, else the run minus its last character.
  if (end == n) return end - pos;
  if (prev > pos) return prev - pos;
  // 7. \s+
  return end - pos;
}

}  // namespace peregrine::tokenizer
