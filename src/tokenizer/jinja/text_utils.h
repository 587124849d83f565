// Text helpers for the Jinja interpreter: UTF-8 walking, JavaScript-compatible whitespace trimming, number
// formatting and JSON string escaping. The reference we match is @huggingface/jinja, which runs on JavaScript
// strings, so "whitespace", "length" and number printing follow JavaScript's rules, not Python's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::jinja {

// Decodes the code point at s[i] and advances i; an invalid byte decodes as U+FFFD and advances by one.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);
// Byte offset of the first invalid UTF-8 sequence, or nullopt when s is valid.
std::optional<size_t> find_invalid_utf8(std::string_view s);
std::vector<std::string> split_code_points(std::string_view s);
size_t code_point_count(std::string_view s);
// Number of UTF-16 code units: what JavaScript's String.length reports.
size_t utf16_length(std::string_view s);

// JavaScript's \s: ASCII whitespace, NBSP, the Unicode space separators, line/paragraph separators and BOM.
bool is_js_space(char32_t cp);
std::string_view js_trim(std::string_view s);
std::string_view js_trim_start(std::string_view s);
std::string_view js_trim_end(std::string_view s);
// Python's str.strip(chars) family: removes any of the code points in chars from the chosen ends.
std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right);

// Full Unicode case mapping of the root locale (ICU), which is what JavaScript's toUpperCase/toLowerCase do
// ("ß" upper-cases to "SS", a final sigma lower-cases to "ς").
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
// JavaScript /\b\w/g upper-casing (what @huggingface/jinja's title does): the first word character after a
// non-word character, where word characters are [A-Za-z0-9_].
std::string js_title(std::string_view s);
// First character upper-cased, the rest unchanged (@huggingface/jinja's capitalize; a character outside the
// Basic Multilingual Plane stays as it is, since JavaScript's charAt returns half of it).
std::string js_capitalize(std::string_view s);
// Python's str.replace(old, new, count); an empty `old` inserts `new` between code points.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to, int64_t count);

// JavaScript's Number.prototype.toString(): shortest round-trip digits, exponent form outside [1e-7, 1e21).
std::string format_js_number(double v);
// @huggingface/jinja's float display: integral values as toFixed(1) ("2.0"), others as format_js_number.
std::string format_float_display(double v);
// JavaScript's parseInt(s, 10) and parseFloat(s); nullopt where JavaScript gives NaN.
std::optional<double> js_parse_int(std::string_view s);
std::optional<double> js_parse_float(std::string_view s);
// JavaScript's Number(s) for a string operand of loose equality; NaN where it is not a number.
double js_string_to_number(std::string_view s);

// JSON.stringify of a string, optionally followed by @huggingface/jinja's ensure_ascii rewrite (every UTF-16
// unit >= 0x7f becomes \uXXXX).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace peregrine::jinja
