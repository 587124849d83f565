// EBNF and Lark grammar text to a Grammar (compile_ebnf in grammar.h), the subset vLLM's grammar field is used
// with:
//   GBNF (text with "::="): `name ::= alternatives`, "literals", [character classes], ., ( ), * + ? {m} {m,n},
//        # comments; the root rule is `root`.
//   Lark (otherwise): `name: alternatives`, `?name:`, TERMINALS, "literals" and 'literals', /regex/, "a".."z",
//        [optional], ( ), * + ?, ~ n, ~ n..m, // comments, %import common.NAME (WS, DIGIT, INT, NUMBER,
//        ESCAPED_STRING, CNAME, ...); the root rule is `start`. %ignore is refused (no implicit whitespace).
#include <cstring>
#include <unordered_map>

#include "engine/structured/grammar.h"
#include "peregrine/error.h"

namespace peregrine::engine::structured {
namespace {

struct Token {
  enum Kind { kIdent, kDefine, kString, kRegex, kClass, kOp, kNumber, kDirective, kRuleMark, kEnd } kind;
  std::string text;
  size_t line = 0;
  bool line_start = false;
};

class EbnfCompiler {
 public:
  EbnfCompiler(std::string_view text, std::string field) : text_(text), field_(std::move(field)) {
    gbnf_ = text.find("::=") != std::string_view::npos;
    lex();
  }

  Grammar compile() {
    while (peek().kind != Token::kEnd) {
      if (peek().kind == Token::kDirective) {
        directive();
        continue;
      }
      if (peek().kind == Token::kRuleMark) ++pos_;
      if (peek().kind != Token::kIdent || tokens_[pos_ + 1].kind != Token::kDefine) {
        fail("expected a rule definition (name " + std::string(gbnf_ ? "::=" : ":") + " ...)");
      }
      std::string name = tokens_[pos_].text;
      if (const size_t dot = name.find('.'); dot != std::string::npos) name = name.substr(0, dot);  // priority
      pos_ += 2;
      const int rule = rule_id(name);
      if (defined_.count(rule)) fail("rule '" + name + "' is defined twice");
      defined_[rule] = true;
      for (Sequence& s : alternatives()) b_.add_alt(rule, std::move(s));
    }
    for (auto& [name, id] : names_) {
      if (!defined_.count(id)) fail("rule '" + name + "' is used but never defined");
    }
    const char* root_name = gbnf_ ? "root" : "start";
    auto it = names_.find(root_name);
    if (it == names_.end()) fail(std::string("the grammar has no '") + root_name + "' rule");
    const int root = b_.new_rule("grammar_root");
    b_.add_alt(root, {b_.ref(it->second)});
    Grammar g = b_.take(root);
    g.check(field_);
    return g;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    const size_t line = pos_ < tokens_.size() ? tokens_[pos_].line : 0;
    throw Error(ErrorCode::kInvalidArgument, field_ + ": grammar line " + std::to_string(line) + ": " + msg, field_);
  }

  const Token& peek() const { return tokens_[pos_]; }

  void lex() {
    size_t i = 0, line = 1;
    bool line_start = true;
    auto push = [&](Token::Kind k, std::string t) {
      tokens_.push_back(Token{k, std::move(t), line, line_start});
      line_start = false;
    };
    while (i < text_.size()) {
      const char c = text_[i];
      if (c == '\n') {
        ++line;
        ++i;
        line_start = true;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r') {
        ++i;
        continue;
      }
      if ((gbnf_ && c == '#') || (c == '/' && i + 1 < text_.size() && text_[i + 1] == '/')) {
        while (i < text_.size() && text_[i] != '\n') ++i;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[j])) || text_[j] == '_' || text_[j] == '-' ||
                                    (text_[j] == '.' && j + 1 < text_.size() && std::isdigit(static_cast<unsigned char>(text_[j + 1])) && !gbnf_))) {
          if (text_[j] == '-' && !gbnf_) break;
          ++j;
        }
        push(Token::kIdent, std::string(text_.substr(i, j - i)));
        i = j;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t j = i;
        while (j < text_.size() && std::isdigit(static_cast<unsigned char>(text_[j]))) ++j;
        push(Token::kNumber, std::string(text_.substr(i, j - i)));
        i = j;
        continue;
      }
      if (c == ':' && text_.substr(i, 3) == "::=") {
        push(Token::kDefine, "::=");
        i += 3;
        continue;
      }
      if (c == ':' && !gbnf_) {
        push(Token::kDefine, ":");
        ++i;
        continue;
      }
      if (c == '"' || c == '\'') {
        size_t j = i + 1;
        std::string raw;
        while (j < text_.size() && text_[j] != c) {
          if (text_[j] == '\\' && j + 1 < text_.size()) raw += text_[j++];
          if (text_[j] == '\n') fail("unterminated string");
          raw += text_[j++];
        }
        if (j >= text_.size()) fail("unterminated string");
        i = j + 1;
        if (i < text_.size() && text_[i] == 'i' && !gbnf_) fail("case-insensitive literals (\"...\"i) are not supported");
        push(Token::kString, unescape(raw));
        continue;
      }
      if (c == '/' && !gbnf_) {
        size_t j = i + 1;
        std::string raw;
        while (j < text_.size() && text_[j] != '/') {
          if (text_[j] == '\\' && j + 1 < text_.size()) raw += text_[j++];
          if (text_[j] == '\n') fail("unterminated regex");
          raw += text_[j++];
        }
        if (j >= text_.size()) fail("unterminated regex");
        i = j + 1;
        if (i < text_.size() && std::isalpha(static_cast<unsigned char>(text_[i]))) fail("regex flags are not supported");
        push(Token::kRegex, raw);
        continue;
      }
      if (c == '[' && gbnf_) {
        size_t j = i + 1;
        while (j < text_.size() && text_[j] != ']') {
          if (text_[j] == '\\') ++j;
          ++j;
        }
        if (j >= text_.size()) fail("unterminated character class");
        push(Token::kClass, std::string(text_.substr(i, j - i + 1)));
        i = j + 1;
        continue;
      }
      if (c == '%' && !gbnf_) {
        size_t j = i + 1;
        while (j < text_.size() && std::isalpha(static_cast<unsigned char>(text_[j]))) ++j;
        push(Token::kDirective, std::string(text_.substr(i, j - i)));
        i = j;
        continue;
      }
      if (c == '?' && line_start && !gbnf_) {
        push(Token::kRuleMark, "?");
        ++i;
        continue;
      }
      if (c == '.' && i + 1 < text_.size() && text_[i + 1] == '.') {
        push(Token::kOp, "..");
        i += 2;
        continue;
      }
      if (std::strchr("|()*+?{},~[].", c)) {
        push(Token::kOp, std::string(1, c));
        ++i;
        continue;
      }
      fail(std::string("unexpected character '") + c + "'");
    }
    tokens_.push_back(Token{Token::kEnd, "", line, true});
    tokens_.push_back(Token{Token::kEnd, "", line, true});
  }

  std::string unescape(const std::string& raw) {
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\' || i + 1 >= raw.size()) {
        out += raw[i];
        continue;
      }
      const char e = raw[++i];
      auto hex = [&](size_t n) {
        uint32_t v = 0;
        for (size_t k = 0; k < n; ++k) {
          if (i + 1 >= raw.size() || !std::isxdigit(static_cast<unsigned char>(raw[i + 1]))) fail("bad escape in a string");
          const char h = raw[++i];
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'x': out += static_cast<char>(hex(2)); break;
        case 'u': {
          const uint32_t cp = hex(4);
          if (cp < 0x80) out += static_cast<char>(cp);
          else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
          else { out += static_cast<char>(0xE0 | (cp >> 12)); out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
          break;
        }
        default: out += e; break;
      }
    }
    return out;
  }

  int rule_id(const std::string& name) {
    auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const int id = b_.new_rule(name);
    names_.emplace(name, id);
    return id;
  }

  bool at_rule_start() const {
    const Token& t = peek();
    if (t.kind == Token::kRuleMark || t.kind == Token::kDirective) return true;
    return t.kind == Token::kIdent && tokens_[pos_ + 1].kind == Token::kDefine;
  }

  std::vector<Sequence> alternatives() {
    std::vector<Sequence> alts;
    alts.push_back(sequence());
    while (peek().kind == Token::kOp && peek().text == "|") {
      ++pos_;
      alts.push_back(sequence());
    }
    return alts;
  }

  Sequence sequence() {
    Sequence seq;
    for (;;) {
      const Token& t = peek();
      if (t.kind == Token::kEnd || at_rule_start()) break;
      if (t.kind == Token::kOp && (t.text == "|" || t.text == ")" || t.text == "]")) break;
      seq.push_back(postfix(atom()));
    }
    return seq;
  }

  Element atom() {
    const Token t = peek();
    ++pos_;
    switch (t.kind) {
      case Token::kIdent: return b_.ref(rule_id(t.text));
      case Token::kString: {
        if (peek().kind == Token::kOp && peek().text == ".." && tokens_[pos_ + 1].kind == Token::kString) {
          const std::string hi = tokens_[pos_ + 1].text;
          pos_ += 2;
          if (t.text.size() != 1 || hi.size() != 1) fail("\"a\"..\"z\" ranges take single ASCII characters");
          ByteSet s;
          s.set_range(static_cast<uint8_t>(t.text[0]), static_cast<uint8_t>(hi[0]));
          return b_.cls(s);
        }
        return b_.literal(t.text);
      }
      case Token::kRegex: return compile_regex(b_, t.text, false, field_);
      case Token::kClass: return compile_regex(b_, t.text, false, field_);
      case Token::kOp:
        if (t.text == "(") {
          auto alts = alternatives();
          if (peek().kind != Token::kOp || peek().text != ")") fail("missing ')'");
          ++pos_;
          return b_.alt(std::move(alts), "group");
        }
        if (t.text == "[" && !gbnf_) {
          auto alts = alternatives();
          if (peek().kind != Token::kOp || peek().text != "]") fail("missing ']'");
          ++pos_;
          alts.push_back({});
          return b_.alt(std::move(alts), "maybe");
        }
        if (t.text == "." && gbnf_) return compile_regex(b_, ".", false, field_);
        fail("unexpected '" + t.text + "'");
      default: fail("unexpected '" + t.text + "'");
    }
  }

  int64_t number() {
    if (peek().kind != Token::kNumber) fail("expected a number");
    const int64_t v = std::stoll(peek().text.substr(0, 9));
    ++pos_;
    return v;
  }

  Element postfix(Element e) {
    for (;;) {
      const Token& t = peek();
      if (t.kind != Token::kOp) return e;
      if (t.text == "*") { ++pos_; e = b_.star(e); }
      else if (t.text == "+") { ++pos_; e = b_.plus(e); }
      else if (t.text == "?") { ++pos_; e = b_.optional(e); }
      else if (t.text == "{" && gbnf_) {
        ++pos_;
        const int64_t lo = number();
        int64_t hi = lo;
        if (peek().kind == Token::kOp && peek().text == ",") {
          ++pos_;
          hi = peek().kind == Token::kNumber ? number() : -1;
        }
        if (peek().kind != Token::kOp || peek().text != "}") fail("missing '}'");
        ++pos_;
        e = b_.repeat(e, lo, hi, field_);
      } else if (t.text == "~" && !gbnf_) {
        ++pos_;
        const int64_t lo = number();
        int64_t hi = lo;
        if (peek().kind == Token::kOp && peek().text == "..") {
          ++pos_;
          hi = number();
        }
        e = b_.repeat(e, lo, hi, field_);
      } else {
        return e;
      }
    }
  }

  void directive() {
    const std::string d = peek().text;
    ++pos_;
    if (d == "%ignore") fail("%ignore is not supported: write the whitespace into the rules");
    if (d != "%import") fail("the directive " + d + " is not supported");
    if (peek().kind != Token::kIdent) fail("expected a module after %import");
    std::string path = peek().text;
    ++pos_;
    std::vector<std::string> names;
    // common.NAME arrives as one identifier "common" then ".", "NAME"
    if (peek().kind == Token::kOp && peek().text == ".") {
      ++pos_;
      if (peek().kind != Token::kIdent) fail("expected a name after %import common.");
      names.push_back(peek().text);
      ++pos_;
    } else if (peek().kind == Token::kOp && peek().text == "(") {
      ++pos_;
      while (peek().kind == Token::kIdent) {
        names.push_back(peek().text);
        ++pos_;
        if (peek().kind == Token::kOp && peek().text == ",") ++pos_;
      }
      if (peek().kind != Token::kOp || peek().text != ")") fail("missing ')' in %import");
      ++pos_;
    }
    if (path != "common") fail("only %import common is supported");
    for (const std::string& n : names) {
      static const std::pair<const char*, const char*> kCommon[] = {
          {"WS", "[ \\t\\f\\r\\n]+"}, {"WS_INLINE", "[ \\t]+"}, {"NEWLINE", "(\\r?\\n)+"}, {"CR", "\\r"}, {"LF", "\\n"},
          {"DIGIT", "[0-9]"}, {"HEXDIGIT", "[0-9a-fA-F]"}, {"INT", "[0-9]+"}, {"SIGNED_INT", "[+-]?[0-9]+"},
          {"DECIMAL", "[0-9]+\\.[0-9]*|\\.[0-9]+"}, {"FLOAT", "[0-9]+\\.[0-9]*([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"},
          {"NUMBER", "[0-9]+(\\.[0-9]*)?([eE][+-]?[0-9]+)?"}, {"SIGNED_NUMBER", "[+-]?[0-9]+(\\.[0-9]*)?([eE][+-]?[0-9]+)?"},
          {"LETTER", "[A-Za-z]"}, {"LCASE_LETTER", "[a-z]"}, {"UCASE_LETTER", "[A-Z]"}, {"WORD", "[A-Za-z]+"},
          {"CNAME", "[_A-Za-z][_A-Za-z0-9]*"}, {"ESCAPED_STRING", "\"([^\"\\\\]|\\\\.)*\""}};
      const char* re = nullptr;
      for (auto& [k, v] : kCommon) {
        if (n == k) re = v;
      }
      if (!re) fail("common." + n + " is not a known terminal");
      const int id = rule_id(n);
      if (defined_.count(id)) continue;
      defined_[id] = true;
      b_.add_alt(id, {compile_regex(b_, re, false, field_)});
    }
  }

  std::string_view text_;
  std::string field_;
  bool gbnf_ = false;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::unordered_map<std::string, int> names_;
  std::unordered_map<int, bool> defined_;
};

}  // namespace

Grammar compile_ebnf(std::string_view text, const std::string& field) {
  if (text.size() > (1u << 20)) throw Error(ErrorCode::kInvalidArgument, field + ": the grammar is too long", field);
  EbnfCompiler c(text, field);
  return c.compile();
}

}  // namespace peregrine::engine::structured
