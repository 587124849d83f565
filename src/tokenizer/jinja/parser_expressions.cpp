// The Jinja parser's expressions: precedence climbing from ternaries down to literals (see parser.h).
#include <charconv>
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_impl.h"

namespace peregrine::jinja::detail {

NodePtr Parser::parse_expression() {
  DepthGuard guard(*this);
  NodePtr value = parse_or();
  if (!at_name("if")) return value;
  NodePtr ternary = make(NodeKind::kTernary, next().offset);
  ternary->children.push_back(std::move(value));
  ternary->children.push_back(parse_or());
  if (at_name("else")) {
    next();
    ternary->children.push_back(parse_expression());
  } else {
    ternary->children.push_back(nullptr);
  }
  return seal(std::move(ternary));
}

// expr or expr, expr, ... (a tuple)
NodePtr Parser::parse_expression_sequence() {
  NodePtr first = parse_expression();
  if (!at(TokenType::kComma)) return first;
  NodePtr tuple = make(NodeKind::kTuple, first->offset);
  tuple->children.push_back(std::move(first));
  while (at(TokenType::kComma)) {
    next();
    tuple->children.push_back(parse_expression());
  }
  return tuple;
}

NodePtr Parser::binary(std::string op, uint32_t offset, NodePtr left, NodePtr right) {
  NodePtr node = make(NodeKind::kBinary, offset);
  node->name = std::move(op);
  node->children.push_back(std::move(left));
  node->children.push_back(std::move(right));
  return seal(std::move(node));
}

NodePtr Parser::parse_or() {
  NodePtr left = parse_and();
  while (at_name("or")) {
    const uint32_t offset = next().offset;
    left = binary("or", offset, std::move(left), parse_and());
  }
  return left;
}

NodePtr Parser::parse_and() {
  NodePtr left = parse_not();
  while (at_name("and")) {
    const uint32_t offset = next().offset;
    left = binary("and", offset, std::move(left), parse_not());
  }
  return left;
}

NodePtr Parser::parse_not() {
  std::vector<uint32_t> nots;
  while (at_name("not")) nots.push_back(next().offset);
  NodePtr operand = parse_compare();
  for (auto it = nots.rbegin(); it != nots.rend(); ++it) {
    NodePtr node = make(NodeKind::kUnary, *it);
    node->name = "not";
    node->children.push_back(std::move(operand));
    operand = seal(std::move(node));
  }
  return operand;
}

NodePtr Parser::parse_compare() {
  NodePtr left = parse_additive();
  while (true) {
    std::string op;
    if (at_name("not") && at_name("in", 1)) {
      op = "not in";
    } else if (at_name("in")) {
      op = "in";
    } else if (at(TokenType::kOperator) && (peek().value == "==" || peek().value == "!=" || peek().value == "<" ||
                                            peek().value == ">" || peek().value == "<=" || peek().value == ">=")) {
      op = peek().value;
    } else {
      return left;
    }
    const uint32_t offset = next().offset;
    if (op == "not in") next();
    left = binary(op, offset, std::move(left), parse_additive());
  }
}

template <typename Sub>
NodePtr Parser::parse_left_assoc(std::initializer_list<std::string_view> ops, Sub sub) {
  NodePtr left = (this->*sub)();
  while (at(TokenType::kOperator)) {
    bool matched = false;
    for (std::string_view op : ops) matched = matched || peek().value == op;
    if (!matched) break;
    const Token& t = next();
    left = binary(t.value, t.offset, std::move(left), (this->*sub)());
  }
  return left;
}

NodePtr Parser::parse_additive() { return parse_left_assoc({"+", "-", "~"}, &Parser::parse_multiplicative); }
NodePtr Parser::parse_multiplicative() { return parse_left_assoc({"*", "/", "//", "%"}, &Parser::parse_power); }
NodePtr Parser::parse_power() { return parse_left_assoc({"**"}, &Parser::parse_test); }

bool Parser::starts_test_argument() const {
  const Token& t = peek();
  if (t.type == TokenType::kName) {
    for (std::string_view word : {"else", "or", "and", "if", "is", "not", "in"}) {
      if (t.value == word) return false;
    }
    return true;
  }
  return t.type == TokenType::kString || t.type == TokenType::kNumber || t.type == TokenType::kOpenBracket ||
         t.type == TokenType::kOpenBrace;
}

NodePtr Parser::parse_test() {
  NodePtr operand = parse_filter();
  while (at_name("is")) {
    const uint32_t offset = next().offset;
    NodePtr test = make(NodeKind::kTest, offset);
    if (at_name("not")) {
      next();
      test->negate = true;
    }
    const Token& name = expect(TokenType::kName, "a test name");
    if (!is_known_test(name.value)) fail(name.offset, "unknown test '" + name.value + "'", ErrorCode::kUnsupported);
    test->name = name.value;
    test->children.push_back(std::move(operand));
    if (at(TokenType::kOpenParen)) {
      parse_call_arguments(test->children);
    } else if (starts_test_argument()) {
      test->children.push_back(parse_postfix());
    }
    operand = seal(std::move(test));
  }
  return operand;
}

NodePtr Parser::parse_filter_application(NodePtr operand) {
  const Token& name = expect(TokenType::kName, "a filter name");
  if (!is_known_filter(name.value)) fail(name.offset, "unknown filter '" + name.value + "'", ErrorCode::kUnsupported);
  NodePtr filter = make(NodeKind::kFilter, name.offset);
  filter->name = name.value;
  filter->children.push_back(std::move(operand));
  if (at(TokenType::kOpenParen)) parse_call_arguments(filter->children);
  return seal(std::move(filter));
}

NodePtr Parser::parse_filter() {
  NodePtr operand = parse_unary();
  while (at(TokenType::kPipe)) {
    next();
    operand = parse_filter_application(std::move(operand));
  }
  return operand;
}

NodePtr Parser::parse_unary() {
  std::vector<const Token*> signs;
  while (at_operator("-") || at_operator("+")) signs.push_back(&next());
  NodePtr operand = parse_postfix();
  for (auto it = signs.rbegin(); it != signs.rend(); ++it) {
    NodePtr node = make(NodeKind::kUnary, (*it)->offset);
    node->name = (*it)->value;
    node->children.push_back(std::move(operand));
    operand = seal(std::move(node));
  }
  return operand;
}

// (args) of a call, filter or test, appended to out.
void Parser::parse_call_arguments(std::vector<NodePtr>& out) {
  expect(TokenType::kOpenParen, "'('");
  bool saw_keyword = false;
  while (!at(TokenType::kCloseParen)) {
    const uint32_t offset = peek().offset;
    NodePtr arg;
    if (at_operator("**")) {
      next();
      arg = make(NodeKind::kKeywordSpread, offset);
      arg->children.push_back(parse_expression());
      saw_keyword = true;
    } else if (at_operator("*")) {
      next();
      arg = make(NodeKind::kSpread, offset);
      arg->children.push_back(parse_expression());
    } else if (at(TokenType::kName) && peek(1).type == TokenType::kOperator && peek(1).value == "=") {
      arg = make(NodeKind::kKeywordArg, offset);
      arg->name = next().value;
      next();
      arg->children.push_back(parse_expression());
      saw_keyword = true;
    } else {
      if (saw_keyword) fail(offset, "a positional argument follows a keyword argument");
      arg = parse_expression();
    }
    out.push_back(arg->kind == NodeKind::kKeywordArg || arg->kind == NodeKind::kSpread ||
                          arg->kind == NodeKind::kKeywordSpread
                      ? seal(std::move(arg))
                      : std::move(arg));
    if (!at(TokenType::kComma)) break;
    next();
  }
  expect(TokenType::kCloseParen, "')'");
}

NodePtr Parser::parse_subscript(NodePtr object, uint32_t offset) {
  std::vector<NodePtr> parts;
  parts.emplace_back();
  bool is_slice = false;
  while (!at(TokenType::kCloseBracket)) {
    if (at(TokenType::kColon)) {
      next();
      is_slice = true;
      parts.emplace_back();
      continue;
    }
    if (parts.back()) fail(peek().offset, "expected ':' or ']' in a subscript");
    parts.back() = parse_expression();
  }
  expect(TokenType::kCloseBracket, "']'");
  if (!is_slice) {
    if (!parts[0]) fail(offset, "empty subscript '[]'");
    NodePtr member = make(NodeKind::kMember, offset);
    member->children.push_back(std::move(object));
    member->children.push_back(std::move(parts[0]));
    return member;
  }
  if (parts.size() > 3) fail(offset, "a slice takes at most three parts (start:stop:step)");
  NodePtr slice = make(NodeKind::kSlice, offset);
  slice->children.push_back(std::move(object));
  parts.resize(3);
  for (NodePtr& p : parts) slice->children.push_back(std::move(p));
  return slice;
}

NodePtr Parser::parse_postfix() {
  NodePtr expr = parse_primary();
  while (true) {
    const Token& t = peek();
    if (t.type == TokenType::kDot) {
      next();
      const Token& key = peek();
      NodePtr key_node = make(NodeKind::kLiteral, key.offset);
      if (key.type == TokenType::kName) {
        key_node->literal = Value::string(key.value);
      } else if (key.type == TokenType::kNumber && key.value.find('.') == std::string::npos) {
        key_node->literal = Value::integer(std::atoll(key.value.c_str()));
      } else {
        fail(key.offset, "expected an attribute name after '.'");
      }
      next();
      NodePtr member = make(NodeKind::kMember, t.offset);
      member->children.push_back(std::move(expr));
      member->children.push_back(std::move(key_node));
      expr = seal(std::move(member));
    } else if (t.type == TokenType::kOpenBracket) {
      next();
      expr = seal(parse_subscript(std::move(expr), t.offset));
    } else if (t.type == TokenType::kOpenParen) {
      NodePtr call = make(NodeKind::kCall, expr->offset);
      call->children.push_back(std::move(expr));
      parse_call_arguments(call->children);
      expr = seal(std::move(call));
    } else {
      return expr;
    }
  }
}

NodePtr Parser::parse_primary() {
  const Token& t = peek();
  switch (t.type) {
    case TokenType::kNumber: {
      next();
      NodePtr node = make(NodeKind::kLiteral, t.offset);
      int64_t v = 0;
      const bool is_float = t.value.find('.') != std::string::npos;
      const auto result = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
      if (!is_float && result.ec == std::errc()) {
        node->literal = Value::integer(v);
      } else {
        node->literal = Value::floating(std::strtod(t.value.c_str(), nullptr));
      }
      return node;
    }
    case TokenType::kString: {
      NodePtr node = make(NodeKind::kLiteral, t.offset);
      std::string value;
      while (at(TokenType::kString)) value += next().value;  // "a" "b" concatenates
      node->literal = Value::string(std::move(value));
      return node;
    }
    case TokenType::kName: {
      next();
      NodePtr node = make(NodeKind::kLiteral, t.offset);
      if (t.value == "true" || t.value == "True") {
        node->literal = Value::boolean(true);
      } else if (t.value == "false" || t.value == "False") {
        node->literal = Value::boolean(false);
      } else if (t.value == "none" || t.value == "None") {
        node->literal = Value::none();
      } else {
        node->kind = NodeKind::kName;
        node->name = t.value;
      }
      return node;
    }
    case TokenType::kOpenParen: {
      next();
      NodePtr tuple = make(NodeKind::kTuple, t.offset);
      if (at(TokenType::kCloseParen)) {
        next();
        return tuple;
      }
      NodePtr first = parse_expression();
      if (!at(TokenType::kComma)) {
        expect(TokenType::kCloseParen, "')'");
        return first;
      }
      tuple->children.push_back(std::move(first));
      while (at(TokenType::kComma)) {
        next();
        if (at(TokenType::kCloseParen)) break;
        tuple->children.push_back(parse_expression());
      }
      expect(TokenType::kCloseParen, "')'");
      return seal(std::move(tuple));
    }
    case TokenType::kOpenBracket: {
      next();
      NodePtr list = make(NodeKind::kList, t.offset);
      while (!at(TokenType::kCloseBracket)) {
        list->children.push_back(parse_expression());
        if (!at(TokenType::kComma)) break;
        next();
      }
      expect(TokenType::kCloseBracket, "']'");
      return seal(std::move(list));
    }
    case TokenType::kOpenBrace: {
      next();
      NodePtr dict = make(NodeKind::kDict, t.offset);
      while (!at(TokenType::kCloseBrace)) {
        dict->children.push_back(parse_expression());
        expect(TokenType::kColon, "':'");
        dict->children.push_back(parse_expression());
        if (!at(TokenType::kComma)) break;
        next();
      }
      expect(TokenType::kCloseBrace, "'}'");
      return seal(std::move(dict));
    }
    default: fail(t.offset, "expected an expression, found " + describe_token(t));
  }
}

}  // namespace peregrine::jinja::detail
