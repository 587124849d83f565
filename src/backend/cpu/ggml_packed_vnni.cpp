// The packed GGUF kernels (ggml_packed.h) on AVX-512 F/BW/VL + VNNI: 16 weight rows in the int32 lanes of one
// vector, x's codes broadcast 4 at a time into vpdpbusd, one FMA per block for 16 outputs. A tile is MR rows of x
// times NG groups of 16 weight rows; every weight vector is loaded and unpacked once per tile.
// NOTE: compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the function pointer escapes it.
// GCC 12 flags the undefined passthrough operand inside its own AVX-512 intrinsics (as ggml_kernels_vnni.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/ggml_packed.h"
#include "backend/cpu/ggml_packed_tiles.h"

namespace {

using peregrine::GgmlType;
using peregrine::cpu::GgmlPackedArgs;
namespace packed = peregrine::cpu::packed;

inline int64_t pmin(int64_t a, int64_t b) { return a < b ? a : b; }

// 4 int8 codes of x as one int32, in every lane.
inline __m512i bx(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
inline __m512 f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i load(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline __m512i u8x16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// A tile's start: the first byte of each of its NG groups, and zero accumulators.
template <int MR, int NG>
void start_tile(const GgmlPackedArgs& a, int64_t g0, const uint8_t* (&wg)[NG], __m512 (&acc)[MR][NG]) {
  for (int g = 0; g < NG; ++g) wg[g] = a.w + (g0 + g) * a.group_bytes;
  for (int i = 0; i < MR; ++i)
    for (int g = 0; g < NG; ++g) acc[i][g] = _mm512_setzero_ps();
}

template <int MR, int NG>
void store(const GgmlPackedArgs& a, const __m512 (&acc)[MR][NG], int64_t i0, int64_t g0) {
  for (int g = 0; g < NG; ++g) {
    const int64_t j0 = (g0 + g) * 16, left = a.n - j0;
    const __mmask16 mask = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    const __m512 bias = a.bias ? _mm512_maskz_loadu_ps(mask, a.bias + j0) : _mm512_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      const __m512 r = a.bias ? _mm512_add_ps(acc[i][g], bias) : acc[i][g];
      _mm512_mask_storeu_ps(a.out + (i0 + i) * a.n + j0, mask, r);
    }
  }
}

// The 64-bit mask of high bits at p (bit 4r + i: row r, value i of a chunk).
inline __mmask64 mask64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return _cvtu64_mask64(v);
}

// M = 1 prefetches each group's blocks this many ahead: the four streams' misses go out before the loads that need
// them (this Zen 5 VM, 2 threads, ops_bench N 8192 / 128256 x K 2048: Q4_0 29-32 -> 33-37 GB/s, Q8_0 34-43 ->
// 41-45; 2 / 8 / 16 ahead measured no better).
constexpr int64_t kPrefetchBlocks32 = 4;

// The 32-value types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): per block, iacc = -offset * sum(x block) + sum of u8 codes
// times x codes, then one FMA (and, with a min, a second: m * dx * sum(x block)).
template <GgmlType T, int MR, int NG>
void tile_32(const GgmlPackedArgs& a, int64_t i0, int64_t g0) {
  constexpr peregrine::cpu::GgmlPacked32 kF = peregrine::cpu::ggml_packed_32(T);
  constexpr bool kQ8 = T == GgmlType::kQ8_0, kMin = kF.has_min, kHigh = kF.has_high;
  constexpr int kChunks = kF.chunks;
  constexpr int64_t kBlock = kF.block, kCodesAt = kF.codes_at, kMasksAt = kF.masks_at;
  constexpr int32_t kOffset = kF.offset;
  // M = 1 without high bits: the high nibbles in place (16 x code, exact), their chain shifted back per block.
  constexpr bool kInPlace = MR == 1 && !kQ8 && !kHigh;
  const int64_t nb = a.k / 32, k = a.k, xs_stride = a.k / 16;
  const __m512i m4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(0x10);
  const uint8_t* wg[NG];
  __m512 acc[MR][NG];
  start_tile<MR, NG>(a, g0, wg, acc);
  for (int64_t b = 0; b < nb; ++b) {
    // Two integer chains per output at M = 1 (the low and the high half of the block), one otherwise.
    constexpr int kChains = MR == 1 ? 2 : 1;
    __m512i iacc[MR][NG][kChains];
    for (int i = 0; i < MR; ++i) {
      const int16_t* s = a.xs + (i0 + i) * xs_stride + 2 * b;
      const __m512i init = kOffset ? _mm512_set1_epi32(-kOffset * (static_cast<int32_t>(s[0]) + s[1]))
                                   : _mm512_setzero_si512();
      for (int g = 0; g < NG; ++g) {
        iacc[i][g][0] = init;
        if constexpr (kChains == 2) iacc[i][g][1] = _mm512_setzero_si512();
      }
    }
    for (int c = 0; c < kChunks; ++c) {
      for (int g = 0; g < NG; ++g) {
        const uint8_t* blk = wg[g] + b * kBlock;
        const __m512i v = load(blk + kCodesAt + 64 * c);
        if constexpr (kQ8) {
          for (int i = 0; i < MR; ++i) {
            const int8_t* xr = a.xq + (i0 + i) * k + 32 * b;
            iacc[i][g][c & (kChains - 1)] = _mm512_dpbusd_epi32(iacc[i][g][c & (kChains - 1)], v, bx(xr + 4 * c));
          }
        } else {
          __m512i lo = _mm512_and_si512(v, m4);
          __m512i hi = kInPlace ? _mm512_andnot_si512(m4, v) : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          if constexpr (kHigh) {
            lo = _mm512_mask_add_epi8(lo, mask64(blk + kMasksAt + 16 * c), lo, b16);
            hi = _mm512_mask_add_epi8(hi, mask64(blk + kMasksAt + 16 * c + 8), hi, b16);
          }
          for (int i = 0; i < MR; ++i) {
            const int8_t* xr = a.xq + (i0 + i) * k + 32 * b;
            iacc[i][g][0] = _mm512_dpbusd_epi32(iacc[i][g][0], lo, bx(xr + 4 * c));
            iacc[i][g][kChains - 1] = _mm512_dpbusd_epi32(iacc[i][g][kChains - 1], hi, bx(xr + 16 + 4 * c));
          }
        }
      }
    }
    for (int g = 0; g < NG; ++g) {
      if constexpr (MR == 1) {  // the stream's block kPrefetchBlocks32 ahead (past the group's end: a no-op)
        const char* ahead = reinterpret_cast<const char*>(wg[g] + (b + kPrefetchBlocks32) * kBlock);
        for (int64_t line = 0; line < kBlock; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
      }
      const __m512 d = f16x16(wg[g] + b * kBlock);
      for (int i = 0; i < MR; ++i) {
        __m512i s = iacc[i][g][0];
        if constexpr (kChains == 2) s = _mm512_add_epi32(s, kInPlace ? _mm512_srai_epi32(iacc[i][g][1], 4) : iacc[i][g][1]);
        const float dx = a.xd[(i0 + i) * nb + b];
        acc[i][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[i][g]);
        if constexpr (kMin) {
          const int16_t* xs = a.xs + (i0 + i) * xs_stride + 2 * b;
          const float sum = static_cast<float>(static_cast<int32_t>(xs[0]) + xs[1]);
          acc[i][g] = _mm512_fmadd_ps(f16x16(wg[g] + b * kBlock + 32), _mm512_set1_ps(dx * sum), acc[i][g]);
        }
      }
    }
  }
  store<MR, NG>(a, acc, i0, g0);
}

// Q4_K / Q5_K: per super-block, isum = sum over sub-blocks of scale * (codes . x), imin = sum of min * sum(x
// sub-block); acc = fma(f32(isum), d * dx, acc), then acc = fma(f32(imin), -(dmin * dx), acc).
template <bool kQ5, int MR, int NG>
void tile_k45(const GgmlPackedArgs& a, int64_t i0, int64_t g0) {
  constexpr int64_t kBlock = kQ5 ? 2880 : 2368, kMasksAt = 2368;
  constexpr bool kInPlace = MR == 1 && !kQ5;
  const int64_t nb = a.k / 256, k = a.k, xs_stride = a.k / 16;
  const __m512i m4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(0x10);
  const uint8_t* wg[NG];
  __m512 acc[MR][NG];
  start_tile<MR, NG>(a, g0, wg, acc);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i isum[MR][NG];
    for (int i = 0; i < MR; ++i)
      for (int g = 0; g < NG; ++g) isum[i][g] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      __m512i alo[MR][NG], ahi[MR][NG];
      for (int i = 0; i < MR; ++i)
        for (int g = 0; g < NG; ++g) alo[i][g] = ahi[i][g] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        for (int g = 0; g < NG; ++g) {
          const uint8_t* blk = wg[g] + b * kBlock;
          const __m512i v = load(blk + 320 + 512 * j + 64 * c);
          // M = 1 (Q4_K): the high nibbles in place (16 x code), shifted back once per sub-block below.
          __m512i lo = _mm512_and_si512(v, m4);
          __m512i hi = kInPlace ? _mm512_andnot_si512(m4, v) : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          if constexpr (kQ5) {
            lo = _mm512_mask_add_epi8(lo, mask64(blk + kMasksAt + 128 * j + 16 * c), lo, b16);
            hi = _mm512_mask_add_epi8(hi, mask64(blk + kMasksAt + 128 * j + 16 * c + 8), hi, b16);
          }
          for (int i = 0; i < MR; ++i) {
            const int8_t* xr = a.xq + (i0 + i) * k + 256 * b + 64 * j;
            alo[i][g] = _mm512_dpbusd_epi32(alo[i][g], lo, bx(xr + 4 * c));
            ahi[i][g] = _mm512_dpbusd_epi32(ahi[i][g], hi, bx(xr + 32 + 4 * c));
          }
        }
      }
      for (int g = 0; g < NG; ++g) {
        const __m512i sl = u8x16(wg[g] + b * kBlock + 64 + 16 * (2 * j));
        const __m512i sh = u8x16(wg[g] + b * kBlock + 64 + 16 * (2 * j + 1));
        for (int i = 0; i < MR; ++i) {
          const __m512i h = kInPlace ? _mm512_srai_epi32(ahi[i][g], 4) : ahi[i][g];
          isum[i][g] = _mm512_add_epi32(isum[i][g], _mm512_add_epi32(_mm512_mullo_epi32(alo[i][g], sl),
                                                                     _mm512_mullo_epi32(h, sh)));
        }
      }
    }
    for (int g = 0; g < NG; ++g) {
      const __m512 d = f16x16(wg[g] + b * kBlock), dmin = f16x16(wg[g] + b * kBlock + 32);
      for (int i = 0; i < MR; ++i) {
        const int16_t* s = a.xs + (i0 + i) * xs_stride + 16 * b;
        __m512i imin = _mm512_setzero_si512();
        for (int sb = 0; sb < 8; ++sb)
          imin = _mm512_add_epi32(imin, _mm512_mullo_epi32(u8x16(wg[g] + b * kBlock + 192 + 16 * sb),
                                                           _mm512_set1_epi32(static_cast<int32_t>(s[2 * sb]) + s[2 * sb + 1])));
        const float dx = a.xd[(i0 + i) * nb + b];
        acc[i][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][g]), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[i][g]);
        acc[i][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, _mm512_set1_ps(-dx)), acc[i][g]);
      }
    }
  }
  store<MR, NG>(a, acc, i0, g0);
}

// Q6_K: per 16-value sub-block, sa = -32 * sum(x sub-block) + codes . x (the codes as u8 0..63), times the
// sub-block's int8 scale into isum; acc = fma(f32(isum), d * dx, acc) per super-block. Step (h, c) holds values
// 128h + 32t + 4c .. +3 for t = 0..3: q_t = S_t & 63 for t < 3, and q_3 from the top two bits of S0, S1, S2.
template <int MR, int NG>
void tile_q6_k(const GgmlPackedArgs& a, int64_t i0, int64_t g0) {
  constexpr int64_t kBlock = 3360;
  const int64_t nb = a.k / 256, k = a.k, xs_stride = a.k / 16;
  const __m512i m4 = _mm512_set1_epi8(0x0f), m3f = _mm512_set1_epi8(0x3f), m03 = _mm512_set1_epi8(0x03);
  const uint8_t* wg[NG];
  __m512 acc[MR][NG];
  start_tile<MR, NG>(a, g0, wg, acc);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i isum[MR][NG];
    for (int i = 0; i < MR; ++i)
      for (int g = 0; g < NG; ++g) isum[i][g] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h)
      for (int cc = 0; cc < 2; ++cc)
        for (int t = 0; t < 4; ++t) {
          const int sub = 8 * h + 2 * t + cc;
          __m512i sa[MR][NG];
          for (int i = 0; i < MR; ++i) {
            const __m512i init = _mm512_set1_epi32(-32 * static_cast<int32_t>(a.xs[(i0 + i) * xs_stride + 16 * b + sub]));
            for (int g = 0; g < NG; ++g) sa[i][g] = init;
          }
          for (int c4 = 0; c4 < 4; ++c4) {
            const int c = 4 * cc + c4;
            for (int g = 0; g < NG; ++g) {
              const uint8_t* step = wg[g] + b * kBlock + 288 + 768 * (2 * h + cc) + 64 * c4;
              __m512i code;
              if (t < 3) {
                code = _mm512_and_si512(load(step + 256 * t), m3f);
              } else {  // bits 0-1 from S0 >> 6, 2-3 from S1 >> 4, 4-5 from S2 >> 2 ((a & c) | (b & ~c) = 0xe4)
                const __m512i u = _mm512_ternarylogic_epi32(_mm512_srli_epi16(load(step), 6),
                                                            _mm512_srli_epi16(load(step + 256), 4), m03, 0xe4);
                code = _mm512_and_si512(
                    _mm512_ternarylogic_epi32(u, _mm512_srli_epi16(load(step + 512), 2), m4, 0xe4), m3f);
              }
              for (int i = 0; i < MR; ++i) {
                const int8_t* xr = a.xq + (i0 + i) * k + 256 * b + 128 * h + 32 * t + 4 * c;
                sa[i][g] = _mm512_dpbusd_epi32(sa[i][g], code, bx(xr));
              }
            }
          }
          for (int g = 0; g < NG; ++g) {
            const __m512i sc = _mm512_cvtepi8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(wg[g] + b * kBlock + 32 + 16 * sub)));
            for (int i = 0; i < MR; ++i) isum[i][g] = _mm512_add_epi32(isum[i][g], _mm512_mullo_epi32(sa[i][g], sc));
          }
        }
    for (int g = 0; g < NG; ++g) {
      const __m512 d = f16x16(wg[g] + b * kBlock);
      for (int i = 0; i < MR; ++i) {
        const float dx = a.xd[(i0 + i) * nb + b];
        acc[i][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][g]), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[i][g]);
      }
    }
  }
  store<MR, NG>(a, acc, i0, g0);
}

// The TU's kernels for ggml_packed_tiles.h.
struct Kernels {
  template <GgmlType T, int MR, int NG>
  static void tile(const GgmlPackedArgs& a, int64_t i0, int64_t g0) {
    if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) tile_k45<T == GgmlType::kQ5_K, MR, NG>(a, i0, g0);
    else if constexpr (T == GgmlType::kQ6_K) tile_q6_k<MR, NG>(a, i0, g0);
    else tile_32<T, MR, NG>(a, i0, g0);
  }

  template <GgmlType T>
  static void matmul(const GgmlPackedArgs& a, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
    if (m1 - m0 == 1) {
      constexpr int kNg = 4;  // four streams of weight rows, eight independent integer chains
      for (int64_t g = g0; g < g1; g += kNg)
        packed::tile_n<Kernels, T, 1, kNg>(static_cast<int>(pmin(kNg, g1 - g)), a, m0, g);
      return;
    }
    constexpr bool kSuper = T == GgmlType::kQ4_K || T == GgmlType::kQ5_K || T == GgmlType::kQ6_K;
    constexpr int kMr = T == GgmlType::kQ6_K ? 8 : 4, kNg = kSuper ? 1 : 2;  // Q6_K: 8 rows share each unpacked code vector
    // Panels of groups (about 256 KiB of blocks, in L2) reused by every row tile of x.
    const int64_t panel = std::max<int64_t>(kNg, (int64_t{256} << 10) / a.group_bytes / kNg * kNg);
    for (int64_t gb = g0; gb < g1; gb += panel) {
      const int64_t gb_end = pmin(g1, gb + panel);
      for (int64_t i = m0; i < m1; i += kMr) {
        const int mr = static_cast<int>(pmin(kMr, m1 - i));
        for (int64_t g = gb; g < gb_end; g += kNg)
          packed::tile_mn<Kernels, T, kMr, kNg>(mr, static_cast<int>(pmin(kNg, gb_end - g)), a, i, g);
      }
    }
  }
};

}  // namespace

namespace peregrine::cpu {

GgmlPackedMatmulFn ggml_vnni_packed_matmul() { return packed::matmul_by_type<Kernels>; }

}  // namespace peregrine::cpu
