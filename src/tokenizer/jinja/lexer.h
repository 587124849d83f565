// The Jinja lexer: applies transformers' whitespace options (trim_blocks, lstrip_blocks, one trailing newline
// dropped, {% generation %} tags removed) and splits the template into text and tag tokens. Every token keeps
// the byte offset of its first character in the ORIGINAL source, so errors can name a line and column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::jinja {

enum class TokenType : uint8_t {
  kText,            // literal text between tags
  kNumber,          // 12, 1.5
  kString,          // 'abc' or "abc", value unescaped
  kName,            // identifiers and keywords
  kOperator,        // + - ~ * / // % ** == != < > <= >= =
  kOpenParen,       // (
  kCloseParen,      // )
  kOpenBracket,     // [
  kCloseBracket,    // ]
  kOpenBrace,       // {
  kCloseBrace,      // }
  kComma,           // ,
  kDot,             // .
  kColon,           // :
  kPipe,            // |
  kOpenStatement,   // {%
  kCloseStatement,  // %}
  kOpenExpression,  // {{
  kCloseExpression, // }}
  kComment,         // {# ... #}; the parser skips it
  kEnd,             // end of input
};

struct Token {
  TokenType type;
  std::string value;
  uint32_t offset;  // byte offset in the original source
};

// Maps byte offsets of the original source to 1-based line and column (columns count code points).
class SourceMap {
 public:
  explicit SourceMap(std::string_view source);
  std::string describe(uint32_t offset) const;  // "line 3, column 7"

 private:
  std::string_view source_;
  std::vector<uint32_t> line_starts_;
};

// Tokenizes a template. Throws peregrine::Error(kInvalidArgument) with line and column on malformed input
// (unterminated string, comment or tag, unexpected character, invalid UTF-8).
std::vector<Token> tokenize(std::string_view source, const SourceMap& map);

}  // namespace peregrine::jinja
