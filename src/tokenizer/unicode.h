// UTF-8 and Unicode helpers for the tokenizer: strict validation (naming the offending byte offset), code point
// iteration, lossy decoding with U+FFFD (WHATWG "maximal subpart", also what Rust's from_utf8_lossy does),
// white-space and category tests, and ICU-backed normalization (NFC, NFKC, NFD, NFKD) and lower-casing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace peregrine::tokenizer {

// Returns the byte offset of the first byte that starts an invalid UTF-8 sequence, or npos when all valid.
size_t find_invalid_utf8(std::string_view s);
// Throws Error(kInvalidArgument) naming the byte offset when `s` is not valid UTF-8.
void check_utf8(std::string_view s, std::string_view what = "input");

// Decodes the code point starting at s[i] (s must be valid UTF-8); advances i.
inline uint32_t next_code_point(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  if (b < 0xE0) {
    uint32_t cp = ((b & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    i += 2;
    return cp;
  }
  if (b < 0xF0) {
    uint32_t cp = ((b & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
                  (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    i += 3;
    return cp;
  }
  uint32_t cp = ((b & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
                ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) | (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
  i += 4;
  return cp;
}
// Length in bytes of the UTF-8 sequence led by byte b (1 for continuation/invalid bytes).
inline size_t utf8_len(unsigned char b) { return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }
void append_utf8(std::string& out, uint32_t cp);

// Unicode White_Space property (what Rust's char::is_whitespace and Oniguruma's \s use).
bool is_white_space(uint32_t cp);
// Number (N*) and mark (M*) general categories; letters or numbers.
bool is_number(uint32_t cp);
bool is_mark(uint32_t cp);
bool is_alphanumeric(uint32_t cp);

// Incremental lossy UTF-8 decoder: feed bytes, get valid UTF-8 out; an invalid or truncated sequence becomes
// U+FFFD exactly as a one-shot lossy decode of the whole byte stream would produce.
class Utf8LossyDecoder {
 public:
  void feed(std::string_view bytes, std::string& out);
  // Emits U+FFFD for a trailing incomplete sequence.
  void finish(std::string& out);
  bool has_pending() const { return needed_ != 0; }
  void reset() { *this = Utf8LossyDecoder{}; }

 private:
  std::string pending_;
  int needed_ = 0;
  int seen_ = 0;
  unsigned char lower_ = 0x80, upper_ = 0xBF;
};
std::string utf8_lossy(std::string_view bytes);

enum class NormalForm { kNFC, kNFKC, kNFD, kNFKD };
// Normalizes valid UTF-8 text. ASCII-only text is returned unchanged without calling ICU.
std::string unicode_normalize(std::string_view s, NormalForm form);
bool is_unicode_normalized(std::string_view s, NormalForm form);
// Full Unicode lower-casing (root locale, final sigma handled), as Rust's str::to_lowercase.
std::string unicode_lowercase(std::string_view s);
// Removes non-spacing marks (Mn), as the StripAccents normalizer.
std::string remove_nonspacing_marks(std::string_view s);

}  // namespace peregrine::tokenizer
