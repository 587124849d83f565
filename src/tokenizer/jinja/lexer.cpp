// The Jinja lexer (see lexer.h). Whitespace handling follows @huggingface/jinja, which applies transformers'
// trim_blocks/lstrip_blocks as text rewrites before tokenizing; we do the same while remembering where each
// byte came from.
#include "tokenizer/jinja/lexer.h"

#include <algorithm>

#include "core/status.h"
#include "tokenizer/jinja/text_utils.h"

namespace peregrine::jinja {

SourceMap::SourceMap(std::string_view source) : source_(source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
  }
}

std::string SourceMap::describe(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(source_.size()));
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line = static_cast<size_t>(it - line_starts_.begin());
  const uint32_t start = *(it - 1);
  const size_t column = code_point_count(source_.substr(start, offset - start)) + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

namespace {

// Text plus, for every byte, its offset in the original source.
struct MappedText {
  std::string text;
  std::vector<uint32_t> origin;
  void push(char c, uint32_t from) {
    text.push_back(c);
    origin.push_back(from);
  }
};

size_t space_length_at(std::string_view s, size_t i) {
  size_t next = i;
  return is_js_space(next_code_point(s, next)) ? next - i : 0;
}

bool is_line_start(std::string_view s, size_t i) {
  if (i == 0) return true;
  const char prev = s[i - 1];
  if (prev == '\n' || prev == '\r') return true;
  // U+2028 and U+2029 end lines for JavaScript's multiline ^.
  return i >= 3 && s.substr(i - 3, 2) == "\xE2\x80" && (s[i - 1] == '\xA8' || s[i - 1] == '\xA9');
}

// lstrip_blocks: spaces and tabs from the start of a line up to "{%", "{#" or "{-" are removed.
MappedText strip_block_indentation(const MappedText& in) {
  MappedText out;
  const std::string_view s = in.text;
  size_t i = 0;
  while (i < s.size()) {
    if (is_line_start(s, i)) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) i = j;
    }
    out.push(s[i], in.origin[i]);
    ++i;
  }
  return out;
}

// trim_blocks: the newline right after "%}", "#}" or "-}" is removed.
MappedText trim_block_newlines(const MappedText& in) {
  MappedText out;
  const std::string_view s = in.text;
  size_t i = 0;
  while (i < s.size()) {
    if (i + 2 < s.size() && (s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' && s[i + 2] == '\n') {
      out.push(s[i], in.origin[i]);
      out.push(s[i + 1], in.origin[i + 1]);
      i += 3;
      continue;
    }
    out.push(s[i], in.origin[i]);
    ++i;
  }
  return out;
}

// Length of a "{% generation %}" or "{% endgeneration %}" tag at i (0 if none); sets the strip flags.
size_t generation_tag_length(std::string_view s, size_t i, bool& strip_before, bool& strip_after) {
  if (s.substr(i, 2) != "{%") return 0;
  size_t j = i + 2;
  strip_before = j < s.size() && s[j] == '-';
  if (strip_before) ++j;
  while (size_t n = space_length_at(s, j)) j += n;
  if (s.substr(j, 3) == "end") j += 3;
  if (s.substr(j, 10) != "generation") return 0;
  j += 10;
  while (size_t n = space_length_at(s, j)) j += n;
  strip_after = j < s.size() && s[j] == '-';
  if (strip_after) ++j;
  if (s.substr(j, 2) != "%}") return 0;
  return j + 2 - i;
}

// transformers' {% generation %} markers only delimit assistant text for training masks; they render nothing.
MappedText remove_generation_tags(const MappedText& in) {
  MappedText out;
  const std::string_view s = in.text;
  size_t protected_end = 0;  // whitespace already consumed by the previous tag cannot be stripped again
  size_t i = 0;
  while (i < s.size()) {
    bool strip_before = false;
    bool strip_after = false;
    const size_t length = s[i] == '{' ? generation_tag_length(s, i, strip_before, strip_after) : 0;
    if (length == 0) {
      out.push(s[i], in.origin[i]);
      ++i;
      continue;
    }
    if (strip_before) {
      const std::string_view segment = std::string_view(out.text).substr(protected_end);
      const size_t keep = protected_end + js_trim_end(segment).size();
      out.text.resize(keep);
      out.origin.resize(keep);
    }
    i += length;
    while (size_t n = space_length_at(s, i)) {
      if (!strip_after) {
        for (size_t k = 0; k < n; ++k) out.push(s[i + k], in.origin[i + k]);
      }
      i += n;
    }
    protected_end = out.text.size();
  }
  return out;
}

MappedText preprocess(std::string_view source) {
  MappedText text;
  size_t length = source.size();
  if (length > 0 && source[length - 1] == '\n') --length;  // Jinja drops one trailing newline
  for (size_t i = 0; i < length; ++i) text.push(source[i], static_cast<uint32_t>(i));
  return remove_generation_tags(trim_block_newlines(strip_block_indentation(text)));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

class Lexer {
 public:
  Lexer(const MappedText& input, uint32_t source_size, const SourceMap& map)
      : s_(input.text), origin_(input.origin), source_size_(source_size), map_(map) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      const TokenType last = tokens_.empty() ? TokenType::kEnd : tokens_.back().type;
      if (!in_tag_ && (tokens_.empty() || last == TokenType::kCloseStatement || last == TokenType::kCloseExpression ||
                       last == TokenType::kComment)) {
        if (lex_text()) continue;
      }
      if (!in_tag_) {
        lex_tag_open();
        continue;
      }
      lex_inside_tag();
    }
    if (in_tag_) fail(tag_start_, "unclosed tag: expected '%}' or '}}' before the end of the template");
    tokens_.push_back({TokenType::kEnd, "", source_size_});
    return std::move(tokens_);
  }

 private:
  uint32_t at(size_t i) const { return i < origin_.size() ? origin_[i] : source_size_; }
  [[noreturn]] void fail(size_t i, const std::string& message) const {
    throw Error(ErrorCode::kInvalidArgument, "chat template: " + map_.describe(at(i)) + ": " + message);
  }
  void push(TokenType type, std::string value, size_t start) { tokens_.push_back({type, std::move(value), at(start)}); }
  bool starts_tag(size_t i) const {
    return i + 1 < s_.size() && s_[i] == '{' && (s_[i + 1] == '%' || s_[i + 1] == '{' || s_[i + 1] == '#');
  }

  // Text up to the next "{%", "{{" or "{#". Returns false when there is none at the cursor.
  bool lex_text() {
    const size_t start = pos_;
    while (pos_ < s_.size() && !starts_tag(pos_)) ++pos_;
    if (pos_ == start) return false;
    push(TokenType::kText, std::string(s_.substr(start, pos_ - start)), start);
    return true;
  }

  void strip_trailing_whitespace_of_text() {
    if (tokens_.empty() || tokens_.back().type != TokenType::kText) return;
    std::string& text = tokens_.back().value;
    text.resize(js_trim_end(text).size());
    if (text.empty()) tokens_.pop_back();
  }

  void skip_whitespace() {
    while (size_t n = pos_ < s_.size() ? space_length_at(s_, pos_) : 0) pos_ += n;
  }

  void lex_tag_open() {
    const size_t start = pos_;
    const char kind = s_[pos_ + 1];
    pos_ += 2;
    const bool strip_before = pos_ < s_.size() && s_[pos_] == '-';
    if (strip_before) ++pos_;
    if (kind == '#') {
      const size_t close = s_.find("#}", pos_);
      if (close == std::string_view::npos) fail(start, "unterminated comment: missing '#}'");
      const bool strip_after = close > pos_ && s_[close - 1] == '-';
      if (strip_before) strip_trailing_whitespace_of_text();
      push(TokenType::kComment, "", start);  // kept so that text after it starts a new text token
      pos_ = close + 2;
      if (strip_after) skip_whitespace();
      return;
    }
    if (strip_before) strip_trailing_whitespace_of_text();
    push(kind == '%' ? TokenType::kOpenStatement : TokenType::kOpenExpression, kind == '%' ? "{%" : "{{", start);
    in_tag_ = true;
    tag_start_ = start;
    brace_depth_ = 0;
  }

  void lex_inside_tag() {
    skip_whitespace();
    if (pos_ >= s_.size()) return;
    const size_t start = pos_;
    const std::string_view rest = s_.substr(pos_);
    if (rest.starts_with("-%}") || rest.starts_with("-}}")) {
      push(rest[1] == '%' ? TokenType::kCloseStatement : TokenType::kCloseExpression, rest[1] == '%' ? "%}" : "}}",
           start);
      pos_ += 3;
      in_tag_ = false;
      skip_whitespace();
      return;
    }
    if (rest.starts_with("%}") || (rest.starts_with("}}") && brace_depth_ <= 0)) {
      push(rest[0] == '%' ? TokenType::kCloseStatement : TokenType::kCloseExpression, std::string(rest.substr(0, 2)),
           start);
      pos_ += 2;
      in_tag_ = false;
      return;
    }
    const char c = s_[pos_];
    if (c == '\'' || c == '"') return lex_string(c);
    if (is_digit(c)) return lex_number();
    if (is_word(c)) {
      while (pos_ < s_.size() && is_word(s_[pos_])) ++pos_;
      return push(TokenType::kName, std::string(s_.substr(start, pos_ - start)), start);
    }
    static constexpr std::string_view kTwoCharOperators[] = {"**", "//", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwoCharOperators) {
      if (rest.starts_with(op)) {
        pos_ += 2;
        return push(TokenType::kOperator, std::string(op), start);
      }
    }
    TokenType type;
    switch (c) {
      case '(': type = TokenType::kOpenParen; break;
      case ')': type = TokenType::kCloseParen; break;
      case '[': type = TokenType::kOpenBracket; break;
      case ']': type = TokenType::kCloseBracket; break;
      case '{': type = TokenType::kOpenBrace, ++brace_depth_; break;
      case '}': type = TokenType::kCloseBrace, --brace_depth_; break;
      case ',': type = TokenType::kComma; break;
      case '.': type = TokenType::kDot; break;
      case ':': type = TokenType::kColon; break;
      case '|': type = TokenType::kPipe; break;
      case '+': case '-': case '~': case '*': case '/': case '%': case '<': case '>': case '=':
        type = TokenType::kOperator;
        break;
      default: {
        size_t next = pos_;
        std::string shown;
        append_utf8(shown, next_code_point(s_, next));
        fail(start, "unexpected character '" + shown + "' inside a tag");
      }
    }
    ++pos_;
    push(type, std::string(1, c), start);
  }

  void lex_number() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    const bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::kDot;  // x.0.1 is two lookups
    if (!after_dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
      ++pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    push(TokenType::kNumber, std::string(s_.substr(start, pos_ - start)), start);
  }

  static int hex_value(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  void lex_string(char quote) {
    const size_t start = pos_++;
    std::string value;
    char32_t pending_high_surrogate = 0;
    while (true) {
      if (pos_ >= s_.size()) fail(start, "unterminated string literal");
      const char c = s_[pos_];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= s_.size()) fail(start, "unterminated string literal");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': value.push_back('\n'); continue;
        case 't': value.push_back('\t'); continue;
        case 'r': value.push_back('\r'); continue;
        case 'b': value.push_back('\b'); continue;
        case 'f': value.push_back('\f'); continue;
        case 'v': value.push_back('\v'); continue;
        case '\'': case '"': case '\\': value.push_back(e); continue;
        case 'x': case 'u': case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (size_t k = 0; k < digits; ++k) {
            const int h = pos_ + k < s_.size() ? hex_value(s_[pos_ + k]) : -1;
            if (h < 0) fail(pos_ - 2, std::string("invalid \\") + e + " escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          pos_ += digits;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair arrives as two \u escapes
            pending_high_surrogate = cp;
            continue;
          }
          if (cp >= 0xDC00 && cp <= 0xDFFF && pending_high_surrogate) {
            cp = 0x10000 + ((pending_high_surrogate - 0xD800) << 10) + (cp - 0xDC00);
          } else if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
            cp = 0xFFFD;
          }
          pending_high_surrogate = 0;
          append_utf8(value, cp);
          continue;
        }
        default:  // Python keeps unknown escapes verbatim
          value.push_back('\\');
          value.push_back(e);
          continue;
      }
    }
    ++pos_;
    push(TokenType::kString, std::move(value), start);
  }

  std::string_view s_;
  const std::vector<uint32_t>& origin_;
  uint32_t source_size_;
  const SourceMap& map_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool in_tag_ = false;
  size_t tag_start_ = 0;
  int brace_depth_ = 0;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const SourceMap& map) {
  if (const auto bad = find_invalid_utf8(source)) {
    throw Error(ErrorCode::kInvalidArgument,
                "chat template: invalid UTF-8 at byte offset " + std::to_string(*bad) + " (" + map.describe(*bad) + ")");
  }
  const MappedText text = preprocess(source);
  return Lexer(text, static_cast<uint32_t>(source.size()), map).run();
}

}  // namespace peregrine::jinja
