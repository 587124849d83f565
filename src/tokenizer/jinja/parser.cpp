// The Jinja parser (see parser.h): a recursive-descent parser over the lexer's tokens with a depth limit.
#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "core/status.h"
#include "tokenizer/jinja/builtins.h"

namespace peregrine::jinja {
namespace {

std::string describe_token(const Token& t) {
  switch (t.type) {
    case TokenType::kEnd: return "the end of the template";
    case TokenType::kText: return "text";
    case TokenType::kString: return "a string";
    case TokenType::kNumber: return "number " + t.value;
    case TokenType::kName: return "'" + t.value + "'";
    default: return "'" + t.value + "'";
  }
}

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

  // ---- statements ----

  // Parses until "{% <one of end_names>" (left unconsumed) or the end of input (only valid when end_names is
  // empty). opener names the block for the error message.
  std::vector<NodePtr> parse_body(std::initializer_list<std::string_view> end_names, uint32_t opener_offset,
                                  std::string_view opener) {
    std::vector<NodePtr> body;
    while (true) {
      const Token& t = peek();
      switch (t.type) {
        case TokenType::kEnd:
          if (end_names.size() == 0) return body;
          fail(opener_offset, "'{% " + std::string(opener) + " %}' is never closed (expected '{% " +
                                  std::string(*(end_names.end() - 1)) + " %}')");
        case TokenType::kText: {
          NodePtr text = make(NodeKind::kText, t.offset);
          text->literal = Value::string(t.value);
          next();
          body.push_back(std::move(text));
          break;
        }
        case TokenType::kComment: next(); break;
        case TokenType::kOpenExpression: {
          next();
          body.push_back(parse_expression());
          expect(TokenType::kCloseExpression, "'}}'");
          break;
        }
        case TokenType::kOpenStatement: {
          if (peek(1).type == TokenType::kName) {
            for (std::string_view end : end_names) {
              if (peek(1).value == end) return body;
            }
          }
          body.push_back(parse_statement());
          break;
        }
        default: fail(t.offset, "unexpected " + describe_token(t));
      }
    }
  }

  void expect_end_tag(std::string_view name) {
    expect(TokenType::kOpenStatement, "'{%'");
    expect_name(name);
    expect(TokenType::kCloseStatement, "'%}'");
  }

  NodePtr parse_statement() {
    DepthGuard guard(*this);
    const Token& open = next();  // {%
    const Token& keyword = peek();
    if (keyword.type != TokenType::kName) fail(keyword.offset, "expected a statement name after '{%'");
    const std::string name = keyword.value;
    next();
    if (name == "if") return parse_if(open.offset);
    if (name == "for") return parse_for(open.offset);
    if (name == "set") return parse_set(open.offset);
    if (name == "macro") return parse_macro(open.offset);
    if (name == "call") return parse_call_block(open.offset);
    if (name == "filter") return parse_filter_block(open.offset);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(keyword.offset, "'" + name + "' outside of a for loop");
      expect(TokenType::kCloseStatement, "'%}'");
      return make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, open.offset);
    }
    static constexpr std::string_view kClosers[] = {"elif", "else", "endif", "endfor", "endset", "endmacro",
                                                    "endcall", "endfilter"};
    for (std::string_view closer : kClosers) {
      if (name == closer) fail(keyword.offset, "unexpected '{% " + name + " %}'");
    }
    fail(keyword.offset, "unsupported statement '{% " + name + " %}'", ErrorCode::kUnsupported);
  }

  NodePtr parse_if(uint32_t offset) {
    NodePtr root = make(NodeKind::kIf, offset);
    Node* current = root.get();
    while (true) {
      current->children.push_back(parse_expression());
      expect(TokenType::kCloseStatement, "'%}'");
      current->body = parse_body({"elif", "else", "endif"}, offset, "if");
      if (at_name("elif", 1)) {
        const uint32_t elif_offset = next().offset;
        next();
        current->alternate.push_back(make(NodeKind::kIf, elif_offset));
        current = current->alternate.back().get();
        continue;
      }
      if (at_name("else", 1)) {
        next();
        next();
        expect(TokenType::kCloseStatement, "'%}'");
        current->alternate = parse_body({"endif"}, offset, "if");
      }
      expect_end_tag("endif");
      return root;
    }
  }

  // A loop or assignment target: a name or a tuple of names.
  NodePtr parse_name_target() {
    const Token& first = expect(TokenType::kName, "a variable name");
    NodePtr name = make(NodeKind::kName, first.offset);
    name->name = first.value;
    if (!at(TokenType::kComma)) return name;
    NodePtr tuple = make(NodeKind::kTuple, first.offset);
    tuple->children.push_back(std::move(name));
    while (at(TokenType::kComma)) {
      next();
      const Token& t = expect(TokenType::kName, "a variable name");
      NodePtr item = make(NodeKind::kName, t.offset);
      item->name = t.value;
      tuple->children.push_back(std::move(item));
    }
    return tuple;
  }

  NodePtr parse_for(uint32_t offset) {
    NodePtr node = make(NodeKind::kFor, offset);
    node->children.push_back(parse_name_target());
    expect_name("in");
    NodePtr iterable = parse_or();
    NodePtr filter;
    if (at_name("if")) {
      const uint32_t if_offset = next().offset;
      NodePtr condition = parse_or();
      if (at_name("else")) {  // a ternary iterable, not a loop filter
        next();
        NodePtr ternary = make(NodeKind::kTernary, if_offset);
        ternary->children.push_back(std::move(iterable));
        ternary->children.push_back(std::move(condition));
        ternary->children.push_back(parse_expression());
        iterable = std::move(ternary);
      } else {
        filter = std::move(condition);
      }
    }
    if (at_name("recursive")) fail(peek().offset, "recursive for loops are not supported", ErrorCode::kUnsupported);
    expect(TokenType::kCloseStatement, "'%}'");
    node->children.push_back(std::move(iterable));
    node->children.push_back(std::move(filter));
    ++loop_depth_;
    node->body = parse_body({"else", "endfor"}, offset, "for");
    --loop_depth_;
    if (at_name("else", 1)) {
      next();
      next();
      expect(TokenType::kCloseStatement, "'%}'");
      node->alternate = parse_body({"endfor"}, offset, "for");
    }
    expect_end_tag("endfor");
    return node;
  }

  // Bodies of macros, call blocks, filter blocks and block sets are not inside the enclosing loop.
  std::vector<NodePtr> parse_detached_body(std::string_view end, uint32_t offset, std::string_view opener) {
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::vector<NodePtr> body = parse_body({end}, offset, opener);
    loop_depth_ = saved;
    expect_end_tag(end);
    return body;
  }

  NodePtr parse_set(uint32_t offset) {
    NodePtr node = make(NodeKind::kSet, offset);
    NodePtr target;
    if (at(TokenType::kName) && peek(1).type == TokenType::kDot) {
      target = parse_postfix();
      if (target->kind != NodeKind::kMember || target->children[0]->kind != NodeKind::kName ||
          !target->children[1]->literal.is_string()) {
        fail(target->offset, "can only assign to a name, a tuple of names or an attribute of a namespace");
      }
    } else {
      target = parse_name_target();
    }
    node->children.push_back(std::move(target));
    if (at_operator("=")) {
      next();
      node->children.push_back(parse_expression_sequence());
      expect(TokenType::kCloseStatement, "'%}'");
      return node;
    }
    if (node->children[0]->kind != NodeKind::kName) fail(offset, "a block set assigns to a single name");
    expect(TokenType::kCloseStatement, "'=' or '%}'");
    node->children.push_back(nullptr);
    node->body = parse_detached_body("endset", offset, "set");
    return node;
  }

  // Macro or caller parameters: (a, b, c=default).
  std::vector<NodePtr> parse_parameters() {
    std::vector<NodePtr> params;
    expect(TokenType::kOpenParen, "'('");
    bool saw_default = false;
    while (!at(TokenType::kCloseParen)) {
      const Token& t = expect(TokenType::kName, "a parameter name");
      for (const NodePtr& p : params) {
        if (p->name == t.value) fail(t.offset, "duplicate parameter '" + t.value + "'");
      }
      if (at_operator("=")) {
        next();
        NodePtr param = make(NodeKind::kKeywordArg, t.offset);
        param->name = t.value;
        param->children.push_back(parse_expression());
        params.push_back(std::move(param));
        saw_default = true;
      } else {
        if (saw_default) fail(t.offset, "a parameter without a default follows one with a default");
        NodePtr param = make(NodeKind::kName, t.offset);
        param->name = t.value;
        params.push_back(std::move(param));
      }
      if (!at(TokenType::kComma)) break;
      next();
    }
    expect(TokenType::kCloseParen, "')'");
    return params;
  }

  NodePtr parse_macro(uint32_t offset) {
    NodePtr node = make(NodeKind::kMacro, offset);
    node->name = expect(TokenType::kName, "a macro name").value;
    node->params = parse_parameters();
    expect(TokenType::kCloseStatement, "'%}'");
    node->body = parse_detached_body("endmacro", offset, "macro");
    return node;
  }

  NodePtr parse_call_block(uint32_t offset) {
    NodePtr node = make(NodeKind::kCallBlock, offset);
    if (at(TokenType::kOpenParen)) node->params = parse_parameters();
    NodePtr call = parse_postfix();
    if (call->kind != NodeKind::kCall) fail(call->offset, "expected a macro call after '{% call'");
    node->children.push_back(std::move(call));
    expect(TokenType::kCloseStatement, "'%}'");
    node->body = parse_detached_body("endcall", offset, "call");
    return node;
  }

  NodePtr parse_filter_block(uint32_t offset) {
    NodePtr node = make(NodeKind::kFilterBlock, offset);
    node->children.push_back(parse_filter_application(nullptr));
    expect(TokenType::kCloseStatement, "'%}'");
    node->body = parse_detached_body("endfilter", offset, "filter");
    return node;
  }

  // ---- expressions ----

  NodePtr parse_expression() {
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
  NodePtr parse_expression_sequence() {
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

  NodePtr binary(std::string op, uint32_t offset, NodePtr left, NodePtr right) {
    NodePtr node = make(NodeKind::kBinary, offset);
    node->name = std::move(op);
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    return seal(std::move(node));
  }

  NodePtr parse_or() {
    NodePtr left = parse_and();
    while (at_name("or")) {
      const uint32_t offset = next().offset;
      left = binary("or", offset, std::move(left), parse_and());
    }
    return left;
  }

  NodePtr parse_and() {
    NodePtr left = parse_not();
    while (at_name("and")) {
      const uint32_t offset = next().offset;
      left = binary("and", offset, std::move(left), parse_not());
    }
    return left;
  }

  NodePtr parse_not() {
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

  NodePtr parse_compare() {
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
  NodePtr parse_left_assoc(std::initializer_list<std::string_view> ops, Sub sub) {
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
  NodePtr parse_additive() { return parse_left_assoc({"+", "-", "~"}, &Parser::parse_multiplicative); }
  NodePtr parse_multiplicative() { return parse_left_assoc({"*", "/", "//", "%"}, &Parser::parse_power); }
  NodePtr parse_power() { return parse_left_assoc({"**"}, &Parser::parse_test); }

  bool starts_test_argument() const {
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

  NodePtr parse_test() {
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

  NodePtr parse_filter_application(NodePtr operand) {
    const Token& name = expect(TokenType::kName, "a filter name");
    if (!is_known_filter(name.value)) fail(name.offset, "unknown filter '" + name.value + "'", ErrorCode::kUnsupported);
    NodePtr filter = make(NodeKind::kFilter, name.offset);
    filter->name = name.value;
    filter->children.push_back(std::move(operand));
    if (at(TokenType::kOpenParen)) parse_call_arguments(filter->children);
    return seal(std::move(filter));
  }

  NodePtr parse_filter() {
    NodePtr operand = parse_unary();
    while (at(TokenType::kPipe)) {
      next();
      operand = parse_filter_application(std::move(operand));
    }
    return operand;
  }

  NodePtr parse_unary() {
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
  void parse_call_arguments(std::vector<NodePtr>& out) {
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

  NodePtr parse_subscript(NodePtr object, uint32_t offset) {
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

  NodePtr parse_postfix() {
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

  NodePtr parse_primary() {
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

  const std::vector<Token>& tokens_;
  const SourceMap& map_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::vector<NodePtr> parse_template(const std::vector<Token>& tokens, const SourceMap& map) {
  return Parser(tokens, map).parse_all();
}

}  // namespace peregrine::jinja
