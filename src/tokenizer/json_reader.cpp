// Fast tokenizer.json reader: a minimal JSON scanner for the vocabulary and merges, nlohmann for the rest.
#include "tokenizer/json_reader.h"

#include <cstring>

#include "core/status.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::kFormatError,
                "tokenizer.json: " + what + " at byte offset " + std::to_string(pos_));
  }
  void ws() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') ++pos_;
      else break;
    }
  }
  char peek() {
    ws();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool consume(char c) {
    if (peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  size_t pos() const { return pos_; }

  // Appends the decoded string to out.
  void string(std::string& out) {
    expect('"');
    for (;;) {
      size_t start = pos_;
      while (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != '\\') ++pos_;
      out.append(s_.data() + start, pos_ - start);
      if (pos_ >= s_.size()) fail("unterminated string");
      if (s_[pos_] == '"') {
        ++pos_;
        return;
      }
      ++pos_;  // backslash
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos_ + 1 < s_.size() && s_[pos_] == '\\' && s_[pos_ + 1] == 'u') {
              pos_ += 2;
              uint32_t lo = hex4();
              if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              } else {
                append_utf8(out, 0xFFFD);
                cp = lo;
              }
            } else {
              cp = 0xFFFD;
            }
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            cp = 0xFFFD;
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }
  int64_t integer() {
    ws();
    bool neg = false;
    if (pos_ < s_.size() && s_[pos_] == '-') {
      neg = true;
      ++pos_;
    }
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected an integer");
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') v = v * 10 + (s_[pos_++] - '0');
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) fail("expected an integer");
    return neg ? -v : v;
  }
  // Skips one value; returns its raw text.
  std::string_view skip_value() {
    ws();
    size_t start = pos_;
    char c = peek();
    if (c == '"') {
      skip_string();
    } else if (c == '{' || c == '[') {
      int depth = 0;
      while (pos_ < s_.size()) {
        char d = s_[pos_];
        if (d == '"') {
          skip_string();
          continue;
        }
        ++pos_;
        if (d == '{' || d == '[') ++depth;
        else if ((d == '}' || d == ']') && --depth == 0) break;
      }
      if (depth != 0) fail("unterminated container");
    } else {
      while (pos_ < s_.size() && s_[pos_] != ',' && s_[pos_] != '}' && s_[pos_] != ']' && s_[pos_] != ' ' &&
             s_[pos_] != '\n' && s_[pos_] != '\r' && s_[pos_] != '\t')
        ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }

 private:
  void skip_string() {
    ++pos_;  // opening quote
    for (;;) {
      const void* q = std::memchr(s_.data() + pos_, '"', s_.size() - pos_);
      if (q == nullptr) fail("unterminated string");
      size_t end = static_cast<const char*>(q) - s_.data();
      size_t bs = 0;
      while (end - bs > pos_ && s_[end - bs - 1] == '\\') ++bs;
      pos_ = end + 1;
      if (bs % 2 == 0) return;
    }
  }
  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("bad \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= h - '0';
      else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
      else fail("bad \\u escape");
    }
    return v;
  }
  std::string_view s_;
  size_t pos_ = 0;
};

ArenaString take(std::string& arena, size_t start) {
  return ArenaString{static_cast<uint32_t>(start), static_cast<uint32_t>(arena.size() - start)};
}

nlohmann::json parse_small(std::string_view raw, Scanner& sc) {
  try {
    return nlohmann::json::parse(raw);
  } catch (const nlohmann::json::exception& e) {
    sc.fail(std::string("malformed value (") + e.what() + ")");
  }
}

void read_model(Scanner& sc, TokenizerJsonParts& out, nlohmann::json& model) {
  model = nlohmann::json::object();
  sc.expect('{');
  if (sc.consume('}')) return;
  std::string key;
  do {
    key.clear();
    sc.string(key);
    sc.expect(':');
    if (key == "vocab" && sc.peek() == '{') {
      out.has_vocab_object = true;
      sc.expect('{');
      if (!sc.consume('}')) {
        do {
          size_t start = out.arena.size();
          sc.string(out.arena);
          ArenaString tok = take(out.arena, start);
          sc.expect(':');
          out.vocab.push_back({tok, sc.integer()});
        } while (sc.consume(','));
        sc.expect('}');
      }
    } else if (key == "merges" && sc.peek() == '[') {
      out.has_merges = true;
      sc.expect('[');
      if (!sc.consume(']')) {
        do {
          TokenizerJsonParts::Merge m;
          if (sc.peek() == '[') {
            sc.expect('[');
            size_t a = out.arena.size();
            sc.string(out.arena);
            m.left = take(out.arena, a);
            sc.expect(',');
            size_t b = out.arena.size();
            sc.string(out.arena);
            m.right = take(out.arena, b);
            sc.expect(']');
          } else {
            size_t a = out.arena.size();
            sc.string(out.arena);
            std::string_view whole(out.arena.data() + a, out.arena.size() - a);
            size_t space = whole.find(' ');
            if (space == std::string_view::npos) sc.fail("merge without a space");
            m.left = ArenaString{static_cast<uint32_t>(a), static_cast<uint32_t>(space)};
            m.right = ArenaString{static_cast<uint32_t>(a + space + 1), static_cast<uint32_t>(whole.size() - space - 1)};
          }
          out.merges.push_back(m);
        } while (sc.consume(','));
        sc.expect(']');
      }
    } else {
      model[key] = parse_small(sc.skip_value(), sc);
    }
  } while (sc.consume(','));
  sc.expect('}');
}

}  // namespace

TokenizerJsonParts read_tokenizer_json(std::string_view text) {
  TokenizerJsonParts out;
  out.rest = nlohmann::json::object();
  Scanner sc(text);
  sc.expect('{');
  if (!sc.consume('}')) {
    std::string key;
    do {
      key.clear();
      sc.string(key);
      sc.expect(':');
      if (key == "model" && sc.peek() == '{') {
        nlohmann::json model;
        read_model(sc, out, model);
        out.rest["model"] = std::move(model);
      } else {
        out.rest[key] = parse_small(sc.skip_value(), sc);
      }
    } while (sc.consume(','));
    sc.expect('}');
  }
  sc.ws();
  if (sc.pos() != text.size()) sc.fail("trailing characters");
  return out;
}

}  // namespace peregrine::tokenizer
