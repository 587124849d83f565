// A tiny GGUF writer for tests: builds files byte by byte so every field can be made wrong on purpose.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace peregrine::testing {

class GgufBuilder {
 public:
  std::vector<uint8_t> out;

  template <typename T>
  void put(T v) {
    const size_t n = out.size();
    out.resize(n + sizeof(T));
    std::memcpy(out.data() + n, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void header(uint32_t version, uint64_t tensors, uint64_t kvs) {
    out.insert(out.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(version);
    put<uint64_t>(tensors);
    put<uint64_t>(kvs);
  }
  void kv_u32(const std::string& k, uint32_t v) { str(k), put<uint32_t>(4), put<uint32_t>(v); }
  void kv_f32(const std::string& k, float v) { str(k), put<uint32_t>(6), put<float>(v); }
  void kv_str(const std::string& k, const std::string& v) { str(k), put<uint32_t>(8), str(v); }
  void kv_bool(const std::string& k, bool v) { str(k), put<uint32_t>(7), put<uint8_t>(v ? 1 : 0); }
  void kv_strs(const std::string& k, const std::vector<std::string>& v) {
    str(k), put<uint32_t>(9), put<uint32_t>(8), put<uint64_t>(v.size());
    for (const auto& s : v) str(s);
  }
  void kv_f32s(const std::string& k, const std::vector<float>& v) {
    str(k), put<uint32_t>(9), put<uint32_t>(6), put<uint64_t>(v.size());
    for (float f : v) put<float>(f);
  }
  void kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    str(k), put<uint32_t>(9), put<uint32_t>(5), put<uint64_t>(v.size());
    for (int32_t f : v) put<int32_t>(f);
  }
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name);
    put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) put<uint64_t>(d);
    put<uint32_t>(type);
    put<uint64_t>(offset);
  }
  void align(size_t a = 32) {
    while (out.size() % a) out.push_back(0);
  }
  void bytes(size_t n, uint8_t v = 0) { out.insert(out.end(), n, v); }
};

}  // namespace peregrine::testing
