// The int8 W8A8 matmul on AVX-512 VNNI: vpdpbusd multiplies unsigned by signed bytes, so the weights go in as
// w + 128 (one xor per 64 weights, shared by every row of the tile) and 128 * sum(x) comes off at the end.
// NOTE: compiled with -mavx512vnni (src/backend/cpu/CMakeLists.txt); the backend calls it only when the CPU has it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/i4dot_avx512.h"

namespace {

struct I8Dot {
  static constexpr int64_t kBytes = 64;
  static constexpr int32_t kBias = 128;
  static constexpr int kGemvNr = 4, kGemmMr = 4, kGemmNr = 4;
  static constexpr const char* kName = "avx512 vnni";
  using Acc = __m512i;
  using W = __m512i;
  using X = __m512i;
  static Acc zero() { return _mm512_setzero_si512(); }
  static W load_w(const int8_t* p) { return _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(static_cast<char>(0x80))); }
  static X load_x(const int8_t* p) { return _mm512_loadu_si512(p); }
  static Acc dot(Acc acc, W w, X x) { return _mm512_dpbusd_epi32(acc, w, x); }
  static int32_t hsum(Acc v) { return _mm512_reduce_add_epi32(v); }
};

// W4A8: the unpacked codes (0..15) are vpdpbusd's unsigned operand as they are; x the signed one.
struct I4Dot : I4DotAvx512Base {
  static constexpr const char* kName = "avx512 vnni";
  static Acc dot2(Acc acc, W lo, X xe, W hi, X xo) { return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, lo, xe), hi, xo); }
};

}  // namespace

#include "backend/cpu/int8_matmul_impl.h"
#include "backend/cpu/w4a8_matmul_impl.h"

namespace {

using peregrine::cpu::Int8MatmulArgs;

// M = 1 prefetches each group's stream this many 64-byte chunks ahead (as the packed GGUF tiles' 4 blocks).
constexpr int64_t kI8PackAhead = 32;

// MR rows of x times NG groups of 16 weight rows: per chunk one load of 16 rows x 4 codes per group and one
// vpdpbusd per (row of x, group) with x's 4 codes broadcast; two integer chains per output at M = 1.
template <int MR, int NG>
void i8p_tile(const Int8MatmulArgs& a, int64_t i0, int64_t g0) {
  const int64_t k = a.k, chunks = k / 4, group_bytes = 16 * k;
  constexpr int kChains = MR == 1 ? 2 : 1;
  const uint8_t* wg[NG];
  for (int g = 0; g < NG; ++g) wg[g] = reinterpret_cast<const uint8_t*>(a.w) + (g0 + g) * group_bytes;
  __m512i acc[MR][NG][kChains];
  for (int i = 0; i < MR; ++i)
    for (int g = 0; g < NG; ++g)
      for (int c = 0; c < kChains; ++c) acc[i][g][c] = _mm512_setzero_si512();
  for (int64_t c = 0; c < chunks; ++c) {
    for (int g = 0; g < NG; ++g) {
      if constexpr (MR == 1) _mm_prefetch(reinterpret_cast<const char*>(wg[g] + (c + kI8PackAhead) * 64), _MM_HINT_T0);
      const __m512i v = _mm512_loadu_si512(wg[g] + c * 64);
      for (int i = 0; i < MR; ++i) {
        int32_t xv;
        std::memcpy(&xv, a.x + (i0 + i) * k + 4 * c, 4);
        acc[i][g][c & (kChains - 1)] = _mm512_dpbusd_epi32(acc[i][g][c & (kChains - 1)], v, _mm512_set1_epi32(xv));
      }
    }
  }
  // i8matmul's epilogue, 16 outputs at a time: float(sum - 128 * sum(x)) * x_scale * w_scale (+ bias).
  for (int g = 0; g < NG; ++g) {
    const int64_t j0 = (g0 + g) * 16, left = a.n - j0;
    const __mmask16 mask = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    __m512 ws;
    if (a.block_rows == 1) {
      ws = _mm512_maskz_loadu_ps(mask, a.w_scale + j0);
    } else {
      alignas(64) float buf[16] = {};
      for (int64_t r = 0; r < 16 && r < left; ++r) buf[r] = a.w_scale[(j0 + r) / a.block_rows];
      ws = _mm512_load_ps(buf);
    }
    const __m512 bias = a.bias ? _mm512_maskz_loadu_ps(mask, a.bias + j0) : _mm512_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      __m512i s = acc[i][g][0];
      if constexpr (kChains == 2) s = _mm512_add_epi32(s, acc[i][g][1]);
      s = _mm512_sub_epi32(s, _mm512_set1_epi32(I8Dot::kBias * a.x_sum[i0 + i]));
      __m512 r = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(a.x_scale[i0 + i])), ws);
      if (a.bias) r = _mm512_add_ps(r, bias);
      _mm512_mask_storeu_ps(a.out + (i0 + i) * a.n + j0, mask, r);
    }
  }
}

template <int MR, int NG>
void i8p_tile_g(int ng, const Int8MatmulArgs& a, int64_t i0, int64_t g0) {
  if (ng == NG) return i8p_tile<MR, NG>(a, i0, g0);
  if constexpr (NG > 1) return i8p_tile_g<MR, NG - 1>(ng, a, i0, g0);
}
template <int MR, int NG>
void i8p_tile_mg(int mr, int ng, const Int8MatmulArgs& a, int64_t i0, int64_t g0) {
  if (mr == MR) return i8p_tile_g<MR, NG>(ng, a, i0, g0);
  if constexpr (MR > 1) return i8p_tile_mg<MR - 1, NG>(mr, ng, a, i0, g0);
}

// M = 1: four groups' streams at a time. Otherwise panels of groups (about 256 KiB, in L2) reused by every tile
// of 4 rows of x times 2 groups.
void i8p_matmul(const Int8MatmulArgs& a, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  if (m0 >= m1 || g0 >= g1) return;
  if (m1 - m0 == 1) {
    constexpr int kNg = 4;
    for (int64_t g = g0; g < g1; g += kNg) i8p_tile_g<1, kNg>(static_cast<int>(i8_min(kNg, g1 - g)), a, m0, g);
    return;
  }
  constexpr int kMr = 4, kNg = 2;
  const int64_t panel = i8_max(kNg, (int64_t{256} << 10) / (16 * a.k) / kNg * kNg);
  for (int64_t gb = g0; gb < g1; gb += panel) {
    const int64_t gb_end = i8_min(g1, gb + panel);
    for (int64_t i = m0; i < m1; i += kMr) {
      const int mr = static_cast<int>(i8_min(kMr, m1 - i));
      for (int64_t g = gb; g < gb_end; g += kNg)
        i8p_tile_mg<kMr, kNg>(mr, static_cast<int>(i8_min(kNg, gb_end - g)), a, i, g);
    }
  }
}

}  // namespace

namespace peregrine::cpu {

Int8MatmulFn avx512vnni_i8matmul() { return i8matmul_kernel; }
Int8PackedFn avx512vnni_i8packed() { return i8p_matmul; }
W4A8Kernel avx512vnni_w4a8() { return w4a8_kernel_info(); }

}  // namespace peregrine::cpu
