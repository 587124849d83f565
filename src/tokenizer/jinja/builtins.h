// The builtin library of the Jinja interpreter: filters, tests, attribute and method lookup on values, and the
// global functions (range, namespace, raise_exception, strftime_now). Semantics follow @huggingface/jinja where
// it defines them and Python Jinja where it does not (see docs/architecture/jinja.md).
#pragma once

#include <ctime>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace peregrine::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// NOTE: these throw EvalError; the interpreter adds the source position.
Value apply_filter(Interpreter& interpreter, std::string_view name, const Value& operand, CallArgs& args);
bool apply_test(Interpreter& interpreter, std::string_view name, const Value& operand, const std::vector<Value>& args);
// `object.key` and `object[key]`: dict entries, list/string indexing, then builtin methods (bound to object).
Value get_member(const Value& object, const Value& key);
// Defines range, namespace, raise_exception and strftime_now in scope. `now` fixes the clock (tests).
void install_globals(Scope& scope, std::optional<std::tm> now);

// Ordering used by sort, dictsort, min and max: numbers (and booleans) by value, strings optionally
// case-insensitively, none equal to none; anything else is an EvalError.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

}  // namespace peregrine::jinja
