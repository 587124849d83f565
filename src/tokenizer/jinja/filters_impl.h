// Internal to the filters: argument helpers shared by filters.cpp and filters_sequence.cpp, and the list/dict
// filters defined in filters_sequence.cpp. All throw EvalError.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace peregrine::jinja::filters_detail {

// Positional argument `index`, else keyword `name`; null when neither was given.
const Value* arg(const CallArgs& args, size_t index, std::string_view name);
bool bool_arg(const CallArgs& args, size_t index, std::string_view name, bool fallback);
[[noreturn]] void bad_operand(std::string_view filter, const Value& v);
// "a.b.0": dict keys and list indices, as @huggingface/jinja's attribute paths (sort, map).
Value attribute_path(const Value& item, const std::string& path);
const List& require_list(std::string_view filter, const Value& v);
// The operand as a string for string filters: numbers and booleans convert, undefined is empty.
std::string soft_string(std::string_view filter, const Value& v);

Value filter_sort(const Value& operand, const CallArgs& args);
Value filter_select(Interpreter& interpreter, std::string_view name, const Value& operand, const CallArgs& args);
Value filter_map(Interpreter& interpreter, const Value& operand, const CallArgs& args);
Value filter_join(Interpreter& interpreter, const Value& operand, const CallArgs& args);
Value filter_dictsort(const Value& operand, const CallArgs& args);
std::string unique_key(const Value& v);
Value filter_min_max(std::string_view name, const Value& operand, const CallArgs& args);
Value filter_sum(const Value& operand, const CallArgs& args);

}  // namespace peregrine::jinja::filters_detail
