// The Jinja interpreter: walks the syntax tree with a chain of scopes and renders text. Scoping, loop and macro
// semantics follow @huggingface/jinja (a `set` writes to the innermost scope; a for loop opens one scope for all
// its iterations; if blocks open none). Every evaluation step, call level and produced string is bounded, so a
// hostile template fails with an error instead of hanging or exhausting memory.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/value.h"

namespace peregrine::jinja {

struct RenderOptions {
  size_t max_output_bytes = 32u << 20;     // any rendered text or built string/list beyond this is an error
  uint64_t max_steps = 20'000'000;         // evaluated nodes (loop iterations included)
  int max_call_depth = 64;                 // nested macro calls
  std::optional<std::tm> now;              // the clock of strftime_now; the local time when unset
};

// Nested evaluation (expression depth x statement depth x macro calls) beyond this is an error, which keeps the
// interpreter's recursion well inside a thread's stack.
constexpr int kMaxEvalDepth = 1000;

struct Scope {
  std::unordered_map<std::string, Value> vars;
  ScopePtr parent;
  explicit Scope(ScopePtr p = nullptr) : parent(std::move(p)) {}
  const Value* lookup(const std::string& name) const;
};

class Interpreter {
 public:
  Interpreter(const SourceMap& map, const RenderOptions& options) : map_(map), options_(options) {}
  // Clears every namespace created during the render: a namespace is the only mutable value, so it is the only
  // way to build a reference cycle ({% set ns.self = ns %}), which would otherwise leak.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::shared_ptr<Namespace> make_namespace();

  // Renders a template body. Throws peregrine::Error naming the line and column of the failing expression.
  std::string render(const std::vector<NodePtr>& body, const ScopePtr& scope);

  Value eval(const Node& node, const ScopePtr& scope);
  // Calls a function value (macro, caller, global or bound method) with depth accounting.
  Value call(const Value& function, CallArgs& args, const ScopePtr& scope);
  // Runs a macro body or call-block body with its parameters bound in a fresh scope under parent.
  Value run_body(const Node& definition, CallArgs& args, const ScopePtr& parent, const char* what);

  // Throws EvalError when a produced string or list of `size` bytes/items exceeds max_output_bytes.
  void check_size(size_t size) const;
  const RenderOptions& options() const { return options_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_block(const std::vector<NodePtr>& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Node& node, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Node& node, const ScopePtr& scope, std::string& out);
  void exec_set(const Node& node, const ScopePtr& scope);
  void exec_call_block(const Node& node, const ScopePtr& scope, std::string& out);
  void assign(const Node& target, const Value& value, Scope& scope);
  void append(std::string& out, std::string_view text) const;

  Value eval_node(const Node& node, const ScopePtr& scope);
  Value eval_binary(const Node& node, const ScopePtr& scope);
  Value eval_slice(const Node& node, const ScopePtr& scope);
  CallArgs eval_arguments(const std::vector<NodePtr>& nodes, size_t first, const ScopePtr& scope);
  void tick();
  void enter();  // depth accounting for eval/exec; pair with a DepthExit
  struct DepthExit {
    int& depth;
    ~DepthExit() { --depth; }
  };

  const SourceMap& map_;
  const RenderOptions& options_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int depth_ = 0;  // nested eval/exec calls, bounded by kMaxEvalDepth
  std::vector<std::shared_ptr<Namespace>> namespaces_;
};

// Binary operators other than and/or, with @huggingface/jinja's rules (see interpreter_ops.cpp).
Value apply_binary_operator(const Interpreter& interpreter, std::string_view op, const Value& left, const Value& right);

}  // namespace peregrine::jinja
