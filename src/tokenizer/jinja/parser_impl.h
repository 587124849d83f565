// The parser's class, shared by parser.cpp (statements) and parser_expressions.cpp (expressions); internal to
// the Jinja subset. See parser.h for the grammar and limits.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/parser.h"

namespace peregrine::jinja::detail {

std::string describe_token(const Token& t);

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const SourceMap& map) : tokens_(tokens), map_(map) {}

  std::vector<NodePtr> parse_all() {
    std::vector<NodePtr> body = parse_body({}, 0, "");
    return body;
  }

 private:
  // Depth accounting for everything that recurses.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) {
        p_.fail(p_.peek().offset, "template nesting exceeds " + std::to_string(kMaxParseDepth) + " levels");
      }
    }
    ~DepthGuard() { --p_.depth_; }

   private:
    Parser& p_;
  };

  const Token& peek(size_t ahead = 0) const {
    const size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at(TokenType type) const { return peek().type == type; }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kName && peek(ahead).value == name;
  }
  bool at_operator(std::string_view op) const { return at(TokenType::kOperator) && peek().value == op; }

  [[noreturn]] void fail(uint32_t offset, const std::string& message,
                         ErrorCode code = ErrorCode::kInvalidArgument) const {
    throw Error(code, "chat template: " + map_.describe(offset) + ": " + message);
  }
  const Token& expect(TokenType type, std::string_view what) {
    if (!at(type)) fail(peek().offset, "expected " + std::string(what) + ", found " + describe_token(peek()));
    return next();
  }
  void expect_name(std::string_view name) {
    if (!at_name(name)) fail(peek().offset, "expected '" + std::string(name) + "', found " + describe_token(peek()));
    next();
  }
  NodePtr make(NodeKind kind, uint32_t offset) { return std::make_unique<Node>(kind, offset); }

  // Computes the height of an expression node from its children and enforces kMaxExpressionHeight.
  NodePtr seal(NodePtr node) {
    uint32_t tallest = 0;
    for (const NodePtr& child : node->children) {
      if (child) tallest = std::max(tallest, child->height);
    }
    node->height = tallest + 1;
    if (node->height > kMaxExpressionHeight) {
      fail(node->offset, "expression nested deeper than " + std::to_string(kMaxExpressionHeight) + " levels");
    }
    return node;
  }

  // ---- statements (parser.cpp) ----
  // Parses until "{% <one of end_names>" (left unconsumed) or the end of input (only valid when end_names is
  // empty). opener names the block for the error message.
  std::vector<NodePtr> parse_body(std::initializer_list<std::string_view> end_names, uint32_t opener_offset, std::string_view opener);
  void expect_end_tag(std::string_view name);
  NodePtr parse_statement();
  NodePtr parse_if(uint32_t offset);
  // A loop or assignment target: a name or a tuple of names.
  NodePtr parse_name_target();
  NodePtr parse_for(uint32_t offset);
  // Bodies of macros, call blocks, filter blocks and block sets are not inside the enclosing loop.
  std::vector<NodePtr> parse_detached_body(std::string_view end, uint32_t offset, std::string_view opener);
  NodePtr parse_set(uint32_t offset);
  // Macro or caller parameters: (a, b, c=default).
  std::vector<NodePtr> parse_parameters();
  NodePtr parse_macro(uint32_t offset);
  NodePtr parse_call_block(uint32_t offset);
  NodePtr parse_filter_block(uint32_t offset);

  // ---- expressions (parser_expressions.cpp) ----
  NodePtr parse_expression();
  // expr or expr, expr, ... (a tuple)
  NodePtr parse_expression_sequence();
  NodePtr binary(std::string op, uint32_t offset, NodePtr left, NodePtr right);
  NodePtr parse_or();
  NodePtr parse_and();
  NodePtr parse_not();
  NodePtr parse_compare();
  template <typename Sub>
  NodePtr parse_left_assoc(std::initializer_list<std::string_view> ops, Sub sub);
  NodePtr parse_additive();
  NodePtr parse_multiplicative();
  NodePtr parse_power();
  bool starts_test_argument() const;
  NodePtr parse_test();
  NodePtr parse_filter_application(NodePtr operand);
  NodePtr parse_filter();
  NodePtr parse_unary();
  // (args) of a call, filter or test, appended to out.
  void parse_call_arguments(std::vector<NodePtr>& out);
  NodePtr parse_subscript(NodePtr object, uint32_t offset);
  NodePtr parse_postfix();
  NodePtr parse_primary();

  const std::vector<Token>& tokens_;
  const SourceMap& map_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace peregrine::jinja::detail
