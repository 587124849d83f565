// Builtins of the Jinja interpreter other than filters: tests, attribute and method lookup, and the global
// functions range, namespace, raise_exception and strftime_now.
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text_utils.h"

namespace peregrine::jinja {
namespace {

constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "even", "false", "float",
    "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=",
    "lower", "lessthan", "lt", "<", "mapping", "ne", "!=", "none", "number", "odd",
    "sameas", "sequence", "string", "true", "undefined", "upper"};

const Value& arg_or_undefined(const std::vector<Value>& args, size_t i) {
  static const Value kUndefined;
  return i < args.size() ? args[i] : kUndefined;
}

bool identical(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  return strict_equals(a, b);
}

}  // namespace

bool is_known_test(std::string_view name) {
  for (std::string_view t : kTests) {
    if (t == name) return true;
  }
  return false;
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_none() && b.is_none()) return 0;
  if (a.is_undefined() && b.is_undefined()) return 0;
  const auto numeric_like = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (numeric_like(a) && numeric_like(b)) {
    const auto num = [](const Value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_number(); };
    const double x = num(a);
    const double y = num(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const std::string x = case_sensitive ? a.as_string() : to_lower(a.as_string());
    const std::string y = case_sensitive ? b.as_string() : to_lower(b.as_string());
    return x < y ? -1 : x > y ? 1 : 0;
  }
  throw_eval("cannot compare " + std::string(a.type_name()) + " with " + std::string(b.type_name()));
}

bool apply_test(Interpreter& interpreter, std::string_view name, const Value& v, const std::vector<Value>& args) {
  const Value& arg = arg_or_undefined(args, 0);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_string();  // as @huggingface/jinja: a dict is not
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.is_function();
  if (name == "lower") return v.is_string() && to_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && to_upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) throw_eval("the '" + std::string(name) + "' test needs an integer, not " +
                                std::string(v.type_name()));
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (!v.is_int() || !arg.is_int() || arg.as_int() == 0) throw_eval("divisibleby needs integers (and a non-zero divisor)");
    return v.as_int() % arg.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return strict_equals(v, arg);
  if (name == "ne" || name == "!=") return !strict_equals(v, arg);
  if (name == "sameas") return identical(v, arg);
  if (name == "in") return apply_binary_operator(interpreter, "in", v, arg).as_bool();
  const int c = compare_values(v, arg, true);
  if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
  if (name == "ge" || name == ">=") return c >= 0;
  if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
  if (name == "le" || name == "<=") return c <= 0;
  throw_eval("unknown test '" + std::string(name) + "'", ErrorCode::kUnsupported);
}

namespace {

// A builtin method bound to its receiver, e.g. the value of `message.content.strip`.
class BoundMethod : public Callable {
 public:
  BoundMethod(Value receiver, std::string name) : receiver_(std::move(receiver)), name_(std::move(name)) {}
  Value call(Interpreter& interpreter, CallArgs& args, const ScopePtr&) override;

 private:
  Value call_string_method(Interpreter& interpreter, CallArgs& args);
  Value call_dict_method(Interpreter& interpreter, CallArgs& args);
  Value receiver_;
  std::string name_;
};

const Value* positional_or_keyword(const CallArgs& args, size_t index, std::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.find_keyword(name);
}

bool is_string_method(std::string_view name) {
  static constexpr std::string_view kMethods[] = {"upper", "lower", "strip", "lstrip", "rstrip", "title",
                                                  "capitalize", "startswith", "endswith", "split", "replace",
                                                  "format", "join"};
  for (std::string_view m : kMethods) {
    if (m == name) return true;
  }
  return false;
}

bool is_dict_method(std::string_view name) {
  return name == "get" || name == "items" || name == "keys" || name == "values" || name == "dictsort";
}

std::vector<std::string> split_string(const std::string& s, const Value* sep, int64_t max_split) {
  std::vector<std::string> parts;
  if (sep == nullptr || sep->is_none() || sep->is_undefined()) {
    // Runs of whitespace separate; no empty parts at either end.
    std::string_view rest = js_trim_start(s);
    while (!rest.empty()) {
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
        parts.emplace_back(rest);
        break;
      }
      size_t i = 0;
      size_t end = rest.size();
      while (i < rest.size()) {
        size_t next = i;
        if (is_js_space(next_code_point(rest, next))) {
          end = i;
          break;
        }
        i = next;
      }
      parts.emplace_back(rest.substr(0, end));
      rest = js_trim_start(rest.substr(end));
    }
    return parts;
  }
  if (!sep->is_string()) throw_eval("split() separator must be a string or none");
  const std::string& separator = sep->as_string();
  if (separator.empty()) throw_eval("split(): empty separator");
  size_t pos = 0;
  while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
    const size_t hit = s.find(separator, pos);
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(pos, hit - pos));
    pos = hit + separator.size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

// Python's str.format with "{}", "{0}" and "{name}" fields (format specs are not supported).
std::string format_fields(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if ((c == '{' || c == '}') && i + 1 < format.size() && format[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) throw_eval("format(): unmatched '{'");
    const std::string field = format.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) throw_eval("format(): format specs are not supported");
    const Value* value = nullptr;
    if (field.empty()) {
      if (auto_index < args.positional.size()) value = &args.positional[auto_index++];
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      const size_t index = std::stoul(field);
      if (index < args.positional.size()) value = &args.positional[index];
    } else {
      value = args.find_keyword(field);
    }
    if (value == nullptr) throw_eval("format(): no argument for field '{" + field + "}'");
    out += to_display_string(*value);
    i = close;
  }
  return out;
}

Value BoundMethod::call(Interpreter& interpreter, CallArgs& args, const ScopePtr&) {
  if (receiver_.is_string()) return call_string_method(interpreter, args);
  return call_dict_method(interpreter, args);
}

Value BoundMethod::call_string_method(Interpreter& interpreter, CallArgs& args) {
  const std::string& s = receiver_.as_string();
  // NOTE: strip/lstrip/rstrip ignore their argument, as in @huggingface/jinja (they trim all whitespace).
  if (name_ == "upper") return Value::string(to_upper(s));
  if (name_ == "lower") return Value::string(to_lower(s));
  if (name_ == "strip") return Value::string(std::string(js_trim(s)));
  if (name_ == "lstrip") return Value::string(std::string(js_trim_start(s)));
  if (name_ == "rstrip") return Value::string(std::string(js_trim_end(s)));
  if (name_ == "title") return Value::string(js_title(s));
  if (name_ == "capitalize") return Value::string(js_capitalize(s));
  if (name_ == "startswith" || name_ == "endswith") {
    const Value* pattern = positional_or_keyword(args, 0, "prefix");
    if (pattern == nullptr) throw_eval(name_ + "() needs an argument");
    const auto matches = [&](const Value& p) {
      if (!p.is_string()) throw_eval(name_ + "() argument must be a string or a tuple of strings");
      return name_ == "startswith" ? s.starts_with(p.as_string()) : s.ends_with(p.as_string());
    };
    if (pattern->is_list()) {
      for (const Value& p : *pattern->as_list()) {
        if (matches(p)) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    return Value::boolean(matches(*pattern));
  }
  if (name_ == "split") {
    const Value* max_split = positional_or_keyword(args, 1, "maxsplit");
    if (max_split && !max_split->is_int()) throw_eval("split(): maxsplit must be an integer");
    List parts;
    for (std::string& part : split_string(s, positional_or_keyword(args, 0, "sep"), max_split ? max_split->as_int() : -1)) {
      parts.push_back(Value::string(std::move(part)));
    }
    return Value::list(std::move(parts));
  }
  if (name_ == "replace") {
    const Value* from = positional_or_keyword(args, 0, "old");
    const Value* to = positional_or_keyword(args, 1, "new");
    const Value* count = positional_or_keyword(args, 2, "count");
    if (!from || !to || !from->is_string() || !to->is_string()) throw_eval("replace() needs two strings");
    if (count && !count->is_int() && !count->is_none()) throw_eval("replace(): count must be an integer");
    std::string out = replace_all(s, from->as_string(), to->as_string(), count && count->is_int() ? count->as_int() : -1);
    interpreter.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name_ == "format") {
    std::string out = format_fields(s, args);
    interpreter.check_size(out.size());
    return Value::string(std::move(out));
  }
  // join
  if (args.positional.empty() || !args.positional[0].is_list()) throw_eval("join() needs a list");
  std::string out;
  const List& items = *args.positional[0].as_list();
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += s;
    out += to_display_string(items[i]);
    interpreter.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value BoundMethod::call_dict_method(Interpreter& interpreter, CallArgs& args) {
  const Dict& dict = *receiver_.as_dict();
  if (name_ == "get") {
    const Value* key = positional_or_keyword(args, 0, "key");
    if (!key || !key->is_string()) throw_eval("get() needs a string key");
    if (const Value* found = dict.find(key->as_string())) return *found;
    const Value* fallback = positional_or_keyword(args, 1, "default");
    return fallback ? *fallback : Value::none();
  }
  if (name_ == "dictsort") return apply_filter(interpreter, "dictsort", receiver_, args);
  List out;
  for (const auto& [key, value] : dict.entries()) {
    if (name_ == "items") {
      out.push_back(Value::list(List{Value::string(key), value}));
    } else {
      out.push_back(name_ == "keys" ? Value::string(key) : value);
    }
  }
  return Value::list(std::move(out));
}

}  // namespace

Value get_member(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kDict: {
      if (!key.is_string()) return Value();
      if (const Value* found = object.as_dict()->find(key.as_string())) return *found;
      if (is_dict_method(key.as_string())) return Value::function(std::make_shared<BoundMethod>(object, key.as_string()));
      return Value();
    }
    case Value::Kind::kNamespace: {
      if (!key.is_string()) return Value();
      const Value* found = object.as_namespace()->attributes.find(key.as_string());
      return found ? *found : Value();
    }
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (key.is_int()) {
        if (object.is_list()) {
          const List& items = *object.as_list();
          const int64_t n = static_cast<int64_t>(items.size());
          const int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
          return i >= 0 && i < n ? items[static_cast<size_t>(i)] : Value();
        }
        const std::vector<std::string> chars = split_code_points(object.as_string());
        const int64_t n = static_cast<int64_t>(chars.size());
        const int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
        return i >= 0 && i < n ? Value::string(chars[static_cast<size_t>(i)]) : Value();
      }
      if (!key.is_string()) throw_eval("a " + std::string(object.type_name()) + " index must be an integer");
      if (key.as_string() == "length") {
        const size_t n = object.is_list() ? object.as_list()->size() : utf16_length(object.as_string());
        return Value::integer(static_cast<int64_t>(n));
      }
      if (object.is_string() && is_string_method(key.as_string())) {
        return Value::function(std::make_shared<BoundMethod>(object, key.as_string()));
      }
      return Value();
    }
    default: return Value();  // attributes of undefined, none, numbers and functions are undefined
  }
}

namespace {

class RangeFunction : public Callable {
 public:
  Value call(Interpreter& interpreter, CallArgs& args, const ScopePtr&) override {
    const auto& a = args.positional;
    if (a.empty() || a.size() > 3) throw_eval("range() takes 1 to 3 integer arguments");
    for (const Value& v : a) {
      if (!v.is_int()) throw_eval("range() arguments must be integers, not " + std::string(v.type_name()));
    }
    const int64_t start = a.size() == 1 ? 0 : a[0].as_int();
    const int64_t stop = a.size() == 1 ? a[0].as_int() : a[1].as_int();
    const int64_t step = a.size() == 3 ? a[2].as_int() : 1;
    if (step == 0) throw_eval("range() step must not be zero");
    const long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
    const long double count = span <= 0 ? 0 : std::ceil(span / std::fabs(static_cast<long double>(step)));
    interpreter.check_size(static_cast<size_t>(std::min<long double>(count, 1e15)));
    List out;
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.push_back(Value::integer(start + i * step));
    return Value::list(std::move(out));
  }
};

class NamespaceFunction : public Callable {
 public:
  Value call(Interpreter& interpreter, CallArgs& args, const ScopePtr&) override {
    std::shared_ptr<Namespace> ns = interpreter.make_namespace();
    if (args.positional.size() > 1) throw_eval("namespace() takes at most one positional argument");
    if (args.positional.size() == 1) {
      const Value& source = args.positional[0];
      if (source.is_dict()) {
        for (const auto& [key, value] : source.as_dict()->entries()) ns->attributes.set(key, value);
      } else if (source.is_list()) {
        for (const Value& pair : *source.as_list()) {
          if (!pair.is_list() || pair.as_list()->size() != 2 || !(*pair.as_list())[0].is_string()) {
            throw_eval("namespace() expects a dict or a list of [key, value] pairs");
          }
          ns->attributes.set((*pair.as_list())[0].as_string(), (*pair.as_list())[1]);
        }
      } else {
        throw_eval("namespace() expects a dict or a list of [key, value] pairs");
      }
    }
    for (const auto& [key, value] : args.keyword) ns->attributes.set(key, value);
    return Value::name_space(std::move(ns));
  }
};

class RaiseExceptionFunction : public Callable {
 public:
  Value call(Interpreter&, CallArgs& args, const ScopePtr&) override {
    const std::string message = args.positional.empty() ? "" : to_display_string(args.positional[0]);
    throw_eval("raise_exception: " + message);
  }
};

class StrftimeNowFunction : public Callable {
 public:
  explicit StrftimeNowFunction(std::optional<std::tm> now) : now_(now) {}
  Value call(Interpreter&, CallArgs& args, const ScopePtr&) override {
    if (args.positional.empty() || !args.positional[0].is_string()) throw_eval("strftime_now() needs a format string");
    std::tm tm{};
    if (now_) {
      tm = *now_;
    } else {
      const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      localtime_r(&t, &tm);
    }
    static constexpr std::string_view kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                                   "July",    "August",   "September", "October", "November", "December"};
    static constexpr std::string_view kDays[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
                                                 "Saturday"};
    const auto pad = [](int v, int width) {
      std::string s = std::to_string(v);
      return std::string(s.size() < static_cast<size_t>(width) ? width - s.size() : 0, '0') + s;
    };
    const std::string& format = args.positional[0].as_string();
    std::string out;
    for (size_t i = 0; i < format.size(); ++i) {
      if (format[i] != '%' || i + 1 >= format.size()) {
        out.push_back(format[i]);
        continue;
      }
      const char c = format[++i];
      const int month = std::clamp(tm.tm_mon, 0, 11);
      const int weekday = std::clamp(tm.tm_wday, 0, 6);
      switch (c) {
        case 'Y': out += std::to_string(tm.tm_year + 1900); break;
        case 'y': out += pad((tm.tm_year + 1900) % 100, 2); break;
        case 'm': out += pad(tm.tm_mon + 1, 2); break;
        case 'd': out += pad(tm.tm_mday, 2); break;
        case 'b': out += kMonths[month].substr(0, 3); break;
        case 'B': out += kMonths[month]; break;
        case 'a': out += kDays[weekday].substr(0, 3); break;
        case 'A': out += kDays[weekday]; break;
        case 'H': out += pad(tm.tm_hour, 2); break;
        case 'M': out += pad(tm.tm_min, 2); break;
        case 'S': out += pad(tm.tm_sec, 2); break;
        case 'j': out += pad(tm.tm_yday + 1, 3); break;
        case '%': out.push_back('%'); break;
        default:  // unknown directives stay as written
          out.push_back('%');
          out.push_back(c);
      }
    }
    return Value::string(std::move(out));
  }

 private:
  std::optional<std::tm> now_;
};

}  // namespace

void install_globals(Scope& scope, std::optional<std::tm> now) {
  scope.vars["range"] = Value::function(std::make_shared<RangeFunction>());
  scope.vars["namespace"] = Value::function(std::make_shared<NamespaceFunction>());
  scope.vars["raise_exception"] = Value::function(std::make_shared<RaiseExceptionFunction>());
  scope.vars["strftime_now"] = Value::function(std::make_shared<StrftimeNowFunction>(now));
}

}  // namespace peregrine::jinja
