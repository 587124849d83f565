// Small helpers to read tokenizer.json / tokenizer_config.json fields with errors that name the field.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace peregrine::tokenizer {

inline std::string json_string(const nlohmann::json& j, const char* key, std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    throw Error(ErrorCode::kFormatError,
                "tokenizer.json: " + std::string(where) + " needs a string field '" + key + "'");
  return it->get<std::string>();
}

inline const nlohmann::json& json_array(const nlohmann::json& j, const char* key, std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array())
    throw Error(ErrorCode::kFormatError, "tokenizer.json: " + std::string(where) + " needs an array field '" + key + "'");
  return *it;
}

// Optional field with a default; JSON null counts as absent.
template <typename T>
T json_value(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(ErrorCode::kFormatError, std::string("tokenizer.json: field '") + key + "' has the wrong type");
  }
}

// Reads {"pattern": {"String": s} | {"Regex": r}}.
inline Pattern make_pattern(const nlohmann::json& config, std::string_view where) {
  auto it = config.find("pattern");
  if (it == config.end() || !it->is_object())
    throw Error(ErrorCode::kFormatError, "tokenizer.json: " + std::string(where) + " needs a 'pattern' object");
  if (auto s = it->find("String"); s != it->end() && s->is_string()) return Pattern::literal(s->get<std::string>());
  if (auto r = it->find("Regex"); r != it->end() && r->is_string()) return Pattern::regex(r->get<std::string>());
  throw Error(ErrorCode::kFormatError, "tokenizer.json: " + std::string(where) + " pattern must be String or Regex");
}

}  // namespace peregrine::tokenizer
