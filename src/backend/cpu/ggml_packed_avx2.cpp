// The packed GGUF kernels (ggml_packed.h) on AVX2 + FMA + F16C: the AVX-512 VNNI layout read as two "slabs" of 8
// rows per group of 16 (a 64-byte code vector is [rows 0-7 | rows 8-15], 32 bytes each; the f16 scales likewise),
// so one 256-bit vector holds 8 outputs, one int32 lane per weight row, and a block's integer sum, its int->f32
// convert and its FMA with the scales cover 8 rows at once, with no horizontal sum.
// AVX2 has no vpdpbusd: u8 x s8 products go through vpmaddubsw (pairs summed into int16, saturating) and
// vpmaddwd (int16 pairs into int32). The int16 sums are kept below 2^15 by construction, so nothing saturates:
//   4-bit codes (0..15) x |x| <= 127: a pair <= 3,810; 8 of them (a Q4_0 block, a Q4_K sub-block) <= 30,480;
//   5-bit codes (0..31): a pair <= 7,874, flushed every 4; 6-bit (Q6_K, 0..63): <= 16,002, flushed every 2;
//   Q8_0: the codes' sign moved onto x (|w| <= 128): a pair <= 32,512, flushed every step.
// vpmaddwd's second operand carries each row's sub-block scale (Q4_K / Q5_K / Q6_K) or ones.
// A tile is MR rows of x times NS slabs; every weight vector is loaded and unpacked once per tile, and every x
// broadcast serves all its slabs (the slab loop innermost). At M = 1 the slabs of four groups (K-quants: two) are
// taken together, each cache line of their streams read once.
// NOTE determinism: per output, each block's integer sum is exact (int32), then acc = fma(f32(isum), d_w * d_x,
// acc) block after block in k order (the types with a min: then the min term), then + bias — the same integers and
// the same float operations as the VNNI kernels, whatever M, the tile, or the split over groups / rows.
// NOTE: compiled with its own ISA flags (src/backend/cpu/CMakeLists.txt); only the function pointer escapes it.
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
inline __m256i bx(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline __m256 f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load8(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline __m256i ones16() { return _mm256_set1_epi16(1); }
// u8 codes times s8 x, pairs summed into int16.
inline __m256i mul_pairs(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }
inline __m256i bcast8(const uint8_t* p) { return _mm256_broadcastq_epi64(load8(p)); }
// 8 bytes (one per row of the slab) as int16 pairs (b, b) in each int32 lane: the second operand of vpmaddwd that
// multiplies both int16 of a lane by the row's scale. Signed: s8 bytes, sign-extended.
inline __m256i u8_dup16(const uint8_t* p) {
  const __m256i v = bcast8(p);
  const __m256i idx = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,  //
                                       4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
  return _mm256_shuffle_epi8(v, idx);
}
inline __m256i s8_dup16(const uint8_t* p) {
  const __m256i v = bcast8(p);
  const __m256i idx = _mm256_setr_epi8(-1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,  //
                                       -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7);
  return _mm256_srai_epi16(_mm256_shuffle_epi8(v, idx), 8);
}
// Bytes a[r], b[r] of two 8-byte rows of per-row values as the int16 pair (a[r], b[r]) of lane r (u8 or s8).
inline __m256i u8_pair16(const uint8_t* a, const uint8_t* b) {
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(load8(a), load8(b)));
}
inline __m256i s8_pair16(const uint8_t* a, const uint8_t* b) {
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(load8(a), load8(b)));
}
// Two int16 as one int32 lane value, in every lane (the x-side operand of a pair above).
inline __m256i x_pair(int32_t lo, int32_t hi) {
  return _mm256_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(hi) << 16) | (static_cast<uint32_t>(lo) & 0xffffu)));
}
// Byte j = 0x10 where bit j of bits is set, else 0 (the fifth bit of the Q5 codes).
inline __m256i bit4_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// A tile's slabs: slab s (global index) is half s % 2 of group s / 2; its bytes in a block start at
// group base + 32 * half within each 64-byte vector, and its 8 f16 scales at + 16 * half.
template <int NS>
struct Slabs {
  const uint8_t* base[NS];  // the group's first byte
  int half[NS];
};
template <int NS>
Slabs<NS> slabs_of(const GgmlPackedArgs& a, int64_t s0) {
  Slabs<NS> s;
  for (int j = 0; j < NS; ++j) {
    s.base[j] = a.w + ((s0 + j) / 2) * a.group_bytes;
    s.half[j] = static_cast<int>((s0 + j) % 2);
  }
  return s;
}

template <int MR, int NS>
void zero_acc(__m256 (&acc)[MR][NS]) {
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NS; ++j) acc[i][j] = _mm256_setzero_ps();
}

template <int MR, int NS>
void store(const GgmlPackedArgs& a, const __m256 (&acc)[MR][NS], int64_t i0, int64_t s0) {
  for (int j = 0; j < NS; ++j) {
    const int64_t j0 = (s0 + j) * 8, left = a.n - j0;
    if (left <= 0) continue;
    alignas(32) float tmp[8];
    const __m256 bias = a.bias && left >= 8 ? _mm256_loadu_ps(a.bias + j0) : _mm256_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      float* o = a.out + (i0 + i) * a.n + j0;
      if (left >= 8) {
        _mm256_storeu_ps(o, a.bias ? _mm256_add_ps(acc[i][j], bias) : acc[i][j]);
      } else {
        _mm256_store_ps(tmp, acc[i][j]);
        for (int64_t r = 0; r < left; ++r) o[r] = a.bias ? tmp[r] + a.bias[j0 + r] : tmp[r];
      }
    }
  }
}

// The 32-value types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): per block, iacc = -offset * sum(x block) + sum of codes times
// x codes, then one FMA (and, with a min, a second: m * dx * sum(x block)). Each x broadcast serves every slab of
// the tile (the slab loop innermost).
template <GgmlType T, int MR, int NS>
void tile_32(const GgmlPackedArgs& a, int64_t i0, int64_t s0) {
  constexpr peregrine::cpu::GgmlPacked32 kF = peregrine::cpu::ggml_packed_32(T);
  constexpr bool kQ8 = T == GgmlType::kQ8_0, kMin = kF.has_min, kHigh = kF.has_high;
  constexpr int kChunks = kF.chunks;
  constexpr int64_t kBlock = kF.block, kCodesAt = kF.codes_at, kMasksAt = kF.masks_at;
  // Q8_0's codes are stored as w ^ 0x80; the sign trick takes w itself, so it has no offset here.
  constexpr int32_t kOffset = kQ8 ? 0 : kF.offset;
  const int64_t nb = a.k / 32, k = a.k, xs_stride = a.k / 16;
  const __m256i m4 = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const Slabs<NS> sl = slabs_of<NS>(a, s0);
  __m256 acc[MR][NS];
  zero_acc(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk[NS];
    for (int j = 0; j < NS; ++j) blk[j] = sl.base[j] + b * kBlock + 32 * sl.half[j];  // this slab's code bytes
    const int8_t* xr[MR];
    for (int i = 0; i < MR; ++i) xr[i] = a.xq + (i0 + i) * k + 32 * b;
    __m256i iacc[MR][NS];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NS; ++j) iacc[i][j] = _mm256_setzero_si256();
    if constexpr (kQ8) {
      for (int c = 0; c < kChunks; ++c) {
        __m256i xb[MR];
        for (int i = 0; i < MR; ++i) xb[i] = bx(xr[i] + 4 * c);
        for (int j = 0; j < NS; ++j) {
          const __m256i w = _mm256_xor_si256(load(blk[j] + kCodesAt + 64 * c), flip);
          const __m256i aw = _mm256_abs_epi8(w);
          for (int i = 0; i < MR; ++i)
            iacc[i][j] = _mm256_add_epi32(
                iacc[i][j], _mm256_madd_epi16(mul_pairs(aw, _mm256_sign_epi8(xb[i], w)), ones16()));
        }
      }
    } else {
      __m256i p16[MR][NS];
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NS; ++j) p16[i][j] = _mm256_setzero_si256();
      for (int c = 0; c < kChunks; ++c) {
        __m256i xl[MR], xh[MR];
        for (int i = 0; i < MR; ++i) {
          xl[i] = bx(xr[i] + 4 * c);
          xh[i] = bx(xr[i] + 16 + 4 * c);
        }
        for (int j = 0; j < NS; ++j) {
          const __m256i v = load(blk[j] + kCodesAt + 64 * c);
          __m256i lo = _mm256_and_si256(v, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (kHigh) {
            const uint8_t* mk = blk[j] - 28 * sl.half[j] + kMasksAt + 16 * c;  // the masks: 4 bytes per half
            lo = _mm256_or_si256(lo, bit4_bytes(load_u32(mk)));
            hi = _mm256_or_si256(hi, bit4_bytes(load_u32(mk + 8)));
          }
          for (int i = 0; i < MR; ++i)
            p16[i][j] = _mm256_add_epi16(p16[i][j], _mm256_add_epi16(mul_pairs(lo, xl[i]), mul_pairs(hi, xh[i])));
        }
        if (kHigh && c == 1) {  // 5-bit codes: flush every 4 products
          for (int i = 0; i < MR; ++i)
            for (int j = 0; j < NS; ++j) {
              iacc[i][j] = _mm256_madd_epi16(p16[i][j], ones16());
              p16[i][j] = _mm256_setzero_si256();
            }
        }
      }
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NS; ++j) iacc[i][j] = _mm256_add_epi32(iacc[i][j], _mm256_madd_epi16(p16[i][j], ones16()));
    }
    for (int i = 0; i < MR; ++i) {
      const float dx = a.xd[(i0 + i) * nb + b];
      const int16_t* xs = a.xs + (i0 + i) * xs_stride + 2 * b;
      const int32_t xsum = static_cast<int32_t>(xs[0]) + xs[1];
      for (int j = 0; j < NS; ++j) {
        const uint8_t* head = sl.base[j] + b * kBlock + 16 * sl.half[j];  // this slab's 8 f16 scales
        __m256i s = iacc[i][j];
        if constexpr (kOffset != 0) s = _mm256_add_epi32(s, _mm256_set1_epi32(-kOffset * xsum));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(f16x8(head), _mm256_set1_ps(dx)), acc[i][j]);
        if constexpr (kMin)
          acc[i][j] = _mm256_fmadd_ps(f16x8(head + 32), _mm256_set1_ps(dx * static_cast<float>(xsum)), acc[i][j]);
      }
    }
  }
  store<MR, NS>(a, acc, i0, s0);
}

// Q4_K / Q5_K: per super-block, isum = sum over sub-blocks of scale * (codes . x), imin = sum of min * sum(x
// sub-block); acc = fma(f32(isum), d * dx, acc), then acc = fma(f32(imin), -(dmin * dx), acc).
template <bool kQ5, int MR, int NS>
void tile_k45(const GgmlPackedArgs& a, int64_t i0, int64_t s0) {
  constexpr int64_t kBlock = kQ5 ? 2880 : 2368, kMasksAt = 2368;
  const int64_t nb = a.k / 256, k = a.k, xs_stride = a.k / 16;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const Slabs<NS> sl = slabs_of<NS>(a, s0);
  __m256 acc[MR][NS];
  zero_acc(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk[NS];
    for (int j = 0; j < NS; ++j) blk[j] = sl.base[j] + b * kBlock;
    __m256i isum[MR][NS];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NS; ++j) isum[i][j] = _mm256_setzero_si256();
    for (int jj = 0; jj < 4; ++jj) {
      __m256i plo[MR][NS], phi[MR][NS];
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NS; ++j) plo[i][j] = phi[i][j] = _mm256_setzero_si256();
      // Flushed into isum with each row's sub-block scales (sub-blocks 2jj, 2jj + 1).
      auto flush = [&] {
        for (int j = 0; j < NS; ++j) {
          const __m256i sc_lo = u8_dup16(blk[j] + 64 + 16 * (2 * jj) + 8 * sl.half[j]);
          const __m256i sc_hi = u8_dup16(blk[j] + 64 + 16 * (2 * jj + 1) + 8 * sl.half[j]);
          for (int i = 0; i < MR; ++i) {
            isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_add_epi32(_mm256_madd_epi16(plo[i][j], sc_lo),
                                                                        _mm256_madd_epi16(phi[i][j], sc_hi)));
            plo[i][j] = phi[i][j] = _mm256_setzero_si256();
          }
        }
      };
      for (int c = 0; c < 8; ++c) {
        __m256i xl[MR], xh[MR];
        for (int i = 0; i < MR; ++i) {
          const int8_t* xr = a.xq + (i0 + i) * k + 256 * b + 64 * jj;
          xl[i] = bx(xr + 4 * c);
          xh[i] = bx(xr + 32 + 4 * c);
        }
        for (int j = 0; j < NS; ++j) {
          const __m256i v = load(blk[j] + 320 + 512 * jj + 64 * c + 32 * sl.half[j]);
          __m256i lo = _mm256_and_si256(v, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (kQ5) {
            const uint8_t* mk = blk[j] + kMasksAt + 128 * jj + 16 * c + 4 * sl.half[j];
            lo = _mm256_or_si256(lo, bit4_bytes(load_u32(mk)));
            hi = _mm256_or_si256(hi, bit4_bytes(load_u32(mk + 8)));
          }
          for (int i = 0; i < MR; ++i) {
            plo[i][j] = _mm256_add_epi16(plo[i][j], mul_pairs(lo, xl[i]));
            phi[i][j] = _mm256_add_epi16(phi[i][j], mul_pairs(hi, xh[i]));
          }
        }
        if (kQ5 && c == 3) flush();  // 5-bit codes: flush every 4 products
      }
      flush();
    }
    for (int i = 0; i < MR; ++i) {
      const int16_t* s = a.xs + (i0 + i) * xs_stride + 16 * b;
      __m256i xp[4];
      for (int p = 0; p < 4; ++p)
        xp[p] = x_pair(static_cast<int32_t>(s[4 * p]) + s[4 * p + 1], static_cast<int32_t>(s[4 * p + 2]) + s[4 * p + 3]);
      const float dx = a.xd[(i0 + i) * nb + b];
      for (int j = 0; j < NS; ++j) {
        const int hf = sl.half[j];
        __m256i imin = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p)
          imin = _mm256_add_epi32(imin, _mm256_madd_epi16(u8_pair16(blk[j] + 192 + 16 * (2 * p) + 8 * hf,
                                                                    blk[j] + 192 + 16 * (2 * p + 1) + 8 * hf), xp[p]));
        const __m256 d = f16x8(blk[j] + 16 * hf), dmin = f16x8(blk[j] + 32 + 16 * hf);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][j]), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc[i][j]);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, _mm256_set1_ps(-dx)), acc[i][j]);
      }
    }
  }
  store<MR, NS>(a, acc, i0, s0);
}

// Q6_K: per 16-value sub-block, (codes . x) times the sub-block's int8 scale into isum (the codes as u8 0..63),
// less 32 * the sum over sub-blocks of scale * sum(x sub-block); acc = fma(f32(isum), d * dx, acc) per super-block.
// Step (h, c) holds values 128h + 32t + 4c .. +3 for t = 0..3: q_t = S_t & 63 for t < 3, and q_3 from the top two
// bits of S0, S1, S2.
template <int MR, int NS>
void tile_q6_k(const GgmlPackedArgs& a, int64_t i0, int64_t s0) {
  constexpr int64_t kBlock = 3360;
  const int64_t nb = a.k / 256, k = a.k, xs_stride = a.k / 16;
  const __m256i m3f = _mm256_set1_epi8(0x3f), m03 = _mm256_set1_epi8(0x03), m0c = _mm256_set1_epi8(0x0c),
                m30 = _mm256_set1_epi8(0x30);
  const Slabs<NS> sl = slabs_of<NS>(a, s0);
  __m256 acc[MR][NS];
  zero_acc(acc);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk[NS];
    for (int j = 0; j < NS; ++j) blk[j] = sl.base[j] + b * kBlock;
    __m256i isum[MR][NS];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NS; ++j) isum[i][j] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h)
      for (int cc = 0; cc < 2; ++cc)
        for (int t = 0; t < 4; ++t) {
          const int sub = 8 * h + 2 * t + cc;
          __m256i sc[NS];
          for (int j = 0; j < NS; ++j) sc[j] = s8_dup16(blk[j] + 32 + 16 * sub + 8 * sl.half[j]);
          for (int c2 = 0; c2 < 2; ++c2) {  // two steps c4 = 2 * c2, 2 * c2 + 1 per flush (6-bit codes)
            __m256i p16[MR][NS];
            for (int i = 0; i < MR; ++i)
              for (int j = 0; j < NS; ++j) p16[i][j] = _mm256_setzero_si256();
            for (int c4 = 2 * c2; c4 < 2 * c2 + 2; ++c4) {
              __m256i xb[MR];
              for (int i = 0; i < MR; ++i)
                xb[i] = bx(a.xq + (i0 + i) * k + 256 * b + 128 * h + 32 * t + 4 * (4 * cc + c4));
              for (int j = 0; j < NS; ++j) {
                const uint8_t* step = blk[j] + 288 + 768 * (2 * h + cc) + 64 * c4 + 32 * sl.half[j];
                __m256i code;
                if (t < 3) {
                  code = _mm256_and_si256(load(step + 256 * t), m3f);
                } else {  // bits 0-1 from S0 >> 6, 2-3 from S1 >> 4, 4-5 from S2 >> 2
                  code = _mm256_or_si256(
                      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(load(step), 6), m03),
                                      _mm256_and_si256(_mm256_srli_epi16(load(step + 256), 4), m0c)),
                      _mm256_and_si256(_mm256_srli_epi16(load(step + 512), 2), m30));
                }
                for (int i = 0; i < MR; ++i) p16[i][j] = _mm256_add_epi16(p16[i][j], mul_pairs(code, xb[i]));
              }
            }
            for (int j = 0; j < NS; ++j)
              for (int i = 0; i < MR; ++i) isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(p16[i][j], sc[j]));
          }
        }
    for (int i = 0; i < MR; ++i) {
      // The codes' +32: isum -= 32 * sum over the 16 sub-blocks of scale * sum(x sub-block).
      const int16_t* s = a.xs + (i0 + i) * xs_stride + 16 * b;
      const float dx = a.xd[(i0 + i) * nb + b];
      for (int j = 0; j < NS; ++j) {
        const int hf = sl.half[j];
        __m256i ioff = _mm256_setzero_si256();
        for (int p = 0; p < 8; ++p) {
          const __m256i scp = s8_pair16(blk[j] + 32 + 16 * (2 * p) + 8 * hf, blk[j] + 32 + 16 * (2 * p + 1) + 8 * hf);
          ioff = _mm256_add_epi32(ioff, _mm256_madd_epi16(scp, x_pair(s[2 * p], s[2 * p + 1])));
        }
        const __m256i si = _mm256_sub_epi32(isum[i][j], _mm256_slli_epi32(ioff, 5));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(f16x8(blk[j] + 16 * hf), _mm256_set1_ps(dx)),
                                    acc[i][j]);
      }
    }
  }
  store<MR, NS>(a, acc, i0, s0);
}

// The TU's kernels for ggml_packed_tiles.h.
struct Kernels {
  template <GgmlType T, int MR, int NS>
  static void tile(const GgmlPackedArgs& a, int64_t i0, int64_t s0) {
    if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) tile_k45<T == GgmlType::kQ5_K, MR, NS>(a, i0, s0);
    else if constexpr (T == GgmlType::kQ6_K) tile_q6_k<MR, NS>(a, i0, s0);
    else tile_32<T, MR, NS>(a, i0, s0);
  }

  template <GgmlType T>
  static void matmul(const GgmlPackedArgs& a, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
    // Slabs of 8 rows; a group's padded slab past n (n <= 8 rows into a group) is skipped.
    const int64_t s0 = 2 * g0, s1 = pmin(2 * g1, (a.n + 7) / 8);
    if (m1 - m0 == 1) {
      // Both slabs of four groups (four sequential streams) for the 32-value types; of two for the K-quants, whose
      // larger per-slab work gains nothing from more streams (measured on a Zen 1 EPYC VM).
      constexpr bool kSuper = T == GgmlType::kQ4_K || T == GgmlType::kQ5_K || T == GgmlType::kQ6_K;
      constexpr int kNs = kSuper ? 4 : 8;
      for (int64_t s = s0; s < s1; s += kNs)
        packed::tile_n<Kernels, T, 1, kNs>(static_cast<int>(pmin(kNs, s1 - s)), a, m0, s);
      return;
    }
    // Panels of groups (about 128 KiB of blocks, in L2) reused by every row tile of x; one slab per tile, four
    // rows of x sharing each unpacked code vector.
    constexpr int kMr = 4;
    const int64_t panel = std::max<int64_t>(2, (int64_t{128} << 10) / a.group_bytes * 2);
    for (int64_t sb = s0; sb < s1; sb += panel) {
      const int64_t sb_end = pmin(s1, sb + panel);
      for (int64_t i = m0; i < m1; i += kMr) {
        const int mr = static_cast<int>(pmin(kMr, m1 - i));
        for (int64_t s = sb; s < sb_end; ++s) packed::tile_mn<Kernels, T, kMr, 1>(mr, 1, a, i, s);
      }
    }
  }
};

}  // namespace

namespace peregrine::cpu {

GgmlPackedMatmulFn ggml_avx2_packed_matmul() { return packed::matmul_by_type<Kernels>; }

}  // namespace peregrine::cpu
