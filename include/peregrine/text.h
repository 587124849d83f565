// Small ASCII text helpers shared by the engine and the server (and usable by applications).
#pragma once

#include <string_view>

namespace peregrine {

inline bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// `s` without leading and trailing ASCII whitespace (Python's str.strip() on ASCII).
inline std::string_view trim_ascii_space(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace peregrine
