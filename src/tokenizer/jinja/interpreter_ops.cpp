// Binary operators of the Jinja interpreter. The order of the checks mirrors @huggingface/jinja so that mixed
// operands behave the same ("a" + 1 is "a1", == compares containers by identity); where it raises an error and
// Python Jinja has an answer (string comparison, string repetition, booleans as numbers), we give Python's.
#include <cmath>
#include <limits>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text_utils.h"

namespace peregrine::jinja {
namespace {

bool is_numeric_like(const Value& v) { return v.is_int() || v.is_float() || v.is_bool(); }
double numeric(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_number(); }
int64_t integral(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }

bool list_contains(const List& items, const Value& needle) {
  for (const Value& item : items) {
    if (strict_equals(item, needle)) return true;
  }
  return false;
}

Value arithmetic(std::string_view op, const Value& left, const Value& right) {
  const bool as_float = left.is_float() || right.is_float();
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    const double a = numeric(left);
    const double b = numeric(right);
    return Value::boolean(op == "<" ? a < b : op == ">" ? a > b : op == "<=" ? a <= b : a >= b);
  }
  if (op == "/") return Value::floating(numeric(left) / numeric(right));
  if (as_float) {
    const double a = numeric(left);
    const double b = numeric(right);
    if (op == "+") return Value::floating(a + b);
    if (op == "-") return Value::floating(a - b);
    if (op == "*") return Value::floating(a * b);
    if (op == "//") return Value::floating(std::floor(a / b));
    if (op == "%") return Value::floating(std::fmod(a, b));
  } else {
    const int64_t a = integral(left);
    const int64_t b = integral(right);
    int64_t r = 0;
    if (op == "+") {
      return __builtin_add_overflow(a, b, &r) ? Value::floating(static_cast<double>(a) + b) : Value::integer(r);
    }
    if (op == "-") {
      return __builtin_sub_overflow(a, b, &r) ? Value::floating(static_cast<double>(a) - b) : Value::integer(r);
    }
    if (op == "*") {
      return __builtin_mul_overflow(a, b, &r) ? Value::floating(static_cast<double>(a) * b) : Value::integer(r);
    }
    if (op == "//" || op == "%") {
      if (b == 0) throw_eval("integer division or modulo by zero");
      if (b == -1) return op == "%" ? Value::integer(0) : arithmetic("-", Value::integer(0), Value::integer(a));
      if (op == "%") return Value::integer(a % b);  // JavaScript's remainder: the sign of the dividend
      const int64_t q = a / b;
      return Value::integer((a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q);
    }
  }
  throw_eval("unknown operator '" + std::string(op) + "'", ErrorCode::kInternal);
}

Value power(const Interpreter&, const Value& left, const Value& right) {
  const double a = numeric(left);
  const double b = numeric(right);
  if (a == 0 && b < 0) throw_eval("0.0 cannot be raised to a negative power");
  const double result = std::pow(a, b);
  if (!std::isfinite(result)) throw_eval("exponentiation result is not a finite real number");
  if (left.is_float() || right.is_float() || b < 0 || std::fabs(result) >= 9.2e18) return Value::floating(result);
  return Value::integer(static_cast<int64_t>(result));
}

Value repeat(const Interpreter& interpreter, const Value& sequence, int64_t times) {
  times = std::max<int64_t>(times, 0);
  if (sequence.is_string()) {
    const std::string& s = sequence.as_string();
    if (!s.empty()) interpreter.check_size(s.size() * static_cast<size_t>(std::min<int64_t>(times, 1 << 30)));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  const List& items = *sequence.as_list();
  if (!items.empty()) interpreter.check_size(items.size() * static_cast<size_t>(std::min<int64_t>(times, 1 << 30)));
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out));
}

[[noreturn]] void unsupported(std::string_view op, const Value& left, const Value& right) {
  throw_eval("unsupported operand types for '" + std::string(op) + "': " + std::string(left.type_name()) + " and " +
             std::string(right.type_name()));
}

}  // namespace

Value apply_binary_operator(const Interpreter& interpreter, std::string_view op, const Value& left,
                            const Value& right) {
  if (op == "==") return Value::boolean(loose_equals(left, right));
  if (op == "!=") return Value::boolean(!loose_equals(left, right));
  const bool membership = op == "in" || op == "not in";
  const bool negate = op == "not in";
  if (left.is_undefined() || right.is_undefined()) {
    if (right.is_undefined() && membership) return Value::boolean(negate);
    if (op == "~") {  // Python Jinja prints an undefined value as nothing
      const std::string text = (left.is_undefined() ? "" : to_concat_string(left)) +
                               (right.is_undefined() ? "" : to_concat_string(right));
      return Value::string(text);
    }
    throw_eval("cannot apply '" + std::string(op) + "' to an undefined value");
  }
  if (membership && right.is_list()) return Value::boolean(list_contains(*right.as_list(), left) != negate);
  if (left.is_none() || right.is_none()) {
    if (membership && right.is_dict()) return Value::boolean(negate);
    throw_eval("cannot apply '" + std::string(op) + "' to none");
  }
  if (op == "~") {
    std::string text = to_concat_string(left);
    const std::string tail = to_concat_string(right);
    interpreter.check_size(text.size() + tail.size());
    return Value::string(text + tail);
  }
  if (op == "**") {
    if (is_numeric_like(left) && is_numeric_like(right)) return power(interpreter, left, right);
    unsupported(op, left, right);
  }
  if (is_numeric_like(left) && is_numeric_like(right) && !membership) return arithmetic(op, left, right);
  if (left.is_list() && right.is_list() && op == "+") {
    interpreter.check_size(left.as_list()->size() + right.as_list()->size());
    List items = *left.as_list();
    items.insert(items.end(), right.as_list()->begin(), right.as_list()->end());
    return Value::list(std::move(items));
  }
  if (op == "*") {
    if ((left.is_string() || left.is_list()) && (right.is_int() || right.is_bool())) {
      return repeat(interpreter, left, integral(right));
    }
    if ((left.is_int() || left.is_bool()) && (right.is_string() || right.is_list())) {
      return repeat(interpreter, right, integral(left));
    }
  }
  if ((left.is_string() || right.is_string()) && op == "+") {
    std::string text = to_concat_string(left);
    const std::string tail = to_concat_string(right);
    interpreter.check_size(text.size() + tail.size());
    return Value::string(text + tail);
  }
  if (left.is_string() && right.is_string()) {
    if (membership) return Value::boolean((right.as_string().find(left.as_string()) != std::string::npos) != negate);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      const int c = left.as_string().compare(right.as_string());
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
  }
  if (membership && right.is_dict()) {
    const bool has = left.is_string() && right.as_dict()->find(left.as_string()) != nullptr;
    return Value::boolean(has != negate);
  }
  unsupported(op, left, right);
}

}  // namespace peregrine::jinja
