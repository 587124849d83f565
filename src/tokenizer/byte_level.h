// GPT-2's reversible byte <-> printable-character map used by the ByteLevel pre-tokenizer and decoder:
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace peregrine::tokenizer {

struct ByteLevelTables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_utf8{};
  std::array<int16_t, 324> cp_to_byte{};  // -1 where not in the map
  ByteLevelTables();
};
const ByteLevelTables& byte_level_tables();

// Maps raw bytes to their byte-level characters (UTF-8).
std::string bytes_to_byte_level(std::string_view bytes);
// Maps byte-level characters back to raw bytes. Returns false (out unspecified) when a character is not in the
// map; `s` must be valid UTF-8.
bool byte_level_to_bytes(std::string_view s, std::string& out);

}  // namespace peregrine::tokenizer
