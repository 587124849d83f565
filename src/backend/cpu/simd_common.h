// Helpers shared by the generic kernels on top of the TU's `Simd` traits: element loaders per storage dtype,
// zero-padded partial loads, and a vector exp. NOTE: include only from a kernels_<isa>.cpp, after its simd_*.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace {

using V = Simd::V;
constexpr int kLanes = Simd::kLanes;
constexpr float kNegInf = -__builtin_inff();

// NOTE: kernels use these instead of std::min/std::max/std::fill: a std template instantiated here could be
// emitted with this TU's ISA flags and picked by the linker for baseline code (an illegal instruction on older CPUs).
inline int64_t min_i(int64_t a, int64_t b) {
  return a < b ? a : b;
}
inline int64_t max_i(int64_t a, int64_t b) {
  return a > b ? a : b;
}
inline float max_f(float a, float b) {
  return a > b ? a : b;
}
inline void fill_f(float* p, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

// Storage element types: T in memory, converted to f32 lanes in registers.
struct ElemF32 {
  using T = float;
  static V load(const T* p) { return Simd::load(p); }
  static void store(T* p, V v) { Simd::store(p, v); }
};
struct ElemBF16 {
  using T = uint16_t;
  static V load(const T* p) { return Simd::load_bf16(p); }
  static void store(T* p, V v) { Simd::store_bf16(p, v); }
};
struct ElemF16 {
  using T = uint16_t;
  static V load(const T* p) { return Simd::load_f16(p); }
  static void store(T* p, V v) { Simd::store_f16(p, v); }
};

// Quantized KV caches: codes as f32 lanes (the caller applies the per-token-head scale).
struct ElemI8 {
  using T = int8_t;
  static constexpr bool kQuantized = true;
  static V load(const T* p) { return Simd::load_i8(p); }
};
struct ElemFp8 {
  using T = uint8_t;
  static constexpr bool kQuantized = true;
  static V load(const T* p) { return Simd::load_fp8(p); }
};
template <class E, class = void>
struct ElemIsQuantized {
  static constexpr bool value = false;
};
template <class E>
struct ElemIsQuantized<E, decltype(void(E::kQuantized))> {
  static constexpr bool value = E::kQuantized;
};

// The first n (< kLanes) elements of p, the other lanes zero.
template <class E>
inline V load_partial(const typename E::T* p, int64_t n) {
  typename E::T tmp[kLanes] = {};
  std::memcpy(tmp, p, static_cast<size_t>(n) * sizeof(typename E::T));
  return E::load(tmp);
}
template <class E>
inline void store_partial(typename E::T* p, V v, int64_t n) {
  typename E::T tmp[kLanes];
  E::store(tmp, v);
  std::memcpy(p, tmp, static_cast<size_t>(n) * sizeof(typename E::T));
}

// exp(x) per lane, Cephes-style range reduction and degree-5 polynomial (about 1 ulp). Lanes below
// ln(FLT_MIN) give 0 (so exp(-inf) = 0); lanes above 88 saturate at exp(88).
inline V exp_v(V x) {
  const V lo = Simd::set1(-87.33654f);
  V xc = Simd::min(Simd::max(x, lo), Simd::set1(88.0f));
  V n = Simd::round_nearest(Simd::mul(xc, Simd::set1(1.44269504088896341f)));
  V r = Simd::fma(n, Simd::set1(-0.693359375f), xc);
  r = Simd::fma(n, Simd::set1(2.12194440e-4f), r);
  V p = Simd::set1(1.9875691500e-4f);
  p = Simd::fma(p, r, Simd::set1(1.3981999507e-3f));
  p = Simd::fma(p, r, Simd::set1(8.3334519073e-3f));
  p = Simd::fma(p, r, Simd::set1(4.1665795894e-2f));
  p = Simd::fma(p, r, Simd::set1(1.6666665459e-1f));
  p = Simd::fma(p, r, Simd::set1(5.0000001201e-1f));
  V r2 = Simd::mul(r, r);
  V y = Simd::add(Simd::fma(p, r2, r), Simd::set1(1.0f));
  y = Simd::mul(y, Simd::pow2(n));
  return Simd::select_less(x, lo, Simd::zero(), y);
}

// Scalar exp through the same lanes, so a value gets the same result in a vector or on its own.
inline float exp_s(float x) {
  float tmp[kLanes];
  Simd::store(tmp, exp_v(Simd::set1(x)));
  return tmp[0];
}

}  // namespace
