// The GGUF block kernels built portable: ggml_kernels_impl.h over traits that emulate the 32-byte integer vectors
// lane by lane (the same integers and the same f32 operation order as the SIMD builds).
// NOTE: compiled with its own flags (src/backend/cpu/CMakeLists.txt); only the table escapes it.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace {

struct GScalar {
  struct I {
    uint8_t b[32];
    int8_t s8(int i) const { return static_cast<int8_t>(b[i]); }
    int16_t s16(int i) const {
      int16_t v;
      std::memcpy(&v, b + 2 * i, 2);
      return v;
    }
    int32_t s32(int i) const {
      int32_t v;
      std::memcpy(&v, b + 4 * i, 4);
      return v;
    }
    void set16(int i, int32_t v) {
      const int16_t t = static_cast<int16_t>(v);
      std::memcpy(b + 2 * i, &t, 2);
    }
    void set32(int i, int32_t v) { std::memcpy(b + 4 * i, &v, 4); }
  };
  struct F {
    float v[8];
  };
  static constexpr const char* kName = "scalar";
  static constexpr int kGemvNr = 4;
  static constexpr int kMr = 2, kNr = 2;
  static constexpr int kMrK = 2, kNrK = 2;

  static I zero() { return I{}; }
  static I load(const void* p) {
    I r;
    std::memcpy(r.b, p, 32);
    return r;
  }
  static I nibbles16(const uint8_t* p) {
    I r;
    for (int i = 0; i < 16; ++i) {
      r.b[i] = p[i] & 0x0f;
      r.b[i + 16] = p[i] >> 4;
    }
    return r;
  }
  static I lo4(I v) {
    for (auto& x : v.b) x &= 0x0f;
    return v;
  }
  static I hi4(I v) {
    for (auto& x : v.b) x = static_cast<uint8_t>(x >> 4);
    return v;
  }
  static I and_(I a, I b) {
    for (int i = 0; i < 32; ++i) a.b[i] &= b.b[i];
    return a;
  }
  static I or_(I a, I b) {
    for (int i = 0; i < 32; ++i) a.b[i] |= b.b[i];
    return a;
  }
  static I set1_8(int v) {
    I r;
    std::memset(r.b, v, 32);
    return r;
  }
  static I set1_16(int16_t v) {
    I r;
    for (int i = 0; i < 16; ++i) r.set16(i, v);
    return r;
  }
  static I set_16x2(int16_t lo, int16_t hi) {
    I r;
    for (int i = 0; i < 16; ++i) r.set16(i, i < 8 ? lo : hi);
    return r;
  }
  static I srli16(I v, int s) {
    for (int i = 0; i < 16; ++i) v.set16(i, static_cast<uint16_t>(v.s16(i)) >> s);
    return v;
  }
  static I slli16(I v, int s) {
    for (int i = 0; i < 16; ++i) v.set16(i, static_cast<uint16_t>(static_cast<uint16_t>(v.s16(i)) << s));
    return v;
  }
  static I slli32(I v, int s) {
    for (int i = 0; i < 8; ++i) v.set32(i, static_cast<int32_t>(static_cast<uint32_t>(v.s32(i)) << s));
    return v;
  }
  static I bits_to_bytes(uint32_t bits, int value) {
    I r;
    for (int i = 0; i < 32; ++i) r.b[i] = ((bits >> i) & 1) ? static_cast<uint8_t>(value) : 0;
    return r;
  }
  static I dot(I acc, I u, I s) {
    for (int l = 0; l < 8; ++l) {
      int32_t t = 0;
      for (int q = 0; q < 4; ++q) t += static_cast<int32_t>(u.b[4 * l + q]) * s.s8(4 * l + q);
      acc.set32(l, acc.s32(l) + t);
    }
    return acc;
  }
  static I dot_ss(I acc, I w, I x) {
    for (int l = 0; l < 8; ++l) {
      int32_t t = 0;
      for (int q = 0; q < 4; ++q) t += static_cast<int32_t>(w.s8(4 * l + q)) * x.s8(4 * l + q);
      acc.set32(l, acc.s32(l) + t);
    }
    return acc;
  }
  static I dot_sc(I acc, I u, I s, I sc16) {
    for (int l = 0; l < 8; ++l) {
      int32_t t = 0;
      for (int p = 0; p < 2; ++p) {
        const int i = 4 * l + 2 * p;
        const int32_t pair = static_cast<int32_t>(u.b[i]) * s.s8(i) + static_cast<int32_t>(u.b[i + 1]) * s.s8(i + 1);
        t += pair * sc16.s16(2 * l + p);
      }
      acc.set32(l, acc.s32(l) + t);
    }
    return acc;
  }
  static I u8x8_to16(uint32_t lo, uint32_t hi) {
    I r;
    for (int i = 0; i < 16; ++i) r.set16(i, ((i & 7) < 4 ? lo >> (8 * (i & 3)) : hi >> (8 * (i & 3))) & 0xff);
    return r;
  }
  static I u8x8_to16_twice(uint32_t lo, uint32_t hi) {
    I r;
    for (int i = 0; i < 16; ++i) r.set16(i, ((i / 2) < 4 ? lo >> (8 * (i / 2)) : hi >> (8 * (i / 2 - 4))) & 0xff);
    return r;
  }
  static I pick16(I v, int s) {
    I r;
    for (int i = 0; i < 16; ++i) r.set16(i, v.s16(s));
    return r;
  }
  static I bcast16(const uint8_t* p) {
    I r;
    std::memcpy(r.b, p, 16);
    std::memcpy(r.b + 16, p, 16);
    return r;
  }
  static I pick_s8_pair(I v, int s) {
    I r;
    for (int i = 0; i < 16; ++i) r.set16(i, v.s8(i < 8 ? 2 * s : 2 * s + 1));
    return r;
  }
  static I madd16(I a, I b) {
    I r;
    for (int l = 0; l < 8; ++l)
      r.set32(l, static_cast<int32_t>(a.s16(2 * l)) * b.s16(2 * l) + static_cast<int32_t>(a.s16(2 * l + 1)) * b.s16(2 * l + 1));
    return r;
  }
  static I sub32(I a, I b) {
    for (int l = 0; l < 8; ++l) a.set32(l, a.s32(l) - b.s32(l));
    return a;
  }
  static I lane0(int32_t v) {
    I r{};
    r.set32(0, v);
    return r;
  }
  static I cvt8_16(const int8_t* p) {
    I r;
    for (int i = 0; i < 16; ++i) r.set16(i, p[i]);
    return r;
  }

  static I pair16(const uint8_t* a, const uint8_t* b) {
    I r{};
    std::memcpy(r.b, a, 16);
    if (b) std::memcpy(r.b + 16, b, 16);
    return r;
  }
  static F f16x2(const uint8_t* a, const uint8_t* b) {
    F r;
    const float da = f16(a), db = b ? f16(b) : 0.0f;
    for (int l = 0; l < 8; ++l) r.v[l] = l < 4 ? da : db;
    return r;
  }
  static F zerof() { return F{}; }
  static F loadf(const float* p) {
    F r;
    std::memcpy(r.v, p, 32);
    return r;
  }
  static F mulf(F a, F b) {
    for (int l = 0; l < 8; ++l) a.v[l] *= b.v[l];
    return a;
  }
  static F cvt(I v) {
    F r;
    for (int l = 0; l < 8; ++l) r.v[l] = static_cast<float>(v.s32(l));
    return r;
  }
  static F set1f(float x) {
    F r;
    for (float& v : r.v) v = x;
    return r;
  }
  static F fma(F a, F b, F c) {
    for (int l = 0; l < 8; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  static float hsum(F a) {
    const float* v = a.v;
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
  }
  static float f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return peregrine::f16_to_f32(h);
  }
};
using G = GScalar;

}  // namespace
#include "backend/cpu/ggml_kernels_impl.h"

namespace peregrine::cpu {

const GgmlKernelTable& ggml_scalar_kernels() {
  static const GgmlKernelTable table = make_ggml_table();
  return table;
}

}  // namespace peregrine::cpu
