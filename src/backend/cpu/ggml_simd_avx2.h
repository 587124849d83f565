// Integer traits for the GGUF block kernels (ggml_kernels_impl.h) on AVX2 + FMA + F16C: 32-byte vectors;
// u8 x s8 dot products by maddubs + madd (exact here: codes are at most 63, or |code| <= 128 against |x| <= 127).
// NOTE: include only from ggml_kernels_avx2.cpp / ggml_kernels_vnni.cpp (compiled with those flags).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace {

struct GAvx2 {
  using I = __m256i;
  using F = __m256;
  static constexpr const char* kName = "avx2";
  static constexpr int kGemvNr = 4;  // weight rows streamed at once by the M = 1 kernel
  static constexpr int kMr = 2, kNr = 2;    // the M > 1 register tile (16 vector registers)
  static constexpr int kMrK = 4, kNrK = 1;  // the same for the K-quants

  static I zero() { return _mm256_setzero_si256(); }
  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  // 16 bytes of nibble pairs: bytes [0, 16) the low nibbles, [16, 32) the high nibbles.
  static I nibbles16(const uint8_t* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
  }
  static I lo4(I v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
  static I hi4(I v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f)); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I set1_8(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }
  static I set1_16(int16_t v) { return _mm256_set1_epi16(v); }
  static I set_16x2(int16_t lo, int16_t hi) { return _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo)); }
  static I srli16(I v, int s) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(s)); }
  static I slli16(I v, int s) { return _mm256_sll_epi16(v, _mm_cvtsi32_si128(s)); }
  static I slli32(I v, int s) { return _mm256_sll_epi32(v, _mm_cvtsi32_si128(s)); }
  // Byte j = value where bit j of bits is set, else 0.
  static I bits_to_bytes(uint32_t bits, int value) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), set1_8(value));
  }
  // acc[l] += sum of u[4l + t] * s[4l + t], u unsigned, s signed bytes.
  static I dot(I acc, I u, I s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  // Both signed (|x| <= 127): the sign of w moved onto x.
  static I dot_ss(I acc, I w, I x) { return dot(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w)); }
  // acc[l] += sc16[2l] * (u s pair 2l) + sc16[2l + 1] * (pair 2l + 1).
  static I dot_sc(I acc, I u, I s, I sc16) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16));
  }
  // 8 bytes (lo word, hi word) as int16 in both 128-bit halves; the same with each value twice (16 int16).
  static I u8x8_to16(uint32_t lo, uint32_t hi) {
    const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(lo | (static_cast<uint64_t>(hi) << 32)));
    return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(b));
  }
  static I u8x8_to16_twice(uint32_t lo, uint32_t hi) {
    const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(lo | (static_cast<uint64_t>(hi) << 32)));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b));
  }
  // Every int16 lane = int16 lane s (0..7) of v's halves.
  static I pick16(I v, int s) { return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<short>(((2 * s + 1) << 8) | (2 * s)))); }
  static I bcast16(const uint8_t* p) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // From 16 int8 in both halves (bcast16): [int8 2s as int16 x8 | int8 2s + 1 as int16 x8].
  static I pick_s8_pair(I v, int s) {
    const short lo = static_cast<short>((2 * s) << 8 | 0x80), hi = static_cast<short>((2 * s + 1) << 8 | 0x80);
    const I idx = _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(v, idx), 8);
  }
  static I madd16(I a, I b) { return _mm256_madd_epi16(a, b); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I lane0(int32_t v) { return _mm256_zextsi128_si256(_mm_cvtsi32_si128(v)); }
  static I cvt8_16(const int8_t* p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }

  // [16 bytes at a | 16 bytes at b], zeros for b null.
  static I pair16(const uint8_t* a, const uint8_t* b) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    return b ? _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), lo) : _mm256_zextsi128_si256(lo);
  }
  // [half at a x4, half at b x4] as f32 (0 for b null).
  static F f16x2(const uint8_t* a, const uint8_t* b) {
    uint16_t ha, hb = 0;
    std::memcpy(&ha, a, 2);
    if (b) std::memcpy(&hb, b, 2);
    return _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm_set1_epi16(static_cast<short>(ha)), _mm_set1_epi16(static_cast<short>(hb))));
  }
  static F zerof() { return _mm256_setzero_ps(); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static F mulf(F a, F b) { return _mm256_mul_ps(a, b); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // ((0+4)+(2+6)) + ((1+5)+(3+7)), as the scalar traits do.
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
  }
};

}  // namespace
