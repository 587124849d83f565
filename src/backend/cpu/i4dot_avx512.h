// What the AVX-512 int4 x int8 dot-product traits of w4a8_matmul_impl.h share (the AVX-512BW maddubs ones in
// simd_avx512.h and the VNNI ones in int8_avx512vnni.cpp add only their name and dot2): tile sizes, 64-byte steps of
// 16 int32 lanes, the codes unpacked to bytes 0..15, the midpoint correction and the f32 scaling.
// NOTE: include only from translation units compiled with -mavx512f -mavx512bw; internal linkage only.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace {

struct I4DotAvx512Base {
  static constexpr int64_t kBytes = 64;
  static constexpr int kLanes = 16;
  static constexpr int kGemvNr = 4, kGemmMr = 4, kGemmNr = 2;
  using Acc = __m512i;
  using F = __m512;
  using W = __m512i;
  using X = __m512i;
  static Acc zero() { return _mm512_setzero_si512(); }
  static F fzero() { return _mm512_setzero_ps(); }
  static void load_codes(const uint8_t* p, W* lo, W* hi) {
    const __m512i v = _mm512_loadu_si512(p), m = _mm512_set1_epi8(0x0f);
    *lo = _mm512_and_si512(v, m);
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
  }
  static X load_x(const int8_t* p) { return _mm512_loadu_si512(p); }
  static Acc correct(Acc acc, const int32_t* c) { return _mm512_sub_epi32(acc, _mm512_loadu_si512(c)); }
  static F scale_add(F f, Acc acc, float s) { return _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(s), f); }
  static float hsum(F v) { return _mm512_reduce_add_ps(v); }
};

}  // namespace
