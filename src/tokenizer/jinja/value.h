// The runtime values of the Jinja interpreter: undefined, none, bool, int, float, string, list, dict (ordered
// keys), namespace and function. Lists, dicts and namespaces are shared by reference, as in Python and in
// @huggingface/jinja (so `message == user_messages[-1]` compares identities, and `set ns.x` mutates in place).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace peregrine::jinja {

// An error raised while evaluating; the interpreter rethrows it as peregrine::Error naming the line and column
// of the expression being evaluated.
struct EvalError {
  ErrorCode code;
  std::string message;
};
[[noreturn]] inline void throw_eval(std::string message, ErrorCode code = ErrorCode::kInvalidArgument) {
  throw EvalError{code, std::move(message)};
}

class Value;
class Interpreter;
struct Scope;
using ScopePtr = std::shared_ptr<Scope>;
using List = std::vector<Value>;

class Dict;
struct Namespace;
struct CallArgs;
class Callable;

namespace detail {
// Frees a container without recursion: a container released while another is being freed is queued, so a
// list nested a million levels deep is freed in a loop instead of a million nested destructor calls.
void deferred_delete(void* object, void (*destroy)(void*));
template <typename T>
struct DeferredDeleter {
  void operator()(T* p) const {
    deferred_delete(p, [](void* q) { delete static_cast<T*>(q); });
  }
};
}  // namespace detail

// Allocates a List, Dict or Namespace; all containers must be created through this (see deferred_delete).
template <typename T, typename... Args>
std::shared_ptr<T> make_container(Args&&... args) {
  return std::shared_ptr<T>(new T(std::forward<Args>(args)...), detail::DeferredDeleter<T>{});
}

struct NoneTag {
  bool operator==(const NoneTag&) const = default;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // undefined
  static Value none() { return Value(std::in_place_type<NoneTag>); }
  static Value boolean(bool v) { return Value(std::in_place_type<bool>, v); }
  static Value integer(int64_t v) { return Value(std::in_place_type<int64_t>, v); }
  static Value floating(double v) { return Value(std::in_place_type<double>, v); }
  static Value string(std::string v) { return Value(std::in_place_type<std::string>, std::move(v)); }
  static Value list(List items) {
    return Value(std::in_place_type<std::shared_ptr<List>>, make_container<List>(std::move(items)));
  }
  static Value dict(Dict d);  // defined below, once Dict is complete
  static Value name_space(std::shared_ptr<Namespace> ns) {
    return Value(std::in_place_type<std::shared_ptr<Namespace>>, std::move(ns));
  }
  static Value function(std::shared_ptr<Callable> fn) {
    return Value(std::in_place_type<std::shared_ptr<Callable>>, std::move(fn));
  }

  Kind kind() const { return static_cast<Kind>(storage_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_function() const { return kind() == Kind::kFunction; }

  bool as_bool() const { return std::get<bool>(storage_); }
  int64_t as_int() const { return std::get<int64_t>(storage_); }
  double as_float() const { return std::get<double>(storage_); }
  double as_number() const { return is_int() ? static_cast<double>(as_int()) : as_float(); }
  const std::string& as_string() const { return std::get<std::string>(storage_); }
  const std::shared_ptr<List>& as_list() const { return std::get<std::shared_ptr<List>>(storage_); }
  const std::shared_ptr<Dict>& as_dict() const { return std::get<std::shared_ptr<Dict>>(storage_); }
  const std::shared_ptr<Namespace>& as_namespace() const { return std::get<std::shared_ptr<Namespace>>(storage_); }
  const std::shared_ptr<Callable>& as_function() const { return std::get<std::shared_ptr<Callable>>(storage_); }

  // Python truthiness as @huggingface/jinja implements it (a namespace is always true).
  bool truthy() const;
  // The type name used in error messages ("string", "list", ...).
  std::string_view type_name() const;

 private:
  using Storage = std::variant<std::monostate, NoneTag, bool, int64_t, double, std::string, std::shared_ptr<List>,
                               std::shared_ptr<Dict>, std::shared_ptr<Namespace>, std::shared_ptr<Callable>>;
  // Constructs the alternative in place (a temporary variant moved in trips GCC's maybe-uninitialized check).
  template <typename T, typename... Args>
  explicit Value(std::in_place_type_t<T> tag, Args&&... args) : storage_(tag, std::forward<Args>(args)...) {}
  Storage storage_;
};

// A dict with insertion-ordered keys; setting an existing key keeps its position (like a JavaScript Map).
class Dict {
 public:
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

struct Namespace {
  Dict attributes;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* find_keyword(std::string_view name) const;
};

// Something callable from a template: a macro, a builtin global or a bound method.
// NOTE: call() may throw EvalError (see interpreter.h); the interpreter adds the source position.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(Interpreter& interpreter, CallArgs& args, const ScopePtr& caller_scope) = 0;
};

inline Value Value::dict(Dict d) {
  return Value(std::in_place_type<std::shared_ptr<Dict>>, make_container<Dict>(std::move(d)));
}

// Converts template input (messages, tools, kwargs) to values. Numbers follow JavaScript: an integral float
// such as 2.0 becomes the integer 2; object keys that look like array indices come first, in ascending order.
// NOTE: throws EvalError beyond kMaxJsonDepth levels of nesting.
Value value_from_json(const nlohmann::ordered_json& json);

struct JsonFormat {
  int indent = 0;  // 0: single line (as @huggingface/jinja, indent=0 means no indentation)
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator = ", ";  // set to "," when indenting unless separators were given
  std::string key_separator = ": ";
  bool undefined_as_null = true;  // tojson: undefined -> null; display of containers: "undefined"
};
// JSON text of a value in @huggingface/jinja's format. Throws EvalError for functions and too-deep nesting.
std::string to_json(const Value& v, const JsonFormat& format);

// What `{{ v }}` prints (none and undefined print nothing; the caller skips them) and what `string` gives:
// integral floats as "2.0", booleans as "true"/"false", containers as JSON.
std::string to_display_string(const Value& v);
// String(v.value) in JavaScript: what `+` and `~` concatenate. Floats print as JavaScript numbers ("2"), a list
// joins its elements' display strings with ",", a dict is "[object Map]".
std::string to_concat_string(const Value& v);

// JavaScript `a.value == b.value` as @huggingface/jinja evaluates `==`: containers compare by identity.
bool loose_equals(const Value& a, const Value& b);
// JavaScript `===` on the underlying values, used by `in` and by the eq/equalto tests.
bool strict_equals(const Value& a, const Value& b);

constexpr int kMaxJsonDepth = 256;

}  // namespace peregrine::jinja
