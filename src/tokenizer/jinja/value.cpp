// Runtime values of the Jinja interpreter (see value.h): conversion from JSON, JSON output, display strings and
// the equality rules of @huggingface/jinja.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/text_utils.h"

namespace peregrine::jinja {

namespace detail {

void deferred_delete(void* object, void (*destroy)(void*)) {
  thread_local std::vector<std::pair<void*, void (*)(void*)>> pending;
  thread_local bool draining = false;
  pending.emplace_back(object, destroy);
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    const auto [p, d] = pending.back();
    pending.pop_back();
    d(p);  // may queue more containers; they are freed by this loop, not recursively
  }
  draining = false;
}

}  // namespace detail

const Value* Dict::find(std::string_view key) const {
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::set(std::string key, Value value) {
  const auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::find_keyword(std::string_view name) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0 && !std::isnan(as_float());
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list()->empty();
    case Kind::kDict: return !as_dict()->empty();
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

std::string_view Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

namespace {

// JavaScript orders the integer-like keys of a plain object first ("0", "1", "42"; not "01" or "-1").
std::optional<uint32_t> array_index_key(const std::string& key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= 0xFFFFFFFFull) return std::nullopt;
  return static_cast<uint32_t>(v);
}

Value from_json_at(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxJsonDepth) throw_eval("template input is nested deeper than " + std::to_string(kMaxJsonDepth));
  switch (json.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(json.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(json.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t v = json.get<uint64_t>();
      if (v <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(v));
      return Value::floating(static_cast<double>(v));
    }
    case nlohmann::json::value_t::number_float: {
      const double v = json.get<double>();
      if (std::isfinite(v) && std::fmod(v, 1.0) == 0 && std::fabs(v) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(v));
      }
      return Value::floating(v);
    }
    case nlohmann::json::value_t::string: return Value::string(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<uint32_t, const std::string*>> index_keys;
      for (auto it = json.begin(); it != json.end(); ++it) {
        if (auto index = array_index_key(it.key())) index_keys.emplace_back(*index, &it.key());
      }
      std::sort(index_keys.begin(), index_keys.end());
      Dict dict;
      for (const auto& [index, key] : index_keys) dict.set(*key, from_json_at(json.at(*key), depth + 1));
      for (auto it = json.begin(); it != json.end(); ++it) {
        if (!array_index_key(it.key())) dict.set(it.key(), from_json_at(it.value(), depth + 1));
      }
      return Value::dict(std::move(dict));
    }
    default: throw_eval("unsupported JSON value in template input");
  }
}

// An approximation of JavaScript's localeCompare for sort_keys: punctuation < digits < letters, letters compared
// case-insensitively first with lower case first on ties, other code points by value.
int locale_compare(const std::string& a, const std::string& b) {
  const auto primary = [](unsigned char c) -> int {
    if (c >= '0' && c <= '9') return 1000 + c;
    if (c >= 'a' && c <= 'z') return 2000 + c;
    if (c >= 'A' && c <= 'Z') return 2000 + (c - 'A' + 'a');
    if (c >= 0x80) return 3000 + c;
    return c;
  };
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const int pa = primary(static_cast<unsigned char>(a[i]));
    const int pb = primary(static_cast<unsigned char>(b[i]));
    if (pa != pb) return pa < pb ? -1 : 1;
  }
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return (a[i] >= 'a' && a[i] <= 'z') ? -1 : 1;  // lower case sorts first
  }
  return 0;
}

void append_json(std::string& out, const Value& v, const JsonFormat& format, int depth) {
  if (depth > kMaxJsonDepth) throw_eval("value is nested too deeply to convert to JSON");
  const std::string indent_unit(format.indent > 0 ? static_cast<size_t>(format.indent) : 0, ' ');
  const auto padding = [&](int level) {
    std::string p = "\n";
    for (int i = 0; i < level; ++i) p += indent_unit;
    return p;
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined: out += format.undefined_as_null ? "null" : "undefined"; return;
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      const double f = v.as_float();
      out += std::isfinite(f) ? format_js_number(f) : "null";
      return;
    }
    case Value::Kind::kString: append_json_string(out, v.as_string(), format.ensure_ascii); return;
    case Value::Kind::kList: {
      const List& items = *v.as_list();
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += format.item_separator;
        if (format.indent > 0) out += padding(depth + 1);
        append_json(out, items[i], format, depth + 1);
      }
      if (format.indent > 0 && !items.empty()) out += padding(depth);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const Dict& dict = v.is_dict() ? *v.as_dict() : v.as_namespace()->attributes;
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : dict.entries()) entries.push_back(&entry);
      if (format.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* x, const auto* y) { return locale_compare(x->first, y->first) < 0; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += format.item_separator;
        if (format.indent > 0) out += padding(depth + 1);
        append_json_string(out, entries[i]->first, format.ensure_ascii);
        out += format.key_separator;
        append_json(out, entries[i]->second, format, depth + 1);
      }
      if (format.indent > 0 && !entries.empty()) out += padding(depth);
      out.push_back('}');
      return;
    }
    case Value::Kind::kFunction: throw_eval("cannot convert a function to JSON");
  }
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& json) { return from_json_at(json, 0); }

std::string to_json(const Value& v, const JsonFormat& format) {
  std::string out;
  append_json(out, v, format, 0);
  return out;
}

std::string to_display_string(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return "";
    case Value::Kind::kBool: return v.as_bool() ? "true" : "false";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return format_float_display(v.as_float());
    case Value::Kind::kString: return v.as_string();
    case Value::Kind::kList:
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      JsonFormat format;
      format.undefined_as_null = false;
      return to_json(v, format);
    }
    case Value::Kind::kFunction: return "[function]";
  }
  return "";
}

std::string to_concat_string(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "null";
    case Value::Kind::kFloat: return format_js_number(v.as_float());
    case Value::Kind::kList: {
      std::string out;
      const List& items = *v.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out.push_back(',');
        out += items[i].is_none() ? "null" : items[i].is_undefined() ? "undefined" : to_display_string(items[i]);
      }
      return out;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return "[object Map]";
    default: return to_display_string(v);
  }
}

namespace {

const void* identity(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList: return v.as_list().get();
    case Value::Kind::kDict: return v.as_dict().get();
    case Value::Kind::kNamespace: return v.as_namespace().get();
    case Value::Kind::kFunction: return v.as_function().get();
    default: return nullptr;
  }
}

bool is_object(const Value& v) { return identity(v) != nullptr; }

}  // namespace

bool strict_equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_number() == b.as_number();
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.as_bool() == b.as_bool();
    case Value::Kind::kString: return a.as_string() == b.as_string();
    default: return identity(a) == identity(b);
  }
}

bool loose_equals(const Value& a, const Value& b) {
  const bool a_nullish = a.is_none() || a.is_undefined();
  const bool b_nullish = b.is_none() || b.is_undefined();
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (a.is_number() && b.is_number()) return a.as_number() == b.as_number();
  if (a.kind() == b.kind()) return strict_equals(a, b);
  if (is_object(a) && is_object(b)) return false;
  // Booleans and strings convert to numbers; objects convert to their string form first.
  if (a.is_bool()) return loose_equals(Value::integer(a.as_bool() ? 1 : 0), b);
  if (b.is_bool()) return loose_equals(a, Value::integer(b.as_bool() ? 1 : 0));
  if (is_object(a)) return loose_equals(Value::string(to_concat_string(a)), b);
  if (is_object(b)) return loose_equals(a, Value::string(to_concat_string(b)));
  if (a.is_string() && b.is_number()) return js_string_to_number(a.as_string()) == b.as_number();
  if (a.is_number() && b.is_string()) return a.as_number() == js_string_to_number(b.as_string());
  return false;
}

}  // namespace peregrine::jinja
