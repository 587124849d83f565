// Portable SIMD traits: a plain array of 8 floats with element loops (the compiler may vectorise them for the
// baseline ISA). Used where neither AVX2 nor AVX-512 is present; same kernels, same lane layout as AVX2.
// NOTE: include only from kernels_scalar.cpp; everything has internal linkage.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace {

struct Simd {
  struct V {
    float v[8];
  };
  static constexpr int kLanes = 8;
  static constexpr const char* kName = "scalar";
  // Matmul register tiles: the decode GEMV streams kGemvNr weight rows; the prefill GEMM tile is kGemmMr × kGemmNr.
  static constexpr int kGemvNr = 4;
  static constexpr bool kGemvPrefetch = false;  // measured only on AVX2 (simd_avx2.h)
  static constexpr int kGemmMr = 2;
  static constexpr int kGemmNr = 2;
  static constexpr int kShortMr = kGemmMr;  // matmul_impl.h's short-row tile: the GEMM tile here
  static constexpr int kShortNr = kGemmNr;
  static constexpr int kQGemvNr = 4;
  static constexpr int kQGemmMr = 2;
  static constexpr int kQGemmNr = 2;

  template <class F>
  static V map(V a, F f) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = f(a.v[i]);
    return r;
  }
  template <class F>
  static V zip(V a, V b, F f) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = f(a.v[i], b.v[i]);
    return r;
  }

  static V zero() { return set1(0.0f); }
  static V set1(float x) {
    V r;
    for (float& e : r.v) e = x;
    return r;
  }
  static V load(const float* p) {
    V r;
    std::memcpy(r.v, p, sizeof(r.v));
    return r;
  }
  static void store(float* p, V v) { std::memcpy(p, v.v, sizeof(v.v)); }
  static V load_bf16(const uint16_t* p) {
    V r;
    for (int i = 0; i < 8; ++i) {
      uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
      std::memcpy(&r.v[i], &bits, 4);
    }
    return r;
  }
  static V load_f16(const uint16_t* p) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = peregrine::f16_to_f32(p[i]);
    return r;
  }
  // 8 int8 codes; 8 float8 e4m3fn codes (quantized KV caches).
  static V load_i8(const int8_t* p) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = static_cast<float>(p[i]);
    return r;
  }
  static V load_fp8(const uint8_t* p) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = peregrine::fp8_e4m3_to_f32(p[i]);
    return r;
  }
  static V load_u8(const uint8_t* p) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = static_cast<float>(p[i]);
    return r;
  }
  static void load_u4(const uint8_t* p, V* lo, V* hi) {
    for (int i = 0; i < 8; ++i) {
      lo->v[i] = static_cast<float>(p[i] & 0xf);
      hi->v[i] = static_cast<float>(p[i] >> 4);
    }
  }
  static void store_bf16(uint16_t* p, V v) {
    for (int i = 0; i < 8; ++i) p[i] = peregrine::f32_to_bf16(v.v[i]);
  }
  static void store_f16(uint16_t* p, V v) {
    for (int i = 0; i < 8; ++i) p[i] = peregrine::f32_to_f16(v.v[i]);
  }

  static V add(V a, V b) {
    return zip(a, b, [](float x, float y) { return x + y; });
  }
  static V sub(V a, V b) {
    return zip(a, b, [](float x, float y) { return x - y; });
  }
  static V mul(V a, V b) {
    return zip(a, b, [](float x, float y) { return x * y; });
  }
  static V div(V a, V b) {
    return zip(a, b, [](float x, float y) { return x / y; });
  }
  static V max(V a, V b) {
    return zip(a, b, [](float x, float y) { return x > y ? x : y; });
  }
  static V min(V a, V b) {
    return zip(a, b, [](float x, float y) { return x < y ? x : y; });
  }
  // Not fused (no FMA unit assumed); NOTE: the kernel TUs build with -ffp-contract=off, so this stays two roundings.
  static V fma(V a, V b, V c) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
    return r;
  }
  static V round_nearest(V a) {
    return map(a, [](float x) { return std::nearbyint(x); });
  }
  static V pow2(V n) {
    return map(n, [](float x) {
      uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(x) + 127) << 23;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    });
  }
  static V select_less(V x, V limit, V a, V b) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = x.v[i] < limit.v[i] ? a.v[i] : b.v[i];
    return r;
  }
  // Same order as the AVX2 reduction: (0..3 + 4..7), then (0,1)+(2,3), then the last two.
  static float hsum(V v) {
    float s[4];
    for (int i = 0; i < 4; ++i) s[i] = v.v[i] + v.v[i + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
  }
  // Four sums at once, each in the AVX2 hsum4 order: ((0+1)+(2+3)) + ((4+5)+(6+7)).
  static void hsum4(V a0, V a1, V a2, V a3, float* out) {
    const V* a[4] = {&a0, &a1, &a2, &a3};
    for (int i = 0; i < 4; ++i) {
      const float* x = a[i]->v;
      out[i] = ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]));
    }
  }
  static void hsum8(const V* a, float* out) {
    hsum4(a[0], a[1], a[2], a[3], out);
    hsum4(a[4], a[5], a[6], a[7], out + 4);
  }
  static float hmax(V v) {
    float m = v.v[0];
    for (int i = 1; i < 8; ++i) m = v.v[i] > m ? v.v[i] : m;
    return m;
  }
  static void prefetch(const void*) {}
};

// int8 dot products for int8_matmul_impl.h (portable): 16 columns per step, one int32 sum.
struct I8Dot {
  static constexpr int64_t kBytes = 16;
  static constexpr int32_t kBias = 0;
  static constexpr int kGemvNr = 4, kGemmMr = 2, kGemmNr = 2;
  static constexpr const char* kName = "scalar";
  using Acc = int32_t;
  struct W {
    int8_t v[16];
  };
  using X = W;
  static Acc zero() { return 0; }
  static W load_w(const int8_t* p) {
    W w;
    std::memcpy(w.v, p, 16);
    return w;
  }
  static X load_x(const int8_t* p) { return load_w(p); }
  static Acc dot(Acc acc, const W& w, const X& x) {
    for (int i = 0; i < 16; ++i) acc += static_cast<int32_t>(w.v[i]) * x.v[i];
    return acc;
  }
  static int32_t hsum(Acc v) { return v; }
};

// int4 x int8 dot products for w4a8_matmul_impl.h (portable): 16 code bytes (32 codes) per step, one int32 sum.
struct I4Dot {
  static constexpr int64_t kBytes = 16;
  static constexpr int kLanes = 1;
  static constexpr int kGemvNr = 4, kGemmMr = 2, kGemmNr = 2;
  static constexpr const char* kName = "scalar";
  using Acc = int32_t;
  using F = float;
  struct W {
    uint8_t v[16];
  };
  struct X {
    int8_t v[16];
  };
  static Acc zero() { return 0; }
  static F fzero() { return 0.0f; }
  static void load_codes(const uint8_t* p, W* lo, W* hi) {
    for (int i = 0; i < 16; ++i) {
      lo->v[i] = p[i] & 0x0f;
      hi->v[i] = p[i] >> 4;
    }
  }
  static X load_x(const int8_t* p) {
    X x;
    std::memcpy(x.v, p, 16);
    return x;
  }
  static Acc dot2(Acc acc, const W& lo, const X& xe, const W& hi, const X& xo) {
    for (int i = 0; i < 16; ++i) acc += static_cast<int32_t>(lo.v[i]) * xe.v[i] + static_cast<int32_t>(hi.v[i]) * xo.v[i];
    return acc;
  }
  static Acc correct(Acc acc, const int32_t* c) { return acc - c[0]; }
  static F scale_add(F f, Acc acc, float s) { return f + static_cast<float>(acc) * s; }
  static float hsum(F v) { return v; }
};

}  // namespace
