// The Jinja parser: tokens -> syntax tree (ast.h). Operator precedence follows @huggingface/jinja (lowest first):
// ternary, or, and, not, comparisons and `in`, + - ~, * / // %, **, `is` tests, | filters, unary +/-, member
// access and calls. Unknown filters, tests and statements are rejected here, with line and column.
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace peregrine::jinja {

// Nesting deeper than this (parentheses, brackets, blocks) is an error rather than a stack overflow.
constexpr int kMaxParseDepth = 128;
// Expression trees taller than this (e.g. a chain of thousands of `+` or filters) are an error too: the
// interpreter evaluates them recursively.
constexpr uint32_t kMaxExpressionHeight = 256;

// Throws peregrine::Error: kInvalidArgument for syntax errors, kUnsupported for Jinja features we do not
// implement (include, extends, raw, ...); both name the line and column.
std::vector<NodePtr> parse_template(const std::vector<Token>& tokens, const SourceMap& map);

}  // namespace peregrine::jinja
