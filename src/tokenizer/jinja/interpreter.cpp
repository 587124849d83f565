// The Jinja interpreter (see interpreter.h): statements, expressions, macros and call blocks.
#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <limits>

#include "core/status.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/text_utils.h"

namespace peregrine::jinja {

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    const auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

namespace {

// A macro defined with {% macro %}. Like @huggingface/jinja, its body runs in a scope whose parent is the
// CALLER's scope, so a macro sees the variables visible where it is called.
class MacroFunction : public Callable {
 public:
  explicit MacroFunction(const Node* definition) : definition_(definition) {}
  Value call(Interpreter& interpreter, CallArgs& args, const ScopePtr& caller_scope) override {
    return interpreter.run_body(*definition_, args, caller_scope, "macro");
  }

 private:
  const Node* definition_;
};

// `caller()` inside a macro invoked by {% call %}: runs the call block's body in the scope of the call site.
class CallerFunction : public Callable {
 public:
  CallerFunction(const Node* block, ScopePtr scope) : block_(block), scope_(std::move(scope)) {}
  Value call(Interpreter& interpreter, CallArgs& args, const ScopePtr&) override {
    return interpreter.run_body(*block_, args, scope_, "call block");
  }

 private:
  const Node* block_;
  ScopePtr scope_;
};

}  // namespace

Interpreter::~Interpreter() {
  std::vector<Dict> attributes;
  attributes.reserve(namespaces_.size());
  for (const auto& ns : namespaces_) attributes.push_back(std::move(ns->attributes));
  // `attributes` is destroyed here, while namespaces_ still keeps every namespace alive.
}

std::shared_ptr<Namespace> Interpreter::make_namespace() {
  namespaces_.push_back(make_container<Namespace>());
  return namespaces_.back();
}

void Interpreter::tick() {
  if (++steps_ > options_.max_steps) {
    throw_eval("template evaluation exceeded " + std::to_string(options_.max_steps) + " steps");
  }
}

void Interpreter::enter() {
  if (++depth_ > kMaxEvalDepth) {
    --depth_;
    throw_eval("template evaluation nested deeper than " + std::to_string(kMaxEvalDepth) + " levels");
  }
}

void Interpreter::check_size(size_t size) const {
  if (size > options_.max_output_bytes) {
    throw_eval("template output exceeds the limit of " + std::to_string(options_.max_output_bytes) + " bytes");
  }
}

void Interpreter::append(std::string& out, std::string_view text) const {
  check_size(out.size() + text.size());
  out += text;
}

std::string Interpreter::render(const std::vector<NodePtr>& body, const ScopePtr& scope) {
  std::string out;
  exec_block(body, scope, out);
  return out;
}

Interpreter::Flow Interpreter::exec_block(const std::vector<NodePtr>& body, const ScopePtr& scope, std::string& out) {
  for (const NodePtr& node : body) {
    const Flow flow = exec(*node, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Node& node, const ScopePtr& scope, std::string& out) {
  try {
    tick();
    enter();
    DepthExit exit{depth_};
    switch (node.kind) {
      case NodeKind::kText: append(out, node.literal.as_string()); return Flow::kNormal;
      case NodeKind::kIf: {
        const bool test = eval(*node.children[0], scope).truthy();
        return exec_block(test ? node.body : node.alternate, scope, out);
      }
      case NodeKind::kFor: return exec_for(node, scope, out);
      case NodeKind::kSet: exec_set(node, scope); return Flow::kNormal;
      case NodeKind::kMacro:
        scope->vars[node.name] = Value::function(std::make_shared<MacroFunction>(&node));
        return Flow::kNormal;
      case NodeKind::kCallBlock: exec_call_block(node, scope, out); return Flow::kNormal;
      case NodeKind::kFilterBlock: {
        std::string text;
        exec_block(node.body, scope, text);
        const Node& filter = *node.children[0];
        CallArgs args = eval_arguments(filter.children, 1, scope);
        const Value result = apply_filter(*this, filter.name, Value::string(std::move(text)), args);
        if (!result.is_none() && !result.is_undefined()) append(out, to_display_string(result));
        return Flow::kNormal;
      }
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      default: {
        const Value value = eval(node, scope);
        if (!value.is_none() && !value.is_undefined()) append(out, to_display_string(value));
        return Flow::kNormal;
      }
    }
  } catch (const EvalError& e) {
    throw Error(e.code, "chat template: " + map_.describe(node.offset) + ": " + e.message);
  }
}

Interpreter::Flow Interpreter::exec_for(const Node& node, const ScopePtr& scope, std::string& out) {
  const Node& target = *node.children[0];
  const Node* filter = node.children[2].get();
  auto loop_scope = std::make_shared<Scope>(scope);
  const Value iterable = eval(*node.children[1], loop_scope);
  List candidates;
  switch (iterable.kind()) {
    case Value::Kind::kList: candidates = *iterable.as_list(); break;
    case Value::Kind::kDict:
      for (const auto& entry : iterable.as_dict()->entries()) candidates.push_back(Value::string(entry.first));
      break;
    case Value::Kind::kString:
      for (std::string& c : split_code_points(iterable.as_string())) candidates.push_back(Value::string(std::move(c)));
      break;
    case Value::Kind::kUndefined: break;  // Python Jinja iterates an undefined value as empty
    default: throw_eval("cannot iterate over a " + std::string(iterable.type_name()));
  }
  List items;
  if (filter != nullptr) {
    for (Value& candidate : candidates) {
      auto test_scope = std::make_shared<Scope>(loop_scope);
      assign(target, candidate, *test_scope);
      if (eval(*filter, test_scope).truthy()) items.push_back(std::move(candidate));
    }
  } else {
    items = std::move(candidates);
  }
  // NOTE: as in @huggingface/jinja, an iteration left by break/continue contributes no output, and the else
  // block runs when no iteration completed normally.
  bool no_iteration = true;
  const int64_t length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    tick();
    Dict loop;
    loop.set("index", Value::integer(i + 1));
    loop.set("index0", Value::integer(i));
    loop.set("revindex", Value::integer(length - i));
    loop.set("revindex0", Value::integer(length - i - 1));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i == length - 1));
    loop.set("length", Value::integer(length));
    loop.set("previtem", i > 0 ? items[i - 1] : Value());
    loop.set("nextitem", i + 1 < length ? items[i + 1] : Value());
    loop_scope->vars["loop"] = Value::dict(std::move(loop));
    assign(target, items[i], *loop_scope);
    const size_t mark = out.size();
    const Flow flow = exec_block(node.body, loop_scope, out);
    if (flow == Flow::kContinue) {
      out.resize(mark);
      continue;
    }
    if (flow == Flow::kBreak) {
      out.resize(mark);
      break;
    }
    no_iteration = false;
  }
  if (no_iteration) return exec_block(node.alternate, loop_scope, out);
  return Flow::kNormal;
}

void Interpreter::assign(const Node& target, const Value& value, Scope& scope) {
  if (target.kind == NodeKind::kName) {
    scope.vars[target.name] = value;
    return;
  }
  // A tuple of names unpacks a list of the same length.
  if (!value.is_list()) throw_eval("cannot unpack a " + std::string(value.type_name()) + " into several names");
  const List& items = *value.as_list();
  if (items.size() != target.children.size()) {
    throw_eval("cannot unpack " + std::to_string(items.size()) + " values into " +
               std::to_string(target.children.size()) + " names");
  }
  for (size_t i = 0; i < items.size(); ++i) scope.vars[target.children[i]->name] = items[i];
}

void Interpreter::exec_set(const Node& node, const ScopePtr& scope) {
  const Node& target = *node.children[0];
  Value value;
  if (node.children[1]) {
    value = eval(*node.children[1], scope);
  } else {
    std::string text;
    exec_block(node.body, scope, text);
    value = Value::string(std::move(text));
  }
  if (target.kind == NodeKind::kMember) {
    const Value object = eval(*target.children[0], scope);
    if (!object.is_namespace()) {
      throw_eval("cannot set an attribute on a " + std::string(object.type_name()) + " (only on a namespace)");
    }
    object.as_namespace()->attributes.set(target.children[1]->literal.as_string(), std::move(value));
    return;
  }
  assign(target, value, *scope);
}

void Interpreter::exec_call_block(const Node& node, const ScopePtr& scope, std::string& out) {
  const Node& call_node = *node.children[0];
  CallArgs args = eval_arguments(call_node.children, 1, scope);
  const Value function = eval(*call_node.children[0], scope);
  auto call_scope = std::make_shared<Scope>(scope);
  call_scope->vars["caller"] = Value::function(std::make_shared<CallerFunction>(&node, scope));
  const Value result = call(function, args, call_scope);
  if (!result.is_none() && !result.is_undefined()) append(out, to_display_string(result));
}

Value Interpreter::call(const Value& function, CallArgs& args, const ScopePtr& scope) {
  if (!function.is_function()) throw_eval("cannot call a " + std::string(function.type_name()));
  if (call_depth_ >= options_.max_call_depth) {
    throw_eval("macro calls nested deeper than " + std::to_string(options_.max_call_depth));
  }
  ++call_depth_;
  struct Restore {
    int& depth;
    ~Restore() { --depth; }
  } restore{call_depth_};
  return function.as_function()->call(*this, args, scope);
}

Value Interpreter::run_body(const Node& definition, CallArgs& args, const ScopePtr& parent, const char* what) {
  auto scope = std::make_shared<Scope>(parent);
  const std::vector<NodePtr>& params = definition.params;
  std::vector<const Node*> pending_defaults;
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& param = *params[i];
    Value value;
    bool bound = false;
    if (i < args.positional.size()) {
      value = args.positional[i];
      bound = true;
    } else {
      for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it) {
        if (it->first == param.name) {
          value = std::move(it->second);
          args.keyword.erase(it);
          bound = true;
          break;
        }
      }
    }
    if (!bound && param.kind == NodeKind::kKeywordArg) pending_defaults.push_back(&param);
    scope->vars[param.name] = std::move(value);
  }
  // Extra arguments are available as varargs and kwargs (Python Jinja's names).
  List varargs;
  for (size_t i = params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
  Dict kwargs;
  for (auto& [key, value] : args.keyword) kwargs.set(key, value);
  scope->vars["varargs"] = Value::list(std::move(varargs));
  scope->vars["kwargs"] = Value::dict(std::move(kwargs));
  for (const Node* param : pending_defaults) scope->vars[param->name] = eval(*param->children[0], scope);
  std::string text;
  try {
    exec_block(definition.body, scope, text);
  } catch (const Error& e) {
    throw Error(e.code(), e.message() + " (in " + what + (definition.name.empty() ? "" : " '" + definition.name + "'") +
                              ")");
  }
  return Value::string(std::move(text));
}

CallArgs Interpreter::eval_arguments(const std::vector<NodePtr>& nodes, size_t first, const ScopePtr& scope) {
  CallArgs args;
  for (size_t i = first; i < nodes.size(); ++i) {
    const Node& arg = *nodes[i];
    if (arg.kind == NodeKind::kKeywordArg) {
      Value value = eval(*arg.children[0], scope);
      if (args.find_keyword(arg.name)) throw_eval("keyword argument '" + arg.name + "' given twice");
      args.keyword.emplace_back(arg.name, std::move(value));
    } else if (arg.kind == NodeKind::kKeywordSpread) {
      const Value mapping = eval(*arg.children[0], scope);
      if (!mapping.is_dict()) throw_eval("argument after ** must be a dict, not a " + std::string(mapping.type_name()));
      for (const auto& [key, value] : mapping.as_dict()->entries()) {
        if (args.find_keyword(key)) throw_eval("keyword argument '" + key + "' given twice");
        args.keyword.emplace_back(key, value);
      }
    } else if (arg.kind == NodeKind::kSpread) {
      const Value sequence = eval(*arg.children[0], scope);
      if (!sequence.is_list()) throw_eval("argument after * must be a list, not a " + std::string(sequence.type_name()));
      for (const Value& item : *sequence.as_list()) args.positional.push_back(item);
    } else {
      args.positional.push_back(eval(arg, scope));
    }
  }
  return args;
}

Value Interpreter::eval(const Node& node, const ScopePtr& scope) {
  try {
    tick();
    enter();
    DepthExit exit{depth_};
    return eval_node(node, scope);
  } catch (const EvalError& e) {
    throw Error(e.code, "chat template: " + map_.describe(node.offset) + ": " + e.message);
  }
}

Value Interpreter::eval_node(const Node& node, const ScopePtr& scope) {
  switch (node.kind) {
    case NodeKind::kLiteral: return node.literal;
    case NodeKind::kName: {
      const Value* value = scope->lookup(node.name);
      return value ? *value : Value();
    }
    case NodeKind::kList:
    case NodeKind::kTuple: {
      List items;
      for (const NodePtr& child : node.children) items.push_back(eval(*child, scope));
      return Value::list(std::move(items));
    }
    case NodeKind::kDict: {
      Dict dict;
      for (size_t i = 0; i + 1 < node.children.size(); i += 2) {
        const Value key = eval(*node.children[i], scope);
        if (!key.is_string()) throw_eval("dict keys must be strings, not " + std::string(key.type_name()));
        dict.set(key.as_string(), eval(*node.children[i + 1], scope));
      }
      return Value::dict(std::move(dict));
    }
    case NodeKind::kMember: {
      const Value object = eval(*node.children[0], scope);
      return get_member(object, eval(*node.children[1], scope));
    }
    case NodeKind::kSlice: return eval_slice(node, scope);
    case NodeKind::kCall: {
      CallArgs args = eval_arguments(node.children, 1, scope);
      const Value function = eval(*node.children[0], scope);
      return call(function, args, scope);
    }
    case NodeKind::kUnary: {
      const Value operand = eval(*node.children[0], scope);
      if (node.name == "not") return Value::boolean(!operand.truthy());
      const bool negative = node.name == "-";
      if (operand.is_float()) return Value::floating(negative ? -operand.as_float() : operand.as_float());
      if (operand.is_int() || operand.is_bool()) {
        const int64_t v = operand.is_bool() ? (operand.as_bool() ? 1 : 0) : operand.as_int();
        if (negative && v == std::numeric_limits<int64_t>::min()) return Value::floating(-static_cast<double>(v));
        return Value::integer(negative ? -v : v);
      }
      throw_eval("bad operand type for unary " + node.name + ": " + std::string(operand.type_name()));
    }
    case NodeKind::kBinary: return eval_binary(node, scope);
    case NodeKind::kFilter: {
      const Value operand = eval(*node.children[0], scope);
      CallArgs args = eval_arguments(node.children, 1, scope);
      return apply_filter(*this, node.name, operand, args);
    }
    case NodeKind::kTest: {
      const Value operand = eval(*node.children[0], scope);
      CallArgs args = eval_arguments(node.children, 1, scope);
      const bool result = apply_test(*this, node.name, operand, args.positional);
      return Value::boolean(result != node.negate);
    }
    case NodeKind::kTernary: {
      if (eval(*node.children[1], scope).truthy()) return eval(*node.children[0], scope);
      return node.children[2] ? eval(*node.children[2], scope) : Value();
    }
    default: throw_eval("this syntax is not valid in an expression", ErrorCode::kInternal);
  }
}

Value Interpreter::eval_binary(const Node& node, const ScopePtr& scope) {
  const Value left = eval(*node.children[0], scope);
  if (node.name == "and") return left.truthy() ? eval(*node.children[1], scope) : left;
  if (node.name == "or") return left.truthy() ? left : eval(*node.children[1], scope);
  const Value right = eval(*node.children[1], scope);
  return apply_binary_operator(*this, node.name, left, right);
}

namespace {

// Python slice bounds (as @huggingface/jinja's slice helper computes them).
std::vector<size_t> slice_indices(int64_t size, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  int64_t step) {
  std::vector<size_t> out;
  if (step > 0) {
    int64_t b = start.value_or(0);
    int64_t e = stop.value_or(size);
    b = b < 0 ? std::max<int64_t>(size + b, 0) : std::min(b, size);
    e = e < 0 ? std::max<int64_t>(size + e, 0) : std::min(e, size);
    for (int64_t i = b; i < e; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    int64_t b = start.value_or(size - 1);
    int64_t e = stop.value_or(-1);
    b = b < 0 ? std::max<int64_t>(size + b, -1) : std::min(b, size - 1);
    e = e < -1 ? std::max<int64_t>(size + e, -1) : std::min(e, size - 1);
    for (int64_t i = b; i > e; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

}  // namespace

Value Interpreter::eval_slice(const Node& node, const ScopePtr& scope) {
  const Value object = eval(*node.children[0], scope);
  std::optional<int64_t> bounds[3];
  for (int k = 0; k < 3; ++k) {
    if (!node.children[k + 1]) continue;
    const Value v = eval(*node.children[k + 1], scope);
    if (v.is_int()) {
      bounds[k] = v.as_int();
    } else if (!v.is_none() && !v.is_undefined()) {
      throw_eval("slice indices must be integers, not " + std::string(v.type_name()));
    }
  }
  const int64_t step = bounds[2].value_or(1);
  if (step == 0) throw_eval("slice step cannot be zero");
  if (object.is_list()) {
    const List& items = *object.as_list();
    List out;
    for (size_t i : slice_indices(static_cast<int64_t>(items.size()), bounds[0], bounds[1], step)) {
      out.push_back(items[i]);
    }
    return Value::list(std::move(out));
  }
  if (object.is_string()) {
    const std::vector<std::string> chars = split_code_points(object.as_string());
    std::string out;
    for (size_t i : slice_indices(static_cast<int64_t>(chars.size()), bounds[0], bounds[1], step)) out += chars[i];
    return Value::string(std::move(out));
  }
  throw_eval("cannot slice a " + std::string(object.type_name()));
}

}  // namespace peregrine::jinja
