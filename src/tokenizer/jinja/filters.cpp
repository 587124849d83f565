// Filters of the Jinja interpreter (`value | name(args)`). Output formats follow @huggingface/jinja: tojson
// separators as Python's json.dumps, `string` of a list as JSON, `join` of numbers as JavaScript prints them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/filters_impl.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text_utils.h"

namespace peregrine::jinja {
namespace filters_detail {

const Value* arg(const CallArgs& args, size_t index, std::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.find_keyword(name);
}

bool bool_arg(const CallArgs& args, size_t index, std::string_view name, bool fallback) {
  const Value* v = arg(args, index, name);
  if (v == nullptr || v->is_undefined()) return fallback;
  if (!v->is_bool() && !v->is_int()) throw_eval("argument '" + std::string(name) + "' must be a boolean");
  return v->truthy();
}

[[noreturn]] void bad_operand(std::string_view filter, const Value& v) {
  throw_eval("filter '" + std::string(filter) + "' cannot be applied to a " + std::string(v.type_name()));
}

// "a.b.0": dict keys and list indices, as @huggingface/jinja's attribute paths (sort, map).
Value attribute_path(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_dict() || current.is_namespace()) {
      const Dict& d = current.is_dict() ? *current.as_dict() : current.as_namespace()->attributes;
      const Value* found = d.find(part);
      current = found ? *found : Value();
    } else if (current.is_list() && !part.empty() && part.find_first_not_of("0123456789") == std::string::npos &&
               part.size() < 10) {
      const size_t index = std::stoul(part);
      const List& items = *current.as_list();
      current = index < items.size() ? items[index] : Value();
    } else {
      return Value();
    }
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

const List& require_list(std::string_view filter, const Value& v) {
  if (!v.is_list()) bad_operand(filter, v);
  return *v.as_list();
}

std::string soft_string(std::string_view filter, const Value& v) {
  if (v.is_string()) return v.as_string();
  if (v.is_undefined()) return "";
  if (v.is_number() || v.is_bool()) return to_display_string(v);
  bad_operand(filter, v);
}

}  // namespace filters_detail

namespace {

using namespace filters_detail;

constexpr std::string_view kFilters[] = {
    "abs",   "bool",    "capitalize", "count",   "d",       "default",    "dictsort", "e",       "escape",
    "first", "float",   "format",     "indent",  "int",     "items",      "join",     "keys",    "last",
    "length", "list",   "lower",      "map",     "max",     "min",        "reject",   "rejectattr", "replace",
    "reverse", "round", "safe",       "select",  "selectattr", "sort",    "string",   "sum",     "title",
    "tojson", "trim",   "unique",     "upper",   "values"};

Value filter_tojson(const Value& operand, const CallArgs& args) {
  JsonFormat format;
  if (const Value* indent = arg(args, 0, "indent"); indent && !indent->is_none() && !indent->is_undefined()) {
    if (!indent->is_int()) throw_eval("tojson: indent must be an integer");
    format.indent = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
  }
  if (format.indent > 0) format.item_separator = ",";
  format.ensure_ascii = bool_arg(args, 99, "ensure_ascii", false);
  format.sort_keys = bool_arg(args, 99, "sort_keys", false);
  if (const Value* separators = args.find_keyword("separators"); separators && !separators->is_none()) {
    if (!separators->is_list() || separators->as_list()->size() != 2 || !(*separators->as_list())[0].is_string() ||
        !(*separators->as_list())[1].is_string()) {
      throw_eval("tojson: separators must be a pair of strings");
    }
    format.item_separator = (*separators->as_list())[0].as_string();
    format.key_separator = (*separators->as_list())[1].as_string();
  }
  return Value::string(to_json(operand, format));
}

Value filter_indent(Interpreter& interpreter, const Value& operand, const CallArgs& args) {
  const std::string text = soft_string("indent", operand);
  std::string pad = "    ";
  if (const Value* width = arg(args, 0, "width")) {
    if (width->is_int()) {
      pad.assign(static_cast<size_t>(std::clamp<int64_t>(width->as_int(), 0, 1024)), ' ');
    } else if (width->is_string()) {
      pad = width->as_string();
    } else {
      throw_eval("indent: width must be an integer or a string");
    }
  }
  const bool first = bool_arg(args, 1, "first", false);
  const bool blank = bool_arg(args, 2, "blank", false);
  std::string out;
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t end = text.find('\n', start);
    const std::string_view piece = std::string_view(text).substr(start, end == std::string::npos ? std::string::npos
                                                                                                  : end - start);
    if (!((line == 0 && !first) || (piece.empty() && !blank))) out += pad;
    out += piece;
    interpreter.check_size(out.size());
    if (end == std::string::npos) break;
    out.push_back('\n');
    start = end + 1;
  }
  return Value::string(std::move(out));
}

std::string conversion_error(char conversion, const char* what) {
  std::string message = "format: %";
  message.push_back(conversion);
  message += what;
  return message;
}

// Python's printf-style formatting: %s %r %d %i %f %F %e %E %g %G %x %X %o %% with flags, width and precision.
Value filter_format(Interpreter& interpreter, const Value& operand, const CallArgs& args) {
  const std::string format = soft_string("format", operand);
  std::string out;
  size_t next_arg = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    size_t j = i + 1;
    while (j < format.size() && std::string_view("-+ #0").find(format[j]) != std::string_view::npos) ++j;
    while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) ++j;
    if (j < format.size() && format[j] == '.') {
      ++j;
      while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) ++j;
    }
    if (j >= format.size()) throw_eval("format: incomplete format specifier");
    const char conversion = format[j];
    const std::string spec = format.substr(i, j - i);  // "%-5.2" without the conversion
    if (spec.size() > 10) throw_eval("format: width or precision too large");
    i = j;
    if (conversion == '%') {
      out.push_back('%');
      continue;
    }
    if (next_arg >= args.positional.size()) throw_eval("format: not enough arguments for the format string");
    const Value& v = args.positional[next_arg++];
    char buf[512] = "";
    if (conversion == 's' || conversion == 'r') {
      std::string text = to_display_string(v);
      if (conversion == 'r' && v.is_string()) {
        text.insert(text.begin(), '\'');
        text.push_back('\'');
      }
      // Width and precision count code points, so they are applied here rather than by snprintf.
      const size_t dot = spec.find('.');
      if (dot != std::string::npos) {
        const size_t precision = std::strtoul(spec.c_str() + dot + 1, nullptr, 10);
        const std::vector<std::string> chars = split_code_points(text);
        if (chars.size() > precision) {
          text.clear();
          for (size_t k = 0; k < precision; ++k) text += chars[k];
        }
      }
      const std::string width_text = spec.substr(1, dot == std::string::npos ? std::string::npos : dot - 1);
      const size_t digits = width_text.find_first_of("0123456789");
      const size_t width =
          digits == std::string::npos ? 0 : std::min<size_t>(std::strtoul(width_text.c_str() + digits, nullptr, 10), 4096);
      const size_t length = code_point_count(text);
      if (length < width) {
        const std::string fill(width - length, ' ');
        text = width_text.find('-') != std::string::npos ? text + fill : fill + text;
      }
      out += text;
    } else if (std::string_view("diouxX").find(conversion) != std::string_view::npos) {
      if (!v.is_number() && !v.is_bool()) throw_eval(conversion_error(conversion, " needs a number"));
      const long long n = v.is_bool() ? v.as_bool() : v.is_int() ? v.as_int() : static_cast<long long>(v.as_float());
      const char c = conversion == 'i' || conversion == 'u' ? 'd' : conversion;
      std::snprintf(buf, sizeof(buf), (spec + "ll" + c).c_str(), n);
      out += buf;
    } else if (std::string_view("fFeEgG").find(conversion) != std::string_view::npos) {
      if (!v.is_number() && !v.is_bool()) throw_eval(conversion_error(conversion, " needs a number"));
      const double d = v.is_bool() ? v.as_bool() : v.as_number();
      std::snprintf(buf, sizeof(buf), (spec + conversion).c_str(), d);
      out += buf;
    } else {
      throw_eval(conversion_error(conversion, " is not a supported conversion"));
    }
    interpreter.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value filter_round(const Value& operand, const CallArgs& args) {
  if (!operand.is_number()) bad_operand("round", operand);
  const Value* precision = arg(args, 0, "precision");
  const Value* method = arg(args, 1, "method");
  const int digits = precision && precision->is_int() ? static_cast<int>(std::clamp<int64_t>(precision->as_int(), 0, 15)) : 0;
  const std::string how = method && method->is_string() ? method->as_string() : "common";
  const double scale = std::pow(10.0, digits);
  const double x = operand.as_number() * scale;
  double r;
  if (how == "common") {
    r = std::nearbyint(x);  // Python's round(): ties to even
  } else if (how == "ceil") {
    r = std::ceil(x);
  } else if (how == "floor") {
    r = std::floor(x);
  } else {
    throw_eval("round: method must be 'common', 'ceil' or 'floor'");
  }
  return Value::floating(r / scale);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value number_from_parse(std::optional<double> parsed, const Value& fallback, bool as_int) {
  if (!parsed) return fallback;
  if (as_int) {
    if (std::fabs(*parsed) < 9.2e18) return Value::integer(static_cast<int64_t>(*parsed));
    return Value::floating(*parsed);
  }
  return Value::floating(*parsed);
}

}  // namespace

using namespace filters_detail;

bool is_known_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

Value apply_filter(Interpreter& interpreter, std::string_view name, const Value& operand, CallArgs& args) {
  if (name == "safe") return operand;
  if (name == "tojson") return filter_tojson(operand, args);
  if (name == "default" || name == "d") {
    const Value* fallback = arg(args, 0, "default_value");
    const bool boolean = bool_arg(args, 1, "boolean", false);
    if (operand.is_undefined() || (boolean && !operand.truthy())) return fallback ? *fallback : Value::string("");
    return operand;
  }
  if (name == "length" || name == "count") {
    if (operand.is_list()) return Value::integer(static_cast<int64_t>(operand.as_list()->size()));
    if (operand.is_string()) return Value::integer(static_cast<int64_t>(utf16_length(operand.as_string())));
    if (operand.is_dict()) return Value::integer(static_cast<int64_t>(operand.as_dict()->size()));
    if (operand.is_undefined()) return Value::integer(0);
    bad_operand(name, operand);
  }
  if (name == "first" || name == "last") {
    if (operand.is_list()) {
      const List& l = *operand.as_list();
      if (l.empty()) return Value();
      return name == "first" ? l.front() : l.back();
    }
    if (operand.is_string()) {
      const std::vector<std::string> chars = split_code_points(operand.as_string());
      if (chars.empty()) return Value();
      return Value::string(name == "first" ? chars.front() : chars.back());
    }
    if (operand.is_dict()) {
      const auto& entries = operand.as_dict()->entries();
      if (entries.empty()) return Value();
      return Value::string(name == "first" ? entries.front().first : entries.back().first);
    }
    if (operand.is_undefined()) return Value();
    bad_operand(name, operand);
  }
  if (name == "list") {
    if (operand.is_list()) return operand;  // the same list, as @huggingface/jinja
    List items;
    if (operand.is_string()) {
      for (std::string& c : split_code_points(operand.as_string())) items.push_back(Value::string(std::move(c)));
    } else if (operand.is_dict()) {
      for (const auto& entry : operand.as_dict()->entries()) items.push_back(Value::string(entry.first));
    } else if (!operand.is_undefined()) {
      bad_operand(name, operand);
    }
    return Value::list(std::move(items));
  }
  if (name == "reverse") {
    if (operand.is_list()) {
      List items(operand.as_list()->rbegin(), operand.as_list()->rend());
      return Value::list(std::move(items));
    }
    if (operand.is_string()) {
      std::vector<std::string> chars = split_code_points(operand.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value::string(std::move(out));
    }
    bad_operand(name, operand);
  }
  if (name == "sort") return filter_sort(operand, args);
  if (name == "unique") {
    std::unordered_set<std::string> seen;
    List out;
    for (const Value& item : require_list(name, operand)) {
      if (seen.insert(unique_key(item)).second) out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (name == "join") return filter_join(interpreter, operand, args);
  if (name == "string") {
    if (operand.is_none()) return Value::string("None");
    return Value::string(to_display_string(operand));
  }
  if (name == "upper") return Value::string(to_upper(soft_string(name, operand)));
  if (name == "lower") return Value::string(to_lower(soft_string(name, operand)));
  if (name == "title") return Value::string(js_title(soft_string(name, operand)));
  if (name == "capitalize") return Value::string(js_capitalize(soft_string(name, operand)));
  if (name == "trim") {
    const std::string text = soft_string(name, operand);
    const Value* chars = arg(args, 0, "chars");
    if (chars && chars->is_string()) return Value::string(std::string(strip_chars(text, chars->as_string(), true, true)));
    return Value::string(std::string(js_trim(text)));
  }
  if (name == "indent") return filter_indent(interpreter, operand, args);
  if (name == "replace") {
    const Value* from = arg(args, 0, "old");
    const Value* to = arg(args, 1, "new");
    const Value* count = arg(args, 2, "count");
    if (!from || !to || !from->is_string() || !to->is_string()) throw_eval("replace needs two strings");
    std::string out = replace_all(soft_string(name, operand), from->as_string(), to->as_string(),
                                  count && count->is_int() ? count->as_int() : -1);
    interpreter.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "int" || name == "float") {
    const bool as_int = name == "int";
    const Value* given = arg(args, 0, "default");
    const Value fallback = given ? *given : as_int ? Value::integer(0) : Value::floating(0.0);
    if (operand.is_string()) {
      return number_from_parse(as_int ? js_parse_int(operand.as_string()) : js_parse_float(operand.as_string()),
                               fallback, as_int);
    }
    if (operand.is_bool()) return as_int ? Value::integer(operand.as_bool()) : Value::floating(operand.as_bool());
    if (operand.is_int()) return as_int ? operand : Value::floating(static_cast<double>(operand.as_int()));
    if (operand.is_float()) return as_int ? number_from_parse(std::floor(operand.as_float()), fallback, true) : operand;
    return fallback;
  }
  if (name == "abs") {
    if (operand.is_int()) {
      return operand.as_int() == INT64_MIN ? Value::floating(-static_cast<double>(INT64_MIN))
                                           : Value::integer(std::llabs(operand.as_int()));
    }
    if (operand.is_float()) return Value::floating(std::fabs(operand.as_float()));
    bad_operand(name, operand);
  }
  if (name == "bool") return Value::boolean(operand.truthy());
  if (name == "items" || name == "keys" || name == "values") {
    if (operand.is_undefined()) return Value::list(List{});
    if (!operand.is_dict()) bad_operand(name, operand);
    CallArgs none;
    return get_member(operand, Value::string(std::string(name))).as_function()->call(interpreter, none, nullptr);
  }
  if (name == "dictsort") return filter_dictsort(operand, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return filter_select(interpreter, name, operand, args);
  }
  if (name == "map") return filter_map(interpreter, operand, args);
  if (name == "format") return filter_format(interpreter, operand, args);
  if (name == "escape" || name == "e") return Value::string(html_escape(soft_string(name, operand)));
  if (name == "min" || name == "max") return filter_min_max(name, operand, args);
  if (name == "sum") return filter_sum(operand, args);
  if (name == "round") return filter_round(operand, args);
  throw_eval("unknown filter '" + std::string(name) + "'", ErrorCode::kUnsupported);
}

}  // namespace peregrine::jinja
