// The syntax tree of a parsed Jinja template. One node type with a kind tag keeps the tree small and easy to
// walk; which fields a kind uses is listed next to it. Offsets point into the original template source.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace peregrine::jinja {

enum class NodeKind : uint8_t {
  // Statements. A bare expression in a body is an output statement ({{ expr }}).
  kText,         // literal: the text
  kIf,           // children[0]: test; body; alternate (an elif is a nested kIf)
  kFor,          // children: target, iterable, optional filter test (may be null); body; alternate (else)
  kSet,          // children[0]: target (name, tuple or member); children[1]: value, or null with body (block set)
  kMacro,        // name; params; body
  kCallBlock,    // children[0]: the kCall; params: caller's parameters; body
  kFilterBlock,  // children[0]: a kFilter whose operand is null; body
  kBreak,
  kContinue,
  // Expressions.
  kLiteral,      // literal: int, float, string, bool or none
  kName,         // name
  kList,         // children: items
  kTuple,        // children: items
  kDict,         // children: key0, value0, key1, value1, ...
  kMember,       // children[0]: object; children[1]: key expression (a literal for `a.b`)
  kSlice,        // children: object, start, stop, step (each bound may be null)
  kCall,         // children[0]: callee; children[1..]: arguments (kKeywordArg, kSpread, kKeywordSpread or any)
  kKeywordArg,   // name; children[0]: value (also a parameter with a default value in macro params)
  kSpread,       // children[0]: *expr
  kKeywordSpread,// children[0]: **expr
  kUnary,        // op ("-", "+", "not"); children[0]
  kBinary,       // op; children[0], children[1] (and/or short-circuit)
  kFilter,       // name; children[0]: operand (null inside a filter block); children[1..]: arguments
  kTest,         // name; negate; children[0]: operand; children[1..]: arguments
  kTernary,      // children: value_if_true, condition, value_if_false (null: `a if b` gives undefined)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  NodeKind kind;
  uint32_t offset = 0;  // where the node starts in the template source
  uint32_t height = 1;  // 1 + the height of the tallest child expression (bounded by the parser)
  std::string name;     // names, operators, filter and test names
  Value literal;
  bool negate = false;
  std::vector<NodePtr> children;
  std::vector<NodePtr> params;
  std::vector<NodePtr> body;
  std::vector<NodePtr> alternate;

  Node(NodeKind k, uint32_t at) : kind(k), offset(at) {}
};

}  // namespace peregrine::jinja
