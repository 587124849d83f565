// GPT-2 byte <-> unicode tables.
#include "tokenizer/byte_level.h"

#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {

ByteLevelTables::ByteLevelTables() {
  cp_to_byte.fill(-1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_to_cp[b] = printable ? b : 256 + n++;
  }
  for (int b = 0; b < 256; ++b) {
    append_utf8(byte_to_utf8[b], byte_to_cp[b]);
    cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
  }
}

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& t = byte_level_tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(t.byte_to_utf8[static_cast<unsigned char>(c)]);
  return out;
}

bool byte_level_to_bytes(std::string_view s, std::string& out) {
  const auto& t = byte_level_tables();
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_code_point(s, i);
    if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) return false;
    out.push_back(static_cast<char>(t.cp_to_byte[cp]));
  }
  return true;
}

}  // namespace peregrine::tokenizer
