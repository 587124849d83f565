// The Jinja parser (see parser.h): statements and the template body; expressions are in parser_expressions.cpp.
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_impl.h"

namespace peregrine::jinja {
namespace detail {

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

// Parses until "{% <one of end_names>" (left unconsumed) or the end of input (only valid when end_names is
// empty). opener names the block for the error message.
std::vector<NodePtr> Parser::parse_body(std::initializer_list<std::string_view> end_names, uint32_t opener_offset, std::string_view opener) {
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

void Parser::expect_end_tag(std::string_view name) {
  expect(TokenType::kOpenStatement, "'{%'");
  expect_name(name);
  expect(TokenType::kCloseStatement, "'%}'");
}

NodePtr Parser::parse_statement() {
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

NodePtr Parser::parse_if(uint32_t offset) {
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
NodePtr Parser::parse_name_target() {
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

NodePtr Parser::parse_for(uint32_t offset) {
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
std::vector<NodePtr> Parser::parse_detached_body(std::string_view end, uint32_t offset, std::string_view opener) {
  const int saved = loop_depth_;
  loop_depth_ = 0;
  std::vector<NodePtr> body = parse_body({end}, offset, opener);
  loop_depth_ = saved;
  expect_end_tag(end);
  return body;
}

NodePtr Parser::parse_set(uint32_t offset) {
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
std::vector<NodePtr> Parser::parse_parameters() {
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

NodePtr Parser::parse_macro(uint32_t offset) {
  NodePtr node = make(NodeKind::kMacro, offset);
  node->name = expect(TokenType::kName, "a macro name").value;
  node->params = parse_parameters();
  expect(TokenType::kCloseStatement, "'%}'");
  node->body = parse_detached_body("endmacro", offset, "macro");
  return node;
}

NodePtr Parser::parse_call_block(uint32_t offset) {
  NodePtr node = make(NodeKind::kCallBlock, offset);
  if (at(TokenType::kOpenParen)) node->params = parse_parameters();
  NodePtr call = parse_postfix();
  if (call->kind != NodeKind::kCall) fail(call->offset, "expected a macro call after '{% call'");
  node->children.push_back(std::move(call));
  expect(TokenType::kCloseStatement, "'%}'");
  node->body = parse_detached_body("endcall", offset, "call");
  return node;
}

NodePtr Parser::parse_filter_block(uint32_t offset) {
  NodePtr node = make(NodeKind::kFilterBlock, offset);
  node->children.push_back(parse_filter_application(nullptr));
  expect(TokenType::kCloseStatement, "'%}'");
  node->body = parse_detached_body("endfilter", offset, "filter");
  return node;
}

}  // namespace detail

std::vector<NodePtr> parse_template(const std::vector<Token>& tokens, const SourceMap& map) {
  return detail::Parser(tokens, map).parse_all();
}

}  // namespace peregrine::jinja
