// UTF-8 helpers and ICU-backed Unicode normalization for the tokenizer.
#include "tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <cstdio>
#include <cstring>

#include "core/status.h"

namespace peregrine::tokenizer {

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    // Fast path: 8 ASCII bytes at a time.
    while (i + 8 <= n) {
      uint64_t v;
      std::memcpy(&v, p + i, 8);
      if (v & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + need >= n) return i;  // truncated
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k <= need; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += need + 1;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view s, std::string_view what) {
  size_t bad = find_invalid_utf8(s);
  if (bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(s[bad]));
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " is not valid UTF-8: invalid byte " + hex +
                                                 " at byte offset " + std::to_string(bad));
  }
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_white_space(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}
bool is_number(uint32_t cp) { return (U_GET_GC_MASK(cp) & U_GC_N_MASK) != 0; }
bool is_mark(uint32_t cp) { return (U_GET_GC_MASK(cp) & U_GC_M_MASK) != 0; }
bool is_alphanumeric(uint32_t cp) { return u_isalpha(static_cast<UChar32>(cp)) || is_number(cp); }

void Utf8LossyDecoder::feed(std::string_view bytes, std::string& out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto b = static_cast<unsigned char>(bytes[i]);
    if (needed_ == 0) {
      if (b < 0x80) {
        out.push_back(static_cast<char>(b));
      } else if (b >= 0xC2 && b <= 0xDF) {
        needed_ = 1;
        pending_.assign(1, static_cast<char>(b));
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower_ = 0xA0;
        if (b == 0xED) upper_ = 0x9F;
        needed_ = 2;
        pending_.assign(1, static_cast<char>(b));
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower_ = 0x90;
        if (b == 0xF4) upper_ = 0x8F;
        needed_ = 3;
        pending_.assign(1, static_cast<char>(b));
      } else {
        out.append(kReplacement);
      }
      continue;
    }
    if (b < lower_ || b > upper_) {
      needed_ = seen_ = 0;
      lower_ = 0x80;
      upper_ = 0xBF;
      pending_.clear();
      out.append(kReplacement);
      --i;  // reprocess this byte as the start of a new sequence
      continue;
    }
    lower_ = 0x80;
    upper_ = 0xBF;
    pending_.push_back(static_cast<char>(b));
    if (++seen_ == needed_) {
      out.append(pending_);
      pending_.clear();
      needed_ = seen_ = 0;
    }
  }
}

void Utf8LossyDecoder::finish(std::string& out) {
  if (needed_ != 0) out.append("\xEF\xBF\xBD");
  reset();
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8LossyDecoder d;
  d.feed(bytes, out);
  d.finish(out);
  return out;
}

namespace {
bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}
const icu::Normalizer2* normalizer_for(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status) || n == nullptr)
    throw Error(ErrorCode::kInternal, std::string("ICU normalizer unavailable: ") + u_errorName(status));
  return n;
}
}  // namespace

bool is_unicode_normalized(std::string_view s, NormalForm form) {
  if (is_ascii(s)) return true;
  UErrorCode status = U_ZERO_ERROR;
  UBool ok = normalizer_for(form)->isNormalizedUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), status);
  return U_SUCCESS(status) && ok;
}

std::string unicode_normalize(std::string_view s, NormalForm form) {
  if (is_ascii(s)) return std::string(s);
  const icu::Normalizer2* n = normalizer_for(form);
  icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
  UErrorCode status = U_ZERO_ERROR;
  if (n->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(s);
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  icu::StringByteSink<std::string> sink(&out);
  status = U_ZERO_ERROR;
  n->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status))
    throw Error(ErrorCode::kInternal, std::string("ICU normalization failed: ") + u_errorName(status));
  return out;
}

std::string unicode_lowercase(std::string_view s) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
  }
  std::string out;
  out.reserve(s.size());
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode status = U_ZERO_ERROR;
  icu::CaseMap::utf8ToLower("", 0, icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), sink, nullptr, status);
  if (U_FAILURE(status)) throw Error(ErrorCode::kInternal, std::string("ICU lowercase failed: ") + u_errorName(status));
  return out;
}

std::string remove_nonspacing_marks(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = next_code_point(s, i);
    if (u_charType(static_cast<UChar32>(cp)) != U_NON_SPACING_MARK) out.append(s.substr(start, i - start));
  }
  return out;
}

}  // namespace peregrine::tokenizer
