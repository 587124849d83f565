// Regular expressions to grammar rules (see compile_regex in grammar.h). The pattern is read as UTF-8 code points;
// character classes become alternatives of UTF-8 byte sequences. Inside JSON strings, characters JSON must escape
// (", \, control characters) are produced in their escaped form, so the decoded string is what the regex matches.
#include <cstring>

#include "engine/structured/grammar.h"
#include "peregrine/error.h"

namespace peregrine::engine::structured {
namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

class RegexCompiler {
 public:
  RegexCompiler(GrammarBuilder& b, std::string_view pattern, bool json, const std::string& field)
      : b_(b), json_(json), field_(field) {
    decode(pattern);
  }

  Element compile(bool search) {
    bool anchored_start = !cps_.empty() && cps_[0] == '^';
    bool anchored_end = cps_.size() >= 2 && cps_.back() == '$' && cps_[cps_.size() - 2] != '\\';
    if (cps_.size() == 1 && cps_[0] == '$') anchored_end = true;
    Element body = parse_alternation(0);
    if (pos_ != cps_.size()) fail("unbalanced ')'");
    if (!search) return body;
    Sequence s;
    if (!anchored_start) s.push_back(b_.star(any_char(true)));
    s.push_back(body);
    if (!anchored_end) s.push_back(b_.star(any_char(true)));
    return b_.seq(std::move(s), "search");
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(ErrorCode::kInvalidArgument, field_ + ": regex: " + msg + " (at character " + std::to_string(pos_) + ")",
                field_);
  }

  void decode(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0 || i + static_cast<size_t>(len) > s.size()) {
        throw Error(ErrorCode::kInvalidArgument, field_ + ": the pattern is not valid UTF-8", field_);
      }
      uint32_t cp = len == 1 ? c : (c & (0xFF >> (len + 1)));
      for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
      cps_.push_back(cp);
      i += static_cast<size_t>(len);
    }
  }

  bool at_end() const { return pos_ >= cps_.size(); }
  uint32_t peek() const { return cps_[pos_]; }

  // The JSON-escaped spelling of a code point JSON must escape.
  static std::string json_escape(uint32_t cp) {
    switch (cp) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\n': return "\\n";
      case '\t': return "\\t";
      case '\r': return "\\r";
      case '\b': return "\\b";
      case '\f': return "\\f";
      default: {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
        return buf;
      }
    }
  }
  static bool needs_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

  // A set of code points as an element (escaping for JSON strings).
  Element set_element(const CodepointRanges& ranges_in) {
    CodepointRanges ranges = normalize_ranges(ranges_in);
    if (!json_) return b_.codepoints(ranges);
    CodepointRanges plain;
    std::vector<uint32_t> escaped;
    for (auto [lo, hi] : ranges) {
      for (uint32_t cp = lo; cp <= hi && cp < 0x20; ++cp) escaped.push_back(cp);
      for (uint32_t cp : {uint32_t{'"'}, uint32_t{'\\'}}) {
        if (cp >= lo && cp <= hi) escaped.push_back(cp);
      }
      uint32_t a = std::max<uint32_t>(lo, 0x20);
      while (a <= hi) {
        uint32_t z = hi;
        if (a <= '"' && z >= '"') {
          if (a < '"') plain.emplace_back(a, '"' - 1);
          a = '"' + 1;
          continue;
        }
        if (a <= '\\' && z >= '\\') {
          if (a < '\\') plain.emplace_back(a, '\\' - 1);
          a = '\\' + 1;
          continue;
        }
        plain.emplace_back(a, z);
        break;
      }
    }
    std::vector<Sequence> alts;
    if (!plain.empty()) alts.push_back({b_.codepoints(plain)});
    for (uint32_t cp : escaped) alts.push_back({b_.literal(json_escape(cp))});
    if (alts.empty()) fail("a character class matches nothing");
    if (alts.size() == 1) return alts[0][0];
    return b_.alt(std::move(alts), "jchars");
  }

  Element literal_cp(uint32_t cp) {
    if (json_ && needs_escape(cp)) return b_.literal(json_escape(cp));
    if (cp < 0x80) return b_.byte(static_cast<uint8_t>(cp));
    return set_element({{cp, cp}});
  }

  // Any character ('.' excludes the newline).
  Element any_char(bool with_newline) {
    if (with_newline) return set_element({{0, kMaxCp}});
    return set_element({{0, '\n' - 1}, {'\n' + 1, kMaxCp}});
  }

  static CodepointRanges digit() { return {{'0', '9'}}; }
  static CodepointRanges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
  static CodepointRanges space() { return {{'\t', '\r'}, {' ', ' '}}; }

  uint32_t hex_digits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (at_end()) fail("incomplete escape");
      const uint32_t c = cps_[pos_++];
      int d = c >= '0' && c <= '9' ? static_cast<int>(c - '0') : c >= 'a' && c <= 'f' ? static_cast<int>(c - 'a' + 10)
              : c >= 'A' && c <= 'F' ? static_cast<int>(c - 'A' + 10) : -1;
      if (d < 0) fail("bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // After a backslash: either one code point (returns true, cp set) or a class (ranges set).
  bool parse_escape(uint32_t& cp, CodepointRanges& ranges, bool in_class) {
    if (at_end()) fail("trailing backslash");
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case 'd': ranges = digit(); return false;
      case 'D': ranges = complement_ranges(digit()); return false;
      case 'w': ranges = word(); return false;
      case 'W': ranges = complement_ranges(word()); return false;
      case 's': ranges = space(); return false;
      case 'S': ranges = complement_ranges(space()); return false;
      case 'n': cp = '\n'; return true;
      case 't': cp = '\t'; return true;
      case 'r': cp = '\r'; return true;
      case 'f': cp = '\f'; return true;
      case 'v': cp = '\v'; return true;
      case '0': cp = 0; return true;
      case 'x': cp = hex_digits(2); return true;
      case 'u':
        if (!at_end() && peek() == '{') {
          ++pos_;
          cp = 0;
          int n = 0;
          while (!at_end() && peek() != '}') {
            --pos_;
            ++pos_;
            cp = cp * 16 + hex_digits(1);
            if (++n > 6) fail("bad \\u{...} escape");
          }
          if (at_end()) fail("unterminated \\u{...}");
          ++pos_;
        } else {
          cp = hex_digits(4);
        }
        if (cp > kMaxCp) fail("code point out of range");
        return true;
      case 'b':
        if (in_class) {
          cp = '\b';
          return true;
        }
        fail("word boundaries (\\b) are not supported");
      case 'B': fail("\\B is not supported");
      case 'A': case 'Z': case 'z': case 'G': fail("anchors inside a pattern are not supported");
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail(std::string("unknown escape \\") + static_cast<char>(c));
        cp = c;  // escaped punctuation or any other character: itself
        return true;
    }
  }

  Element parse_class() {
    // After '['.
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointRanges ranges;
    bool first = true;
    for (;;) {
      if (at_end()) fail("unterminated character class");
      uint32_t c = cps_[pos_++];
      if (c == ']' && !first) break;
      first = false;
      uint32_t lo = c;
      if (c == '[' && !at_end() && peek() == ':') fail("POSIX classes ([:alpha:]) are not supported");
      if (c == '\\') {
        CodepointRanges cls;
        if (!parse_escape(lo, cls, true)) {
          ranges.insert(ranges.end(), cls.begin(), cls.end());
          continue;
        }
      }
      if (pos_ + 1 < cps_.size() && peek() == '-' && cps_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = cps_[pos_++];
        if (hi == '\\') {
          CodepointRanges cls;
          if (!parse_escape(hi, cls, true)) fail("a class cannot end a range");
        }
        if (hi < lo) fail("bad range in character class");
        ranges.emplace_back(lo, hi);
      } else {
        ranges.emplace_back(lo, lo);
      }
    }
    if (negate) ranges = complement_ranges(ranges);
    return set_element(ranges);
  }

  Element parse_alternation(int depth) {
    if (depth > 200) fail("groups nested too deeply");
    std::vector<Sequence> alts;
    alts.push_back(parse_sequence(depth));
    while (!at_end() && peek() == '|') {
      ++pos_;
      alts.push_back(parse_sequence(depth));
    }
    if (alts.size() == 1) {
      if (alts[0].size() == 1) return alts[0][0];
      return b_.seq(std::move(alts[0]), "re");
    }
    return b_.alt(std::move(alts), "re_alt");
  }

  bool parse_int(int64_t& v) {
    size_t start = pos_;
    v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 1000000) fail("repetition count too large");
      ++pos_;
    }
    return pos_ > start;
  }

  Sequence parse_sequence(int depth) {
    Sequence seq;
    while (!at_end() && peek() != '|' && peek() != ')') {
      const uint32_t c = cps_[pos_++];
      Element atom;
      switch (c) {
        case '^':
        case '$':
          continue;  // anchors: the match is always of the whole text
        case '.': atom = any_char(false); break;
        case '[': atom = parse_class(); break;
        case '(': {
          if (!at_end() && peek() == '?') {
            ++pos_;
            if (at_end()) fail("incomplete group");
            const uint32_t k = cps_[pos_++];
            if (k == ':') {
            } else if (k == 'P' || (k == '<' && !at_end() && peek() != '=' && peek() != '!')) {
              if (k == 'P') {
                if (at_end() || peek() != '<') fail("only (?P<name>...) groups are supported");
                ++pos_;
              }
              while (!at_end() && peek() != '>') ++pos_;
              if (at_end()) fail("unterminated group name");
              ++pos_;
            } else if (k == '=' || k == '!' || k == '<') {
              fail("lookaround is not supported");
            } else {
              fail("inline flags and other (?...) groups are not supported");
            }
          }
          atom = parse_alternation(depth + 1);
          if (at_end() || peek() != ')') fail("missing ')'");
          ++pos_;
          break;
        }
        case '\\': {
          uint32_t cp = 0;
          CodepointRanges cls;
          atom = parse_escape(cp, cls, false) ? literal_cp(cp) : set_element(cls);
          break;
        }
        case '*': case '+': case '?': fail("nothing to repeat");
        default: atom = literal_cp(c); break;
      }
      // Quantifier.
      if (!at_end()) {
        const uint32_t q = peek();
        int64_t lo = -1, hi = -1;
        bool quant = false;
        if (q == '*') { lo = 0; hi = -1; quant = true; ++pos_; }
        else if (q == '+') { lo = 1; hi = -1; quant = true; ++pos_; }
        else if (q == '?') { lo = 0; hi = 1; quant = true; ++pos_; }
        else if (q == '{') {
          const size_t save = pos_;
          ++pos_;
          int64_t a = 0, z = 0;
          bool has_a = parse_int(a);
          if (!at_end() && peek() == '}' && has_a) {
            ++pos_;
            lo = hi = a;
            quant = true;
          } else if (!at_end() && peek() == ',') {
            ++pos_;
            bool has_z = parse_int(z);
            if (!at_end() && peek() == '}' && (has_a || has_z)) {
              ++pos_;
              lo = has_a ? a : 0;
              hi = has_z ? z : -1;
              quant = true;
            } else {
              pos_ = save;
            }
          } else {
            pos_ = save;
          }
        }
        if (quant) {
          if (!at_end() && (peek() == '?' || peek() == '+')) ++pos_;  // lazy / possessive: same language
          if (lo == 0 && hi == -1) atom = b_.star(atom);
          else if (lo == 1 && hi == -1) atom = b_.plus(atom);
          else if (lo == 0 && hi == 1) atom = b_.optional(atom);
          else atom = b_.repeat(atom, lo, hi, field_);
          if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
            if (peek() != '{') fail("multiple repeat");
          }
        }
      }
      seq.push_back(atom);
    }
    return seq;
  }

  GrammarBuilder& b_;
  bool json_;
  std::string field_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

}  // namespace

Element compile_regex(GrammarBuilder& b, std::string_view pattern, bool json_string, const std::string& field,
                      bool search_semantics) {
  if (pattern.size() > 65536) throw Error(ErrorCode::kInvalidArgument, field + ": the pattern is too long", field);
  RegexCompiler c(b, pattern, json_string, field);
  return c.compile(search_semantics);
}

}  // namespace peregrine::engine::structured
