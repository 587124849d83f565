// Open-addressing hash maps for the tokenizer's hot paths: byte-string -> id (vocabulary, caches) and
// 64-bit key -> value (BPE merges keyed on a pair of ids). Keys live in one arena, so lookups by
// std::string_view allocate nothing.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::tokenizer {

// A fast non-cryptographic hash for short byte strings (pre-tokens, vocabulary entries).
inline uint64_t hash_bytes(const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (len * 0xC2B2AE3D27D4EB4Full);
  auto mix = [](uint64_t a, uint64_t b) {
    __uint128_t r = static_cast<__uint128_t>(a ^ 0xA0761D6478BD642Full) * (b ^ 0xE7037ED1A0B428DBull);
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
  };
  while (len >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = mix(h, v);
    p += 8;
    len -= 8;
  }
  if (len > 0) {
    uint64_t v = 0;
    std::memcpy(&v, p, len);
    h = mix(h, v ^ (static_cast<uint64_t>(len) << 56));
  }
  return mix(h, 0x8EBC6AF09C88C6E3ull);
}

inline uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

// Byte-string -> uint32 value. Insert-only (plus clear); keys are copied into an arena.
class StringIdMap {
 public:
  static constexpr uint32_t kMissing = 0xFFFFFFFFu;

  void reserve(size_t n, size_t key_bytes = 0) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
    arena_.reserve(key_bytes);
  }
  size_t size() const { return size_; }
  void clear() {
    slots_.assign(slots_.size(), Slot{});
    arena_.clear();
    size_ = 0;
  }
  // Inserts or overwrites.
  void set(std::string_view key, uint32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    uint64_t h = hash_bytes(key.data(), key.size());
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.len == kEmpty) {
        s.hash = h;
        s.offset = static_cast<uint32_t>(arena_.size());
        s.len = static_cast<uint32_t>(key.size());
        s.value = value;
        arena_.append(key);
        ++size_;
        return;
      }
      if (s.hash == h && s.len == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
        s.value = value;
        return;
      }
    }
  }
  uint32_t get(std::string_view key) const {
    if (slots_.empty()) return kMissing;
    uint64_t h = hash_bytes(key.data(), key.size());
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.len == kEmpty) return kMissing;
      if (s.hash == h && s.len == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
        return s.value;
    }
  }
  size_t arena_bytes() const { return arena_.size(); }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t len = kEmpty;
    uint32_t value = 0;
  };
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    size_t mask = cap - 1;
    for (const Slot& s : old) {
      if (s.len == kEmpty) continue;
      size_t i = s.hash & mask;
      while (slots_[i].len != kEmpty) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0;
};

// uint64 key -> V (trivially copyable). Insert-only.
template <typename V>
class U64Map {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
  }
  size_t size() const { return size_; }
  void set(uint64_t key, V value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (!s.used) {
        s = Slot{key, value, true};
        ++size_;
        return;
      }
      if (s.key == key) {
        s.value = value;
        return;
      }
    }
  }
  const V* get(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t mask = slots_.size() - 1;
    for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.key == key) return &s.value;
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    V value{};
    bool used = false;
  };
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    size_t mask = cap - 1;
    for (const Slot& s : old) {
      if (!s.used) continue;
      size_t i = hash_u64(s.key) & mask;
      while (slots_[i].used) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace peregrine::tokenizer
