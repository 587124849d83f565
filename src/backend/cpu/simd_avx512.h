// SIMD traits for AVX-512 F/BW/VL (16 f32 lanes), used by the generic kernels in kernels_impl.h.
// NOTE: include only from kernels_avx512.cpp (compiled with -mavx512f -mavx512bw ...); internal linkage only.
#pragma once

// NOTE: GCC 12's avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined_* temporaries (GCC bug
// 105593) wherever its intrinsics are inlined, so the check is off for this TU only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/i4dot_avx512.h"

namespace {

struct Simd {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr const char* kName = "avx512";
  // Matmul register tiles: the decode GEMV streams kGemvNr weight rows; the prefill GEMM tile is kGemmMr × kGemmNr.
  static constexpr int kGemvNr = 8;
  static constexpr bool kGemvPrefetch = false;  // measured only on AVX2 (simd_avx2.h)
  static constexpr int kGemmMr = 4;
  static constexpr int kGemmNr = 6;
  static constexpr int kShortMr = kGemmMr;  // matmul_impl.h's short-row tile: the GEMM tile here
  static constexpr int kShortNr = kGemmNr;
  // Quantized matmul tiles (quant_matmul_impl.h).
  static constexpr int kQGemvNr = 4;
  static constexpr int kQGemmMr = 4;
  static constexpr int kQGemmNr = 2;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V load_bf16(const uint16_t* p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static V load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // 16 bytes as unsigned integers; as the low and the high nibbles of 16 bytes.
  static V load_u8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // 16 int8 codes; 16 float8 e4m3fn codes (see simd_avx2.h: bits as f32 times 2^120, exact).
  static V load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V load_fp8(const uint8_t* p) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24),
                                         _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x7f)), 20));
    return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
  }
  static void load_u4(const uint8_t* p, V* lo, V* hi) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *lo = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(0xf)));
    *hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
  }
  // Round to nearest even; NaN stays a quiet NaN (matches f32_to_bf16 in core/dtype.h).
  static void store_bf16(uint16_t* p, V v) {
    __m512i bits = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
    __mmask16 is_nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    __m512i halves = _mm512_mask_blend_epi32(is_nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(halves));
  }
  static void store_f16(uint16_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }

  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V round_nearest(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2(V n) {
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static V select_less(V x, V limit, V a, V b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, limit, _CMP_LT_OQ), b, a);
  }

  // Fixed-order horizontal reductions: halves, then quarters, then pairs, then the last two.
  static float hsum(V v) {
    __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Four sums at once, out[i] = sum of ai; each slot reduced in the same order (halves, then as AVX2).
  static void hsum4(V a0, V a1, V a2, V a3, float* out) {
    auto half = [](V v) {
      return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    };
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(half(a0), half(a1)), _mm256_hadd_ps(half(a2), half(a3)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
  }
  // Eight sums at once, out[i] = sum of a[i], each slot in the hsum4 order.
  static void hsum8(const V* a, float* out) {
    hsum4(a[0], a[1], a[2], a[3], out);
    hsum4(a[4], a[5], a[6], a[7], out + 4);
  }
  static float hmax(V v) {
    __m256 h =
        _mm256_max_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
};

// int8 dot products for int8_matmul_impl.h (AVX-512 BW without VNNI): maddubs(|w|, x negated where w < 0)
// (|w| <= 128, |x| <= 127: no 16-bit saturation), widened by madd(1) into 16 int32 lanes. With VNNI the backend
// uses int8_avx512vnni.cpp instead.
struct I8Dot {
  static constexpr int64_t kBytes = 64;
  static constexpr int32_t kBias = 0;
  static constexpr int kGemvNr = 4, kGemmMr = 4, kGemmNr = 4;
  static constexpr const char* kName = "avx512bw maddubs";
  using Acc = __m512i;
  struct W {
    __m512i abs;
    __mmask64 neg;
  };
  using X = __m512i;
  static Acc zero() { return _mm512_setzero_si512(); }
  static W load_w(const int8_t* p) {
    const __m512i v = _mm512_loadu_si512(p);
    return {_mm512_abs_epi8(v), _mm512_movepi8_mask(v)};
  }
  static X load_x(const int8_t* p) { return _mm512_loadu_si512(p); }
  static Acc dot(Acc acc, const W& w, X x) {
    const __m512i sx = _mm512_mask_sub_epi8(x, w.neg, _mm512_setzero_si512(), x);
    const __m512i p16 = _mm512_maddubs_epi16(w.abs, sx);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
  }
  static int32_t hsum(Acc v) { return _mm512_reduce_add_epi32(v); }
};

// int4 x int8 dot products for w4a8_matmul_impl.h (AVX-512BW): codes unpacked to bytes 0..15 (unsigned, as
// maddubs wants its first operand), maddubs with the signed x (|sum of two pairs| <= 2 * 2 * 15 * 128: no 16-bit
// saturation), widened by madd(1) into 16 int32 lanes (lane l sums bytes 4l .. 4l + 3). With VNNI the backend
// uses int8_avx512vnni.cpp instead.
struct I4Dot : I4DotAvx512Base {
  static constexpr const char* kName = "avx512bw maddubs";
  static Acc dot2(Acc acc, W lo, X xe, W hi, X xo) {
    const __m512i p16 = _mm512_add_epi16(_mm512_maddubs_epi16(lo, xe), _mm512_maddubs_epi16(hi, xo));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p16, _mm512_set1_epi16(1)));
  }
};

}  // namespace
