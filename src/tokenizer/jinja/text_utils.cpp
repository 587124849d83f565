// Text helpers for the Jinja interpreter (see text_utils.h): UTF-8, JavaScript whitespace and number formats,
// JSON string escaping.
#include "tokenizer/jinja/text_utils.h"
#include "tokenizer/unicode.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include <unicode/locid.h>
#include <unicode/unistr.h>

namespace peregrine::jinja {

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int extra = 0;
  char32_t cp = 0;
  char32_t min_value = 0;
  if ((b0 & 0xE0) == 0xC0) {
    extra = 1, cp = b0 & 0x1F, min_value = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2, cp = b0 & 0x0F, min_value = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3, cp = b0 & 0x07, min_value = 0x10000;
  } else {
    ++i;
    return 0xFFFD;
  }
  if (i + extra >= s.size()) {
    ++i;
    return 0xFFFD;
  }
  for (int k = 1; k <= extra; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min_value || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return 0xFFFD;
  }
  i += extra + 1;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) { tokenizer::append_utf8(out, static_cast<uint32_t>(cp)); }

std::optional<size_t> find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const bool is_replacement_char = s.substr(i, 3) == "\xEF\xBF\xBD";
    if (next_code_point(s, i) == 0xFFFD && !is_replacement_char) return start;
  }
  return std::nullopt;
}

std::vector<std::string> split_code_points(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    next_code_point(s, i);
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) next_code_point(s, i);
  return n;
}

size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) n += next_code_point(s, i) >= 0x10000 ? 2 : 1;
  return n;
}

bool is_js_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

std::string_view js_trim_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (!is_js_space(next_code_point(s, next))) break;
    i = next;
  }
  return s.substr(i);
}

std::string_view js_trim_end(std::string_view s) {
  // Walk forward remembering where the trailing run of whitespace starts.
  size_t i = 0;
  size_t end = 0;
  while (i < s.size()) {
    if (!is_js_space(next_code_point(s, i))) end = i;
  }
  return s.substr(0, end);
}

std::string_view js_trim(std::string_view s) { return js_trim_end(js_trim_start(s)); }

std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  std::vector<char32_t> set;
  for (size_t i = 0; i < chars.size();) set.push_back(next_code_point(chars, i));
  const auto in_set = [&](char32_t cp) {
    for (char32_t c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  size_t begin = 0;
  if (left) {
    while (begin < s.size()) {
      size_t next = begin;
      if (!in_set(next_code_point(s, next))) break;
      begin = next;
    }
  }
  size_t end = s.size();
  if (right) {
    size_t i = begin;
    end = begin;
    while (i < s.size()) {
      if (!in_set(next_code_point(s, i))) end = i;
    }
  }
  return s.substr(begin, end - begin);
}

namespace {

std::string map_case(std::string_view s, bool upper) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) {  // fast path, identical to the full mapping for ASCII
    std::string out(s);
    for (char& c : out) {
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  icu::UnicodeString text = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  if (upper) {
    text.toUpper(icu::Locale::getRoot());
  } else {
    text.toLower(icu::Locale::getRoot());
  }
  std::string out;
  text.toUTF8String(out);
  return out;
}

}  // namespace

std::string to_upper(std::string_view s) { return map_case(s, true); }
std::string to_lower(std::string_view s) { return map_case(s, false); }

namespace {
bool is_word_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
}  // namespace

std::string js_title(std::string_view s) {
  std::string out(s);
  bool previous_is_word = false;
  for (char& c : out) {
    const bool word = is_word_byte(c);
    if (word && !previous_is_word && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    previous_is_word = word;
  }
  return out;
}

std::string js_capitalize(std::string_view s) {
  if (s.empty()) return std::string();
  size_t i = 0;
  const char32_t first = next_code_point(s, i);
  if (first >= 0x10000) return std::string(s);
  return to_upper(s.substr(0, i)) + std::string(s.substr(i));
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  if (count == 0) return std::string(s);
  int64_t remaining = count < 0 ? std::numeric_limits<int64_t>::max() : count;
  std::string out;
  if (from.empty()) {
    size_t i = 0;
    while (true) {
      if (remaining > 0) {
        out += to;
        --remaining;
      }
      if (i >= s.size()) break;
      const size_t start = i;
      next_code_point(s, i);
      out += s.substr(start, i - start);
    }
    return out;
  }
  size_t pos = 0;
  while (remaining > 0) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += to;
    pos = hit + from.size();
    --remaining;
  }
  out += s.substr(pos);
  return out;
}

std::string format_js_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view text(buf, result.ptr - buf);
  std::string out;
  if (text.front() == '-') {
    out.push_back('-');
    text.remove_prefix(1);
  }
  const size_t e_pos = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::atoi(std::string(text.substr(e_pos + 1)).c_str());
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;  // the decimal point sits after n digits
  if (k <= n && n <= 21) {
    out += digits;
    out.append(n - k, '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, n);
    out.push_back('.');
    out += digits.substr(n);
  } else if (-6 < n && n <= 0) {
    out += "0.";
    out.append(-n, '0');
    out += digits;
  } else {
    out.push_back(digits[0]);
    if (k > 1) {
      out.push_back('.');
      out += digits.substr(1);
    }
    out.push_back('e');
    out.push_back(n - 1 >= 0 ? '+' : '-');
    out += std::to_string(std::abs(n - 1));
  }
  return out;
}

std::string format_float_display(double v) {
  if (v == 0 && std::signbit(v)) return "-0.0";
  if (std::isfinite(v) && std::fmod(v, 1.0) == 0 && std::fabs(v) < 1e21) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f", v);
    return buf;
  }
  return format_js_number(v);
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of the longest prefix of s that is a JavaScript StrDecimalLiteral (sign included), or 0.
size_t decimal_literal_length(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (s.substr(i, 8) == "Infinity") return i + 8;
  size_t int_digits = 0;
  while (i < s.size() && is_digit(s[i])) ++i, ++int_digits;
  size_t frac_digits = 0;
  size_t end = int_digits > 0 ? i : 0;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && is_digit(s[j])) ++j, ++frac_digits;
    if (int_digits + frac_digits > 0) end = i = j;
  }
  if (end == 0) return 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const size_t exp_start = j;
    while (j < s.size() && is_digit(s[j])) ++j;
    if (j > exp_start) end = j;
  }
  return end;
}

double parse_decimal(std::string_view literal) {
  std::string text(literal);
  if (text.find("Infinity") != std::string::npos) {
    return text[0] == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  return std::strtod(text.c_str(), nullptr);
}

}  // namespace

std::optional<double> js_parse_int(std::string_view s) {
  s = js_trim_start(s);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const size_t start = i;
  double value = 0;
  while (i < s.size() && is_digit(s[i])) value = value * 10 + (s[i++] - '0');
  if (i == start) return std::nullopt;
  return negative ? -value : value;
}

std::optional<double> js_parse_float(std::string_view s) {
  s = js_trim_start(s);
  const size_t length = decimal_literal_length(s);
  if (length == 0) return std::nullopt;
  return parse_decimal(s.substr(0, length));
}

double js_string_to_number(std::string_view s) {
  s = js_trim(s);
  if (s.empty()) return 0;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X' || s[1] == 'o' || s[1] == 'O' || s[1] == 'b' ||
                                      s[1] == 'B')) {
    const int base = (s[1] == 'x' || s[1] == 'X') ? 16 : (s[1] == 'o' || s[1] == 'O') ? 8 : 2;
    double value = 0;
    for (char c : s.substr(2)) {
      int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : 99;
      if (d >= base) return std::nan("");
      value = value * base + d;
    }
    return value;
  }
  if (decimal_literal_length(s) != s.size()) return std::nan("");
  return parse_decimal(s);
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char kHex[] = "0123456789abcdef";
  const auto append_unit = [&](unsigned unit) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out.push_back(kHex[(unit >> shift) & 0xF]);
  };
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t cp = next_code_point(s, i);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (cp < 0x20) {
      append_unit(cp);
    } else if (ensure_ascii && cp >= 0x7F) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        append_unit(0xD800 + (v >> 10));
        append_unit(0xDC00 + (v & 0x3FF));
      } else {
        append_unit(cp);
      }
    } else {
      out += s.substr(start, i - start);
    }
  }
  out.push_back('"');
}

}  // namespace peregrine::jinja
