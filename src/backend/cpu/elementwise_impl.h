// Generic row kernels over the TU's `Simd`: rms_norm (fused residual), rotate-half RoPE, silu·mul, and
// conversions between f32 and the storage dtypes. NOTE: include only from a kernels_<isa>.cpp.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cpu/simd_common.h"
#include "core/dtype.h"

namespace {

void rms_norm_row_kernel(const float* x, float* residual, const float* weight, float* out, int64_t h, float eps) {
  const float* src = x;
  int64_t d = 0;
  if (residual) {
    for (; d + kLanes <= h; d += kLanes)
      Simd::store(residual + d, Simd::add(Simd::load(residual + d), Simd::load(x + d)));
    if (d < h)
      store_partial<ElemF32>(residual + d,
                             Simd::add(load_partial<ElemF32>(residual + d, h - d), load_partial<ElemF32>(x + d, h - d)),
                             h - d);
    src = residual;
  }
  V ss = Simd::zero();
  for (d = 0; d + kLanes <= h; d += kLanes) {
    V v = Simd::load(src + d);
    ss = Simd::fma(v, v, ss);
  }
  if (d < h) {
    V v = load_partial<ElemF32>(src + d, h - d);
    ss = Simd::fma(v, v, ss);
  }
  const double mean = static_cast<double>(Simd::hsum(ss)) / static_cast<double>(h);
  const V inv = Simd::set1(static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps))));
  // Like Hugging Face: the normalised value is rounded to f32 before the weight multiply.
  for (d = 0; d + kLanes <= h; d += kLanes)
    Simd::store(out + d, Simd::mul(Simd::mul(Simd::load(src + d), inv), Simd::load(weight + d)));
  if (d < h)
    store_partial<ElemF32>(
        out + d,
        Simd::mul(Simd::mul(load_partial<ElemF32>(src + d, h - d), inv), load_partial<ElemF32>(weight + d, h - d)),
        h - d);
}

inline void rope_pair(float* a_ptr, float* b_ptr, const float* cos, const float* sin, int64_t n) {
  V a, b, c, s;
  if (n == kLanes) {
    a = Simd::load(a_ptr), b = Simd::load(b_ptr), c = Simd::load(cos), s = Simd::load(sin);
  } else {
    a = load_partial<ElemF32>(a_ptr, n), b = load_partial<ElemF32>(b_ptr, n);
    c = load_partial<ElemF32>(cos, n), s = load_partial<ElemF32>(sin, n);
  }
  V na = Simd::fma(a, c, Simd::sub(Simd::zero(), Simd::mul(b, s)));  // a*cos - b*sin
  V nb = Simd::fma(b, c, Simd::mul(a, s));                           // b*cos + a*sin
  if (n == kLanes) {
    Simd::store(a_ptr, na);
    Simd::store(b_ptr, nb);
  } else {
    store_partial<ElemF32>(a_ptr, na, n);
    store_partial<ElemF32>(b_ptr, nb, n);
  }
}

void rope_token_kernel(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin, int64_t half) {
  for (int64_t h = 0; h < heads; ++h) {
    float* base = x + h * head_dim;
    for (int64_t i = 0; i < half; i += kLanes)
      rope_pair(base + i, base + half + i, cos + i, sin + i, min_i(kLanes, half - i));
  }
}

inline V silu_mul_v(V g, V u) {
  V e = exp_v(Simd::sub(Simd::zero(), g));
  return Simd::mul(Simd::div(g, Simd::add(Simd::set1(1.0f), e)), u);
}

void silu_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Simd::store(out + i, silu_mul_v(Simd::load(gate + i), Simd::load(up + i)));
  if (i < n)
    store_partial<ElemF32>(
        out + i, silu_mul_v(load_partial<ElemF32>(gate + i, n - i), load_partial<ElemF32>(up + i, n - i)), n - i);
}

template <class From, class To>
void convert_row(const void* src, void* dst, int64_t n) {
  const auto* s = static_cast<const typename From::T*>(src);
  auto* d = static_cast<typename To::T*>(dst);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) To::store(d + i, From::load(s + i));
  if (i < n) store_partial<To>(d + i, load_partial<From>(s + i, n - i), n - i);
}

void to_f32_kernel(peregrine::DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case peregrine::DType::kBF16:
      return convert_row<ElemBF16, ElemF32>(src, dst, n);
    case peregrine::DType::kF16:
      return convert_row<ElemF16, ElemF32>(src, dst, n);
    default:
      return convert_row<ElemF32, ElemF32>(src, dst, n);
  }
}

void from_f32_kernel(peregrine::DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case peregrine::DType::kBF16:
      return convert_row<ElemF32, ElemBF16>(src, dst, n);
    case peregrine::DType::kF16:
      return convert_row<ElemF32, ElemF16>(src, dst, n);
    default:
      return convert_row<ElemF32, ElemF32>(src, dst, n);
  }
}

}  // namespace
