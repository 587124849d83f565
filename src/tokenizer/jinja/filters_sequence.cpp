// Filters over lists and dicts (sort, select/reject and their attr forms, map, join, dictsort, unique, min, max,
// sum); the rest of the filters and the dispatcher are in filters.cpp.
#include <algorithm>
#include <cstdio>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/filters_impl.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text_utils.h"

namespace peregrine::jinja::filters_detail {

Value filter_sort(const Value& operand, const CallArgs& args) {
  List items = require_list("sort", operand);
  const bool reverse = bool_arg(args, 0, "reverse", false);
  const bool case_sensitive = bool_arg(args, 1, "case_sensitive", false);
  const Value* attribute = arg(args, 2, "attribute");
  std::string path;
  if (attribute && attribute->is_string()) path = attribute->as_string();
  if (attribute && attribute->is_int()) path = std::to_string(attribute->as_int());
  const auto key = [&](const Value& v) { return path.empty() ? v : attribute_path(v, path); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int c = compare_values(key(a), key(b), case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

// select, reject, selectattr, rejectattr.
Value filter_select(Interpreter& interpreter, std::string_view name, const Value& operand, const CallArgs& args) {
  const List& items = require_list(name, operand);
  const bool by_attribute = name.ends_with("attr");
  const bool keep_matches = name.starts_with("select");
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    const Value* a = arg(args, next++, "attribute");
    if (!a || !a->is_string()) throw_eval(std::string(name) + ": the attribute name must be a string");
    attribute = a->as_string();
  }
  const Value* test = arg(args, next++, "test");
  if (test && !test->is_string()) throw_eval(std::string(name) + ": the test name must be a string");
  if (test && !is_known_test(test->as_string())) {
    throw_eval(std::string(name) + ": unknown test '" + test->as_string() + "'", ErrorCode::kUnsupported);
  }
  std::vector<Value> test_args(args.positional.begin() + std::min(next, args.positional.size()), args.positional.end());
  List out;
  for (const Value& item : items) {
    bool matched = false;
    if (by_attribute) {
      // As @huggingface/jinja: a missing attribute never matches (rejectattr keeps such items).
      const Dict* d = item.is_dict() ? item.as_dict().get() : item.is_namespace() ? &item.as_namespace()->attributes
                                                                                  : nullptr;
      const Value* value = d ? d->find(attribute) : nullptr;
      if (value) matched = test ? apply_test(interpreter, test->as_string(), *value, test_args) : value->truthy();
    } else {
      matched = test ? apply_test(interpreter, test->as_string(), item, test_args) : item.truthy();
    }
    if (matched == keep_matches) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_map(Interpreter& interpreter, const Value& operand, const CallArgs& args) {
  const List& items = require_list("map", operand);
  List out;
  if (const Value* attribute = args.find_keyword("attribute")) {
    if (!attribute->is_string()) throw_eval("map: attribute must be a string");
    const Value* fallback = args.find_keyword("default");
    for (const Value& item : items) {
      Value v = attribute_path(item, attribute->as_string());
      out.push_back(v.is_undefined() && fallback ? *fallback : std::move(v));
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    throw_eval("map needs a filter name or attribute=...");
  }
  const std::string filter = args.positional[0].as_string();
  if (!is_known_filter(filter)) throw_eval("map: unknown filter '" + filter + "'", ErrorCode::kUnsupported);
  CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  for (const Value& item : items) {
    CallArgs call_args = rest;
    out.push_back(apply_filter(interpreter, filter, item, call_args));
  }
  return Value::list(std::move(out));
}

Value filter_join(Interpreter& interpreter, const Value& operand, const CallArgs& args) {
  const Value* separator = arg(args, 0, "d");
  if (!separator) separator = args.find_keyword("separator");
  if (separator && !separator->is_string()) throw_eval("join: the separator must be a string");
  const std::string sep = separator ? separator->as_string() : "";
  std::vector<std::string> parts;
  if (operand.is_string()) {
    parts = split_code_points(operand.as_string());
  } else if (operand.is_list()) {
    const Value* attribute = args.find_keyword("attribute");
    for (const Value& item : *operand.as_list()) {
      const Value v = attribute && attribute->is_string() ? attribute_path(item, attribute->as_string()) : item;
      parts.push_back(v.is_none() || v.is_undefined() ? "" : to_concat_string(v));
    }
  } else {
    bad_operand("join", operand);
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
    interpreter.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value filter_dictsort(const Value& operand, const CallArgs& args) {
  if (!operand.is_dict()) bad_operand("dictsort", operand);
  const bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
  const Value* by = arg(args, 1, "by");
  const bool by_value = by && by->is_string() && by->as_string() == "value";
  if (by && !(by->is_string() && (by->as_string() == "key" || by->as_string() == "value"))) {
    throw_eval("dictsort: 'by' must be 'key' or 'value'");
  }
  const bool reverse = bool_arg(args, 2, "reverse", false);
  std::vector<std::pair<std::string, Value>> entries = operand.as_dict()->entries();
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& a, const auto& b) {
    const int c = by_value ? compare_values(a.second, b.second, case_sensitive)
                           : compare_values(Value::string(a.first), Value::string(b.first), case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  List out;
  for (auto& [key, value] : entries) out.push_back(Value::list(List{Value::string(key), value}));
  return Value::list(std::move(out));
}

namespace {
std::string tagged(char tag, std::string_view text) {
  std::string out(1, tag);
  out += text;
  return out;
}
}  // namespace

std::string unique_key(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kInt:
    case Value::Kind::kFloat: return tagged('n', format_js_number(v.as_number()));
    case Value::Kind::kString: return tagged('s', v.as_string());
    case Value::Kind::kBool: return v.as_bool() ? "t" : "f";
    case Value::Kind::kNone: return "z";
    case Value::Kind::kUndefined: return "u";
    default: {
      char buf[32];
      const void* p = v.is_list() ? static_cast<const void*>(v.as_list().get())
                      : v.is_dict() ? static_cast<const void*>(v.as_dict().get())
                      : v.is_namespace() ? static_cast<const void*>(v.as_namespace().get())
                                         : static_cast<const void*>(v.as_function().get());
      std::snprintf(buf, sizeof(buf), "p%p", p);
      return buf;
    }
  }
}

Value filter_min_max(std::string_view name, const Value& operand, const CallArgs& args) {
  const List& items = require_list(name, operand);
  const bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
  const Value* attribute = arg(args, 1, "attribute");
  const auto key = [&](const Value& v) {
    return attribute && attribute->is_string() ? attribute_path(v, attribute->as_string()) : v;
  };
  if (items.empty()) return Value();
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare_values(key(items[i]), key(items[best]), case_sensitive);
    if (name == "min" ? c < 0 : c > 0) best = i;
  }
  return items[best];
}

Value filter_sum(const Value& operand, const CallArgs& args) {
  const List& items = require_list("sum", operand);
  const Value* attribute = arg(args, 0, "attribute");
  const Value* start = arg(args, 1, "start");
  bool is_float = start && start->is_float();
  double total_float = start && start->is_number() ? start->as_number() : 0;
  int64_t total_int = start && start->is_int() ? start->as_int() : 0;
  for (const Value& item : items) {
    const Value v = attribute && attribute->is_string() ? attribute_path(item, attribute->as_string()) : item;
    if (!v.is_number() && !v.is_bool()) throw_eval("sum: cannot add a " + std::string(v.type_name()));
    if (v.is_float()) is_float = true;
    const double d = v.is_bool() ? v.as_bool() : v.as_number();
    total_float += d;
    if (!v.is_float()) total_int += v.is_bool() ? v.as_bool() : v.as_int();
  }
  return is_float ? Value::floating(total_float) : Value::integer(total_int);
}

}  // namespace peregrine::jinja::filters_detail
