// SIMD traits for AVX2 + FMA + F16C (8 f32 lanes), used by the generic kernels in kernels_impl.h.
// NOTE: include only from kernels_avx2.cpp (compiled with -mavx2 -mfma -mf16c); everything has internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace {

struct Simd {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr const char* kName = "avx2 fma f16c";
  // Matmul register tiles: the decode GEMV streams kGemvNr weight rows; the prefill GEMM tile is kGemmMr × kGemmNr.
  // The GEMV reads two rows at a time and prefetches the next two (kGemvPrefetch): eight rows at a time without
  // prefetching left Zen 1's prefetchers eight short streams (768-byte rows: pycoder-tiny decoded 1.5x slower).
  static constexpr int kGemvNr = 2;
  static constexpr bool kGemvPrefetch = true;
  static constexpr int kGemmMr = 4;
  static constexpr int kGemmNr = 3;
  // The tile for a few rows of x against short weight rows (matmul_impl.h: verify steps of small models): eight x
  // rows per weight vector, the weights read one row at a time (one sequential stream).
  static constexpr int kShortMr = 8;
  static constexpr int kShortNr = 1;
  // Quantized matmul tiles (quant_matmul_impl.h).
  static constexpr int kQGemvNr = 4;
  static constexpr int kQGemmMr = 2;
  static constexpr int kQGemmNr = 2;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load_bf16(const uint16_t* p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static V load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // 8 bytes as unsigned integers; as the low and the high nibbles of 8 bytes.
  static V load_u8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // 8 int8 codes; 8 float8 e4m3fn codes: the bits placed as f32 (sign, then exponent and mantissa 20 bits up) and
  // scaled by 2^120 (the bias difference), exact for normals and subnormals (the NaN code is never written).
  static V load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V load_fp8(const uint8_t* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24),
                                         _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f)), 20));
    return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
  }
  static void load_u4(const uint8_t* p, V* lo, V* hi) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    *lo = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(0xf)));
    *hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
  }
  // Round to nearest even; NaN stays a quiet NaN (matches f32_to_bf16 in core/dtype.h).
  static void store_bf16(uint16_t* p, V v) {
    __m256i bits = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    __m256i is_nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i halves = _mm256_blendv_epi8(rounded, quiet, is_nan);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(halves, halves), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static void store_f16(uint16_t* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }

  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c, one rounding
  static V round_nearest(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127].
  static V pow2(V n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  // x < limit ? a : b, per lane.
  static V select_less(V x, V limit, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, limit, _CMP_LT_OQ)); }

  // Fixed-order horizontal reductions: (lanes 0-3 + 4-7), then pairs, then the last two.
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Four sums at once, out[i] = sum of ai; each slot reduced in the same order, ((0+1)+(2+3)) + ((4+5)+(6+7)).
  static void hsum4(V a0, V a1, V a2, V a3, float* out) {
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
  }
  // Eight sums at once, out[i] = sum of a[i], each slot in the hsum4 order.
  static void hsum8(const V* a, float* out) {
    __m256 t01 = _mm256_hadd_ps(a[0], a[1]), t23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t45 = _mm256_hadd_ps(a[4], a[5]), t67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 u0 = _mm256_hadd_ps(t01, t23), u1 = _mm256_hadd_ps(t45, t67);  // [s0..s3 lo | s0..s3 hi], [s4..s7 ...]
    __m256 lo = _mm256_permute2f128_ps(u0, u1, 0x20), hi = _mm256_permute2f128_ps(u0, u1, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(lo, hi));
  }
  static float hmax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
};

// int8 dot products for int8_matmul_impl.h (AVX2): maddubs(|w|, sign(x, w)) pairs (|w| <= 128, |x| <= 127:
// no 16-bit saturation), widened by madd(1) into 8 int32 lanes.
struct I8Dot {
  static constexpr int64_t kBytes = 32;
  static constexpr int32_t kBias = 0;
  static constexpr int kGemvNr = 4, kGemmMr = 4, kGemmNr = 2;
  static constexpr const char* kName = "avx2 maddubs";
  using Acc = __m256i;
  struct W {
    __m256i raw, abs;
  };
  using X = __m256i;
  static Acc zero() { return _mm256_setzero_si256(); }
  static W load_w(const int8_t* p) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {v, _mm256_abs_epi8(v)};
  }
  static X load_x(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Acc dot(Acc acc, const W& w, X x) {
    const __m256i p16 = _mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(x, w.raw));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
  }
  static int32_t hsum(Acc v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
  }
};

// int4 x int8 dot products for w4a8_matmul_impl.h (AVX2): codes unpacked to bytes 0..15 (unsigned, maddubs'
// first operand) times the signed x, two maddubs summed in 16 bits (<= 2 * 2 * 15 * 128: no saturation), widened by
// madd(1) into 8 int32 lanes (lane l sums bytes 4l .. 4l + 3).
struct I4Dot {
  static constexpr int64_t kBytes = 32;
  static constexpr int kLanes = 8;
  static constexpr int kGemvNr = 4, kGemmMr = 2, kGemmNr = 2;
  static constexpr const char* kName = "avx2 maddubs";
  using Acc = __m256i;
  using F = __m256;
  using W = __m256i;
  using X = __m256i;
  static Acc zero() { return _mm256_setzero_si256(); }
  static F fzero() { return _mm256_setzero_ps(); }
  static void load_codes(const uint8_t* p, W* lo, W* hi) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), m = _mm256_set1_epi8(0x0f);
    *lo = _mm256_and_si256(v, m);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  }
  static X load_x(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Acc dot2(Acc acc, W lo, X xe, W hi, X xo) {
    const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
  }
  static Acc correct(Acc acc, const int32_t* c) {
    return _mm256_sub_epi32(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
  }
  static F scale_add(F f, Acc acc, float s) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(s), f); }
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace
