#include "backend/cuda/skinny_gemm.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <utility>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ggml_matmul.cuh"
#include "backend/cuda/norm_sum.cuh"
#include "core/status.h"

namespace peregrine::cuda {
namespace {

constexpr int kWarps = 8;         // K is split over a block's warps, the same way for every M
constexpr int kChunk = 64;        // K per warp pass: four m16n8k16 steps
constexpr int kRowsPerTile = 16;  // weight rows per block (mma's M)
// The norm fusion's weights in shared memory: at most this many bytes (K values of x's dtype), beside the ~9 KB the
// kernel holds itself, within the 48 KB a launch has without opting in.
constexpr int64_t kSkinnyNormMaxBytes = 38 * 1024;

__host__ __device__ inline int64_t segment_tiles(int64_t n) {
  return (n + kRowsPerTile - 1) / kRowsPerTile;
}

// The K positions each lane holds are permuted, identically in w (A) and x (B), so that a lane's share of a
// 64-wide chunk is 16 consecutive elements (two 16-byte loads per row): lane (g, t) holds physical k = 16t..16t+15,
// and mma step i reads its words 2i and 2i+1 as the fragment's k = {2t, 2t+1} and {2t+8, 2t+9}. A sum over K does
// not care which k is called which, as long as both operands agree.
__device__ __forceinline__ uint32_t word(const uint4 (&v)[2], int i) {
  const uint4& h = v[i / 4];
  switch (i % 4) {
    case 0:
      return h.x;
    case 1:
      return h.y;
    case 2:
      return h.z;
    default:
      return h.w;
  }
}

// kInt4Fact / kUint8Fact: codes on the factored path (below), which takes 128-wide chunks (a lane's 32 codes: one
// 16-byte load per row for int4, two for uint8) where the others take 64.
// kInt4FactSym: kInt4Fact where no segment has zeros (the symmetric checkpoints: GPTQ sym, compressed-tensors sym),
// the midpoint 8 a compile-time constant (no zero loads, no per-chunk test of them), loads with 32-bit offsets and
// the chunk's group computed once per chunk (load_fact_piece; kInt4Fact divides 64-bit offsets per row), and for f16
// the high nibbles converted in place (biased_int4_pair): a quarter fewer PTX instructions a chunk (~281 -> ~206
// at bf16, M <= 8). kUint8FactSym: the same for uint8 codes without zeros (midpoint 128). PEREGRINE_SKINNY_SYM=0
// sends such codes to kInt4Fact / kUint8Fact (comparisons).
enum class Weights { kDense, kInt4, kUint8, kInt4Fact, kUint8Fact, kGgml, kW8, kInt4FactSym, kUint8FactSym };

template <Weights F> constexpr bool kSymF = F == Weights::kInt4FactSym || F == Weights::kUint8FactSym;
template <Weights F> constexpr bool kInt4F = F == Weights::kInt4Fact || F == Weights::kInt4FactSym;
template <Weights F> constexpr bool kU8F = F == Weights::kUint8Fact || F == Weights::kUint8FactSym;
template <Weights F> constexpr bool kFactored = kInt4F<F> || kU8F<F>;
template <Weights F> constexpr int kChunkOf = kFactored<F> ? 128 : kChunk;

// One weight row's share of a 64-wide chunk for one lane (16 consecutive k from 16t), as loaded.
template <Weights F> struct RowPiece;
template <> struct RowPiece<Weights::kDense> { uint4 v[2]; };
template <> struct RowPiece<Weights::kInt4> { uint2 v; float scale, zero; };
template <> struct RowPiece<Weights::kUint8> { uint4 v; float scale, zero; };
template <> struct RowPiece<Weights::kInt4Fact> { uint4 v; float scale, zero; };
template <> struct RowPiece<Weights::kInt4FactSym> { uint4 v; float scale, zero; };
template <> struct RowPiece<Weights::kUint8Fact> { uint4 v[2]; float scale, zero; };
template <> struct RowPiece<Weights::kUint8FactSym> { uint4 v[2]; float scale, zero; };

template <typename T, Weights F>
__device__ __forceinline__ void load_piece(RowPiece<F>& r, const void* row, int64_t kk, int64_t k, bool in_k,
                                           const float* scales, const float* zeros, int64_t group_size) {
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  if constexpr (F == Weights::kDense) {
    const T* w = static_cast<const T*>(row);
#pragma unroll
    for (int h = 0; h < 2; ++h)  // K % 8 == 0: a 16-byte piece is all in or all out
      r.v[h] = in_k && kk + 8 * h < k ? __ldcs(reinterpret_cast<const uint4*>(w + kk + 8 * h)) : zero4;
  } else {
    static_assert(!kSymF<F>, "kInt4FactSym pieces: load_fact_piece");
    constexpr bool kI4 = F == Weights::kInt4 || F == Weights::kInt4Fact;  // else uint8 (midpoint 128)
    const uint8_t* codes = static_cast<const uint8_t*>(row);
    if constexpr (F == Weights::kInt4Fact) {
      r.v = in_k ? __ldcs(reinterpret_cast<const uint4*>(codes + kk / 2)) : zero4;
    } else if constexpr (F == Weights::kUint8Fact) {
#pragma unroll
      for (int h = 0; h < 2; ++h) r.v[h] = in_k ? __ldcs(reinterpret_cast<const uint4*>(codes + kk + 16 * h)) : zero4;
    } else if constexpr (kI4) {
      r.v = in_k ? __ldcs(reinterpret_cast<const uint2*>(codes + kk / 2)) : make_uint2(0, 0);
    } else {
      r.v = in_k ? __ldcs(reinterpret_cast<const uint4*>(codes + kk)) : zero4;
    }
    const int64_t gi = in_k ? kk / group_size : 0;  // K % 16 == 0 and group_size % 16 == 0: one group per piece
    r.scale = in_k ? __ldg(scales + gi) : 0.0f;
    r.zero = zeros && in_k ? __ldg(zeros + gi) : (kI4 ? 8.0f : 128.0f);
  }
}

// A kInt4FactSym / kUint8FactSym piece (K % 128 == 0 on the factored path, so a chunk inside K is whole): the lane's
// codes at kk (its first k) of the row whose codes start at `codes`, and group gi's scale (zero: the midpoint); zeros
// where the chunk is past K (in false). 32-bit offsets (a row's codes and groups fit), the group computed once per
// chunk by the caller.
template <Weights F>
__device__ __forceinline__ void load_fact_piece(RowPiece<F>& r, const uint8_t* codes, uint32_t kk, uint32_t gi, bool in,
                                                const float* scales) {
  static_assert(kSymF<F>);
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  if constexpr (kU8F<F>) {
#pragma unroll
    for (int h = 0; h < 2; ++h) r.v[h] = in ? __ldcs(reinterpret_cast<const uint4*>(codes + kk + 16 * h)) : zero4;
    r.zero = 128.0f;
  } else {
    r.v = in ? __ldcs(reinterpret_cast<const uint4*>(codes + kk / 2)) : zero4;
    r.zero = 8.0f;
  }
  r.scale = in ? __ldg(scales + gi) : 0.0f;
}

__device__ __forceinline__ uint32_t byte_of(uint32_t w, int b) { return (w >> (8 * b)) & 0xffu; }

// Word i (k = 2i, 2i + 1 of the piece) in mma's b16x2 form; quantized codes dequantized as launch_dequantize does.
template <typename T, Weights F>
__device__ __forceinline__ uint32_t piece_word(const RowPiece<F>& r, int i) {
  if constexpr (F == Weights::kDense) {
    return word(r.v, i);
  } else if constexpr (F == Weights::kInt4) {
    const uint32_t b = byte_of(i < 4 ? r.v.x : r.v.y, i % 4);
    return attn::pack2<T>((static_cast<float>(b & 0xfu) - r.zero) * r.scale,
                          (static_cast<float>(b >> 4) - r.zero) * r.scale);
  } else {
    const uint32_t w = i < 2 ? r.v.x : i < 4 ? r.v.y : i < 6 ? r.v.z : r.v.w;
    return attn::pack2<T>((static_cast<float>(byte_of(w, 2 * (i % 2))) - r.zero) * r.scale,
                          (static_cast<float>(byte_of(w, 2 * (i % 2) + 1)) - r.zero) * r.scale);
  }
}

// The factored int4 path (group_size a multiple of its 128-wide chunk, so one group per chunk): the codes go to
// the tensor cores as they are, and the group's zero and scale are applied to the chunk's sums afterwards:
//   sum_k (c_k - z) s x_k = s (sum_k c_k x_k - z sum_k x_k),
// with sum_k x_k from one more mma against an all-ones A. A code pair becomes a b16x2 word in two instructions
// (Marlin's trick): the nibbles at bits 0 and 16 of a 32-bit word OR-ed into the exponent of 128 (bf16) or 1024
// (f16), which a packed subtract removes exactly. The pairs this gives are (k_s, k_s+4) of each 8 codes, so x's
// words are paired the same way (byte permutes). Every value is exact until the f32 accumulation, so this path is
// more accurate than multiplying codes dequantized into x's dtype; its sum order, like the others', depends on K
// alone.
// Chunks ahead on the factored path at M <= 8 and M <= 16 (as many as 2 blocks' registers per SM hold without
// spilling).
constexpr int kFactU1 = 4, kFactU2 = 2;

template <typename T> struct CodeMagic;
template <> struct CodeMagic<bf16> {
  static constexpr uint32_t kBias = 0x43004300u;  // 128.0 in each half
  static constexpr uint32_t kOne = 0x3f803f80u;
  static constexpr uint32_t kSixteenth = 0x3d803d80u;  // 1 / 16
  static constexpr float kBiasF = 128.0f;
};
template <> struct CodeMagic<f16> {
  static constexpr uint32_t kBias = 0x64006400u;  // 1024.0 in each half
  static constexpr uint32_t kOne = 0x3c003c00u;
  static constexpr uint32_t kSixteenth = 0x2c002c00u;
  static constexpr float kBiasF = 1024.0f;
};

__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(r) : "r"(a), "r"(mask), "r"(bits));  // (a & mask) | bits
  return r;
}

// a * b + c on packed pairs of T, one rounding.
template <typename T> __device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  if constexpr (std::is_same_v<T, bf16>) {
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  } else {
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  }
  return r;
}

template <typename T> __device__ __forceinline__ uint32_t sub_bias(uint32_t v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return fma2<T>(v, CodeMagic<bf16>::kOne, 0xc300c300u);
  } else {
    uint32_t r;
    asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(v), "r"(CodeMagic<f16>::kBias));
    return r;
  }
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i % 4 == 0 ? v.x : i % 4 == 1 ? v.y : i % 4 == 2 ? v.z : v.w;
}

// Code pair word j (0..15) of a lane's 32 codes (k = 0..31 of its share), as exact values in T:
//   int4: (k 8h + s, k 8h + s + 4) for j = 4h + s (a 32-bit word's nibbles 0 and 4 after a shift by 4s);
//   uint8: (k 4m + s, k 4m + s + 2) for j = 2m + s (bytes 0 and 2 after a shift by 8s). In f16 a byte fits the
//   1024 trick whole; bf16 has 8 significant bits, so a byte goes as two words, its low nibble (part 0) and 16 x its
//   high nibble (part 1: (128 + h) x 16 - 2048, exact), whose products the same accumulator sums.
// int4 code pair word j (nibbles s and s + 4 of word j / 4, s = j % 4) before the bias comes off: the pair's bits
// moved to 0..3 and 16..19 (a shift by 4s) and OR-ed under the exponent, bias + c in each half (128 + c in bf16,
// 1024 + c in f16). On kInt4FactSym, f16's 10-bit mantissa also takes a nibble at bits 4..7 in place (Marlin's
// way), bias + 16 c, which a multiply by 1 / 16 in the same packed fma brings back exactly: there odd s needs no
// shift of its own, one shift (by 8) per 32-bit word instead of three. (bf16's 7-bit mantissa cannot: bit 7 is its
// exponent's.)
template <typename T, Weights F>
constexpr bool kHiNibbleInPlace = std::is_same_v<T, f16> && F == Weights::kInt4FactSym;
template <typename T, Weights F> __device__ __forceinline__ uint32_t biased_int4_pair(const RowPiece<F>& r, int j) {
  const uint32_t w = word_of(r.v, j / 4);
  if constexpr (kHiNibbleInPlace<T, F>)
    return lop3_and_or(w >> (j % 4 >= 2 ? 8 : 0), j % 2 ? 0x00f000f0u : 0x000f000fu, CodeMagic<T>::kBias);
  return lop3_and_or(w >> (4 * (j % 4)), 0x000f000fu, CodeMagic<T>::kBias);
}

// A biased pair (biased_int4_pair's word j) as c - z exactly: v * (1 or 1 / 16) + nz, with nz = -(bias + z), or
// -(bias / 16 + z) where the nibble stayed in place (fold_bias with hi = hi_pair).
template <typename T, Weights F> __device__ __forceinline__ bool hi_pair(int j) { return kHiNibbleInPlace<T, F> && j % 2; }
template <typename T, Weights F> __device__ __forceinline__ uint32_t unbias_int4_pair(uint32_t v, int j, uint32_t nz) {
  return fma2<T>(v, hi_pair<T, F>(j) ? CodeMagic<T>::kSixteenth : CodeMagic<T>::kOne, nz);
}

// -(bias + z) (hi false) or -(bias / 16 + z) (hi true) in both halves of a T pair: unbias_int4_pair's nz for zero z.
template <typename T> __device__ __forceinline__ uint32_t fold_bias(float z, bool hi) {
  const float v = -((hi ? CodeMagic<T>::kBiasF / 16.0f : CodeMagic<T>::kBiasF) + z);
  uint32_t w;
  if constexpr (std::is_same_v<T, bf16>) {
    const __nv_bfloat162 h = __float2bfloat162_rn(v);
    w = *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __float2half2_rn(v);
    w = *reinterpret_cast<const uint32_t*>(&h);
  }
  return w;
}

template <typename T, Weights F> __device__ __forceinline__ uint32_t code_pair(const RowPiece<F>& r, int j, int part) {
  if constexpr (F == Weights::kInt4FactSym) {
    return unbias_int4_pair<T, F>(biased_int4_pair<T, F>(r, j), j, fold_bias<T>(0.0f, hi_pair<T, F>(j)));  // c
  } else if constexpr (F == Weights::kInt4Fact) {
    return sub_bias<T>(biased_int4_pair<T, F>(r, j));
  } else {
    const uint32_t q = word_of(r.v[j / 8], (j / 2) % 4) >> (8 * (j % 2));
    if constexpr (std::is_same_v<T, f16>) {
      return sub_bias<T>(lop3_and_or(q, 0x00ff00ffu, CodeMagic<T>::kBias));
    } else if (part == 0) {
      return sub_bias<T>(lop3_and_or(q, 0x000f000fu, CodeMagic<T>::kBias));
    } else {  // 16 = 0x4180, -2048 = 0xc500
      return fma2<T>(lop3_and_or(q >> 4, 0x000f000fu, CodeMagic<T>::kBias), 0x41804180u, 0xc500c500u);
    }
  }
}
// Words per code pair: two for uint8 codes with bf16 x.
template <typename T, Weights F> constexpr int kParts = kU8F<F> && std::is_same_v<T, bf16> ? 2 : 1;

// x's 32 values of a lane's share (four 16-byte loads) paired as code_pair pairs the codes: word j.
template <Weights F> __device__ __forceinline__ uint32_t x_pair(const uint4 (&v)[4], int j) {
  if constexpr (kInt4F<F>) {  // (x 8h + s, x 8h + s + 4): words s / 2 and s / 2 + 2 of load h
    const uint4& h = v[j / 4];
    const int s = j % 4;
    return __byte_perm(s < 2 ? h.x : h.y, s < 2 ? h.z : h.w, s % 2 ? 0x7632 : 0x5410);
  } else {  // (x 4m + s, x 4m + s + 2): words 2m and 2m + 1 of the share
    const int m = j / 2;
    const uint4& h = v[m / 2];
    const uint32_t lo = m % 2 ? h.z : h.x, hi = m % 2 ? h.w : h.y;
    return __byte_perm(lo, hi, j % 2 ? 0x7632 : 0x5410);
  }
}

// One chunk (one group) of the factored path: the codes' and x's sums on the tensor cores, then the group's zero
// and scale: acc += scale * (sum c x - zero * sum x), for this lane's rows g (a) and g + 8 (b).
template <typename T, Weights F, int NT>
__device__ __forceinline__ void factored_chunk(float (&acc)[NT][4], const RowPiece<F>& a, const RowPiece<F>& b8,
                                               const uint4 (&bx)[NT][4]) {
  const uint32_t ones[4] = {CodeMagic<T>::kOne, CodeMagic<T>::kOne, CodeMagic<T>::kOne, CodeMagic<T>::kOne};
  float cs[NT][4], xs[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) cs[j][e] = xs[j][e] = 0.0f;
#pragma unroll
  for (int i = 0; i < kChunkOf<F> / 16; ++i) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint32_t x0w = x_pair<F>(bx[j], 2 * i), x1w = x_pair<F>(bx[j], 2 * i + 1);
#pragma unroll
      for (int part = 0; part < kParts<T, F>; ++part) {
        const uint32_t frag[4] = {code_pair<T, F>(a, 2 * i, part), code_pair<T, F>(b8, 2 * i, part),
                                  code_pair<T, F>(a, 2 * i + 1, part), code_pair<T, F>(b8, 2 * i + 1, part)};
        attn::mma16816<T>(cs[j], frag, x0w, x1w);
      }
      attn::mma16816<T>(xs[j], ones, x0w, x1w);
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    acc[j][0] = fmaf(a.scale, fmaf(-a.zero, xs[j][0], cs[j][0]), acc[j][0]);
    acc[j][1] = fmaf(a.scale, fmaf(-a.zero, xs[j][1], cs[j][1]), acc[j][1]);
    acc[j][2] = fmaf(b8.scale, fmaf(-b8.zero, xs[j][2], cs[j][2]), acc[j][2]);
    acc[j][3] = fmaf(b8.scale, fmaf(-b8.zero, xs[j][3], cs[j][3]), acc[j][3]);
  }
}

// The folded chunks' tensor-core part: pa(j) / pb(j) give code pair word j (code_pair's order) of rows g and g + 8
// as c - z exactly in T; the tensor cores sum (c - z) x in f32 and each row's scale is applied once.
template <typename T, Weights F, int NT, typename PairA, typename PairB>
__device__ __forceinline__ void folded_mma(float (&acc)[NT][4], float sa, float sb, const uint4 (&bx)[NT][4], PairA&& pa,
                                           PairB&& pb) {
  float cs[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) cs[j][e] = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t frag[4] = {pa(2 * i), pb(2 * i), pa(2 * i + 1), pb(2 * i + 1)};
#pragma unroll
    for (int j = 0; j < NT; ++j)
      attn::mma16816<T>(cs[j], frag, x_pair<F>(bx[j], 2 * i), x_pair<F>(bx[j], 2 * i + 1));
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    acc[j][0] = fmaf(sa, cs[j][0], acc[j][0]);
    acc[j][1] = fmaf(sa, cs[j][1], acc[j][1]);
    acc[j][2] = fmaf(sb, cs[j][2], acc[j][2]);
    acc[j][3] = fmaf(sb, cs[j][3], acc[j][3]);
  }
}

// The int4 factored chunk with the zero folded into the codes: (0x4300 | c) is 128 + c in bf16 (1024 + c in f16), and
// one packed subtract of 128 + z (1024 + z) leaves c - z exactly when z is an integer in [-128, 127]; then the
// tensor cores sum (c - z) x in f32 and the group's scale is applied once. Half the mma of factored_chunk (no sum of
// x) and no cancellation between sum c x and z sum x. (kInt4FactSym with f16: odd pairs as biased_int4_pair says.)
template <typename T, Weights F, int NT>
__device__ __forceinline__ void fold_chunk(float (&acc)[NT][4], const RowPiece<F>& a, const RowPiece<F>& b8,
                                           const uint4 (&bx)[NT][4]) {
  // Each row's two biases (hi_pair's words take the second); constants without zeros.
  const uint32_t za[2] = {fold_bias<T>(a.zero, false), fold_bias<T>(a.zero, kHiNibbleInPlace<T, F>)};
  const uint32_t zb[2] = {fold_bias<T>(b8.zero, false), fold_bias<T>(b8.zero, kHiNibbleInPlace<T, F>)};
  auto pair = [](const RowPiece<F>& r, int j, const uint32_t (&nz)[2]) {
    const uint32_t v = biased_int4_pair<T, F>(r, j);
    if constexpr (F == Weights::kInt4Fact && !std::is_same_v<T, bf16>) {  // f16: the packed add of -(1024 + z)
      uint32_t out;
      asm("add.f16x2 %0, %1, %2;\n" : "=r"(out) : "r"(v), "r"(nz[0]));
      return out;
    }
    return unbias_int4_pair<T, F>(v, j, nz[hi_pair<T, F>(j) ? 1 : 0]);
  };
  folded_mma<T, F, NT>(acc, a.scale, b8.scale, bx, [&](int j) { return pair(a, j, za); },
                       [&](int j) { return pair(b8, j, zb); });
}

// uint8 codes folded (kSym: z the midpoint 128): code pair word j (bytes 2 (j % 2) and 2 (j % 2) + 1 of the pair's
// word) as c - z exactly, from per-row constants c_hi, c_lo (fold_u8_consts). f16 (11 significant bits): (1024 + c)
// - (1024 + z), one packed fma. bf16 has 8 (c - z in [-256, 255] fits, 128 + c does not): the nibbles as 128 + l and
// 128 + h (OR-ed under the exponent), then 16 (128 + h) - 2176 = 16 h - 128 (- 2304: 16 h - 256 where z is the
// midpoint), plus 128 + l - z (128 + l): every step's result is an integer of at most 8 significant bits, so exact.
template <typename T, Weights F, bool kSym>
__device__ __forceinline__ uint32_t u8_fold_pair(const RowPiece<F>& r, int j, uint32_t c_hi, uint32_t c_lo) {
  const uint32_t q = word_of(r.v[j / 8], (j / 2) % 4) >> (8 * (j % 2));
  if constexpr (std::is_same_v<T, f16>) {
    return fma2<T>(lop3_and_or(q, 0x00ff00ffu, CodeMagic<T>::kBias), CodeMagic<T>::kOne, c_hi);
  } else {
    const uint32_t hi = fma2<T>(lop3_and_or(q >> 4, 0x000f000fu, CodeMagic<T>::kBias), 0x41804180u, c_hi);  // x 16
    uint32_t lo = lop3_and_or(q, 0x000f000fu, CodeMagic<T>::kBias);
    if constexpr (!kSym) lo = fma2<T>(lo, CodeMagic<T>::kOne, c_lo);
    return fma2<T>(hi, CodeMagic<T>::kOne, lo);
  }
}

// u8_fold_pair's constants for a row with zero z: f16 c_hi = -(1024 + z); bf16 c_hi = -2304 (midpoint) or -2176 and
// c_lo = -z.
template <typename T, bool kSym> __device__ __forceinline__ void fold_u8_consts(float z, uint32_t& c_hi, uint32_t& c_lo) {
  if constexpr (std::is_same_v<T, f16>) {
    c_hi = kSym ? 0xe480e480u : fold_bias<T>(z, false);  // -1152 = -(1024 + 128)
    c_lo = 0;
  } else if constexpr (kSym) {
    c_hi = 0xc510c510u, c_lo = 0;  // -2304
  } else {
    const __nv_bfloat162 h = __float2bfloat162_rn(-z);
    c_hi = 0xc508c508u, c_lo = *reinterpret_cast<const uint32_t*>(&h);  // -2176, -z
  }
}

// The uint8 factored chunk with the zero folded (z an integer in [0, 256]): one mma per 16 codes where
// factored_chunk takes three at bf16 (two words per pair and the sum of x) and two at f16.
template <typename T, Weights F, int NT, bool kSym>
__device__ __forceinline__ void fold_u8_chunk(float (&acc)[NT][4], const RowPiece<F>& a, const RowPiece<F>& b8,
                                              const uint4 (&bx)[NT][4]) {
  uint32_t ha, la, hb, lb;
  fold_u8_consts<T, kSym>(a.zero, ha, la);
  fold_u8_consts<T, kSym>(b8.zero, hb, lb);
  folded_mma<T, F, NT>(acc, a.scale, b8.scale, bx, [&](int j) { return u8_fold_pair<T, F, kSym>(a, j, ha, la); },
                       [&](int j) { return u8_fold_pair<T, F, kSym>(b8, j, hb, lb); });
}

// A factored chunk: folded where the launch allows it and every zero of the warp's rows is an integer in range
// (decided per chunk by the whole warp, from the data alone: never by M), else the zero's sums apart.
template <typename T, Weights F, int NT>
__device__ __forceinline__ void any_factored_chunk(float (&acc)[NT][4], const RowPiece<F>& a, const RowPiece<F>& b8,
                                                   const uint4 (&bx)[NT][4], bool fold_zeros) {
  if constexpr (F == Weights::kInt4FactSym) {  // every zero the midpoint: the fold unless the launch turns it off
    if (fold_zeros) return fold_chunk<T, F, NT>(acc, a, b8, bx);
  } else if constexpr (F == Weights::kInt4Fact) {
    auto ok = [](float z) { return z == rintf(z) && z >= -128.0f && z <= 127.0f; };
    if (__all_sync(0xffffffffu, fold_zeros && ok(a.zero) && ok(b8.zero))) return fold_chunk<T, F, NT>(acc, a, b8, bx);
  } else if constexpr (F == Weights::kUint8FactSym) {
    if (fold_zeros) return fold_u8_chunk<T, F, NT, true>(acc, a, b8, bx);
  } else if constexpr (F == Weights::kUint8Fact) {
    auto ok = [](float z) { return z == rintf(z) && z >= 0.0f && z <= 256.0f; };
    if (__all_sync(0xffffffffu, fold_zeros && ok(a.zero) && ok(b8.zero)))
      return fold_u8_chunk<T, F, NT, false>(acc, a, b8, bx);
  }
  factored_chunk<T, F, NT>(acc, a, b8, bx);
}

// This block's segment and 16-row tile (tile: the block's index in, the tile within its segment out); false past
// the last segment. (Fields are copied out one by one: a pointer into the parameters with a run-time index would
// move them to local memory.)
template <Weights F> __device__ __forceinline__ bool find_segment(const SkinnyGemmLaunch& p, int64_t& tile, SkinnySegment& seg) {
  bool found = false;
#pragma unroll
  for (int s = 0; s < kSkinnyMaxSegments; ++s) {
    if (!found && s < p.num_segments) {
      const int64_t tiles = segment_tiles(p.seg[s].n);
      if (tile < tiles) {
        found = true;
        seg.w = p.seg[s].w;
        seg.bias = p.seg[s].bias;
        seg.bias_dtype = p.seg[s].bias_dtype;
        seg.out = p.seg[s].out;
        seg.n = p.seg[s].n;
        if constexpr (F != Weights::kDense) {
          seg.scales = p.seg[s].scales;
          seg.zeros = p.seg[s].zeros;
          seg.groups = p.seg[s].groups;
          seg.group_size = p.seg[s].group_size;
        }
        if constexpr (F == Weights::kGgml) seg.meta = p.seg[s].meta;
        if constexpr (F == Weights::kW8) seg.block_rows = p.seg[s].block_rows;
      } else {
        tile -= tiles;
      }
    }
  }
  return found;
}

// The epilogues' last steps, shared by the skinny kernel's tiles (store_tile) and the 8-bit kernel's
// (store_w8a8_tile). v rounded to dtype t (bf16 / f16; f32 as it is), as a store and a load would give it back.
__device__ __forceinline__ float round_to(DType t, float v) {
  switch (t) {
    case DType::kBF16: return __bfloat162float(__float2bfloat16_rn(v));
    case DType::kF16: return __half2float(__float2half_rn(v));
    default: return v;
  }
}

// fn(r, col, row) for each of a tile's outputs a thread stores: tile row r (0..kRows-1, weight row n0 + r of n)
// and token col of M, consecutive threads on consecutive rows.
template <int kRows, int NT, typename Fn>
__device__ __forceinline__ void for_each_output(const SkinnyGemmLaunch& p, int64_t n0, int64_t n, Fn&& fn) {
  constexpr int kOutputs = kRows * 8 * NT;
  for (int o = threadIdx.x; o < kOutputs; o += kWarps * 32) {
    const int r = o % kRows, col = o / kRows;
    const int64_t row = n0 + r;
    if (col < p.m && row < n) fn(r, col, row);
  }
}

// One output from its product v (bias added): with the residual fusion round(residual + round(v)), then the store.
// as_out(v) is v as the output dtype holds it (the fusions write x's dtype).
template <typename Round>
__device__ __forceinline__ void store_output(const SkinnyGemmLaunch& p, void* out, int64_t n, int col, int64_t row,
                                             float v, Round&& as_out) {
  if (p.residual) v = as_out(v) + load_any(p.residual, p.out_dtype, col * n + row);
  store_any(out, p.out_dtype, col * n + row, v);
}

// A SiLU-mul pair's output from its gate and up products (biases added): round(silu(round(gate)) * round(up)), as
// activation.cu's silu_mul of the two stored products.
template <typename Round>
__device__ __forceinline__ void store_silu_pair(const SkinnyGemmLaunch& p, void* out, int64_t n, int col, int64_t row,
                                                float gs, float us, Round&& as_out) {
  const float gv = as_out(gs), uv = as_out(us);
  store_any(out, p.out_dtype, col * n + row, gv / (1.0f + expf(-gv)) * uv);  // activation.cu's silu
}

// The block's end: the warps' partials (acc, this lane's C fragments of NT n-tiles) meet in shared memory and are
// added in warp order; then the fusions' scale (norm: 1 / rms of each token, from the lanes' sums of squares ss,
// added over the four lanes of a token and then over the warps in order; ss null without the norm), bias, the
// residual add or SiLU-mul, and the store. pair: the tile's rows 0..7 are gate rows n0.., 8..15 the up rows of the
// same outputs.
template <typename T, int NT, bool kNorm, bool kPair>
__device__ __forceinline__ void store_tile(const SkinnyGemmLaunch& p, const SkinnySegment& seg, int64_t n0,
                                           const float (&acc)[NT][4], const float* ss) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ float4 partial[kWarps][NT][32];
  __shared__ float ss_w[kWarps][kNorm ? 8 * NT : 1];
#pragma unroll
  for (int j = 0; j < NT; ++j) partial[warp][j][lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
  if constexpr (kNorm) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {  // lanes 4g..4g+3 hold token 8j + g: (s0 + s1) + (s2 + s3) in every lane
      float v = ss[j];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      if (lane % 4 == 0) ss_w[warp][8 * j + lane / 4] = v;
    }
  }
  __syncthreads();
  const int64_t n = seg.n;
  auto sum_of = [&](int r, int col) {
    const int j = col / 8, c = col % 8;
    const int src_lane = (r % 8) * 4 + c / 2, e = (r / 8) * 2 + c % 2;
    const float* part = reinterpret_cast<const float*>(&partial[0][j][src_lane]) + e;
    float s = part[0];
#pragma unroll
    for (int ww = 1; ww < kWarps; ++ww) s += part[ww * NT * 32 * 4];
    return s;
  };
  auto inv_of = [&](int col) {
    if constexpr (!kNorm) {
      return 1.0f;
    } else {
      float t = ss_w[0][col];
#pragma unroll
      for (int ww = 1; ww < kWarps; ++ww) t += ss_w[ww][col];
      return rms_inv(t, p.k, p.norm_eps);
    }
  };
  auto as_out = [](float v) { return to_f32(from_f32<T>(v)); };  // the residual and pair fusions write x's dtype T
  if constexpr (kPair) {
    for_each_output<8, NT>(p, n0, n, [&](int r, int col, int64_t row) {
      const float inv = inv_of(col);
      float gs = sum_of(r, col), us = sum_of(r + 8, col);
      if constexpr (kNorm) gs *= inv, us *= inv;
      if (seg.bias) gs += load_any(seg.bias, seg.bias_dtype, row);
      if (p.seg[1].bias) us += load_any(p.seg[1].bias, seg.bias_dtype, row);
      store_silu_pair(p, seg.out, n, col, row, gs, us, as_out);
    });
    return;
  }
  for_each_output<kRowsPerTile, NT>(p, n0, n, [&](int r, int col, int64_t row) {
    float s = sum_of(r, col);
    if constexpr (kNorm) s *= inv_of(col);
    if (seg.bias) s += load_any(seg.bias, seg.bias_dtype, row);
    store_output(p, seg.out, n, col, row, s, as_out);
  });
}

// Norm fusion: x's 8 values of one 16-byte piece (in T) add their squares to ss (in order, in f32) and become
// round(x * gamma) in T, two at a time (the product of two bf16 or two f16 values is exact in f32, so the packed
// multiply's one rounding gives the same bits as rounding the f32 product).
template <typename T>
__device__ __forceinline__ uint4 norm_piece(const uint4& xv, const uint4& gv, float& ss) {
  const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
  uint32_t rw[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float lo, hi;
    if constexpr (std::is_same_v<T, bf16>) {
      lo = __uint_as_float(xw[e] << 16);
      hi = __uint_as_float(xw[e] & 0xffff0000u);
      asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(rw[e]) : "r"(xw[e]), "r"(gw[e]));
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&xw[e]));
      lo = f.x;
      hi = f.y;
      asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(rw[e]) : "r"(xw[e]), "r"(gw[e]));
    }
    ss = fmaf(lo, lo, ss);
    ss = fmaf(hi, hi, ss);
  }
  return make_uint4(rw[0], rw[1], rw[2], rw[3]);
}

// NT n-tiles of 8 tokens; U chunks loaded ahead per warp; MINB blocks per SM (the register budget). U and MINB
// change how the loads are grouped, never the order of any output's sum.
// Fusions (SkinnyGemmLaunch): kFuseNone; kFuseNorm, x the residual stream: each lane turns the x pieces it loads
// into x̂ = round(x * gamma) just before their use, summing their squares on the way (its k in chunk order, so a
// token's sum of squares depends on K alone, never on M), and the epilogue scales by 1 / rms; kFusePair, the same
// with a silu pair, whose tiles take rows g of gate (a) and of up (b8) for 8 outputs each; kFuseSilu, the silu pair
// without the norm (x already normalised: the main loop is kFuseNone's, only the tiles and the epilogue differ).
// Every block has the whole of K for its rows, so it needs no other block's sums. The residual add is the
// epilogue's alone (p.residual), so it needs no variant.
enum Fuse : int { kFuseNone, kFuseNorm, kFusePair, kFuseSilu };

// Tiles of a launch: 16-row tiles of every segment, or 8 rows of each of a silu pair's two.
__host__ __device__ __forceinline__ int64_t launch_tiles(const SkinnyGemmLaunch& l) {
  if (l.silu_pair) return (l.seg[0].n + 7) / 8;
  int64_t tiles = 0;
  for (int s = 0; s < kSkinnyMaxSegments; ++s)
    if (s < l.num_segments) tiles += segment_tiles(l.seg[s].n);
  return tiles;
}

// Where a tile's weights are: its segment (tile: the block's index in, the tile within its segment out), first row
// n0, and this lane's rows g (a) and g + 8 (b; a pair's up row g) with their scales and zeros.
template <Weights F> struct TileSrc {
  SkinnySegment seg;
  int64_t n0;
  const void *wa, *wb;
  const float *sa, *sb, *za, *zb;
};

template <typename T, Weights F, bool kPair>
__device__ __forceinline__ bool tile_src(const SkinnyGemmLaunch& p, int64_t tile, TileSrc<F>& s) {
  SkinnySegment& seg = s.seg;
  seg = SkinnySegment{};
  if constexpr (kPair) {
    seg.w = p.seg[0].w;
    seg.bias = p.seg[0].bias;
    seg.bias_dtype = p.seg[0].bias_dtype;
    seg.out = p.seg[0].out;
    seg.n = p.seg[0].n;
    if constexpr (F != Weights::kDense) {
      seg.scales = p.seg[0].scales;
      seg.zeros = p.seg[0].zeros;
      seg.groups = p.seg[0].groups;
      seg.group_size = p.seg[0].group_size;
    }
  } else if (!find_segment<F>(p, tile, seg)) {
    return false;
  }
  const int64_t n = seg.n, k = p.k;
  const int g = (threadIdx.x % 32) / 4;
  s.n0 = tile * (kPair ? 8 : kRowsPerTile);
  const int64_t ra = s.n0 + g < n ? s.n0 + g : n - 1;  // rows past n read the last row; never stored
  const int64_t rb = kPair ? ra : s.n0 + g + 8 < n ? s.n0 + g + 8 : n - 1;
  // A row's bytes: K elements of T (dense), K / 2 (int4) or K (uint8).
  const int64_t row_bytes = F == Weights::kDense ? k * static_cast<int64_t>(sizeof(T))
                            : F == Weights::kUint8 || kU8F<F> ? k
                                                                                : k / 2;
  const uint8_t* w = static_cast<const uint8_t*>(seg.w);
  const uint8_t* w_b = w;
  const float* scales_b = seg.scales;
  const float* zeros_b = seg.zeros;
  if constexpr (kPair) {
    w_b = static_cast<const uint8_t*>(p.seg[1].w);
    scales_b = p.seg[1].scales;
    zeros_b = p.seg[1].zeros;
  }
  s.wa = w + ra * row_bytes;
  s.wb = w_b + rb * row_bytes;
  s.sa = seg.scales ? seg.scales + ra * seg.groups : nullptr;
  s.sb = scales_b ? scales_b + rb * seg.groups : nullptr;
  s.za = seg.zeros ? seg.zeros + ra * seg.groups : nullptr;
  s.zb = zeros_b ? zeros_b + rb * seg.groups : nullptr;
  return true;
}

// One tile (a block's 16 weight rows, or a pair's 8 + 8) into its outputs.
template <typename T, Weights F, int NT, int U, int kFuse>
__device__ __forceinline__ void skinny_tile(const SkinnyGemmLaunch& p, int64_t tile) {
  constexpr bool kNorm = kFuse == kFuseNorm || kFuse == kFusePair, pair = kFuse == kFusePair || kFuse == kFuseSilu;
  TileSrc<F> src;
  if (!tile_src<T, F, pair>(p, tile, src)) return pdl_wait();  // whole block: uniform
  // The norm fusion's weights, K values of T, go to shared memory once per block (read with each chunk's x).
  extern __shared__ uint4 gamma_s[];
  if constexpr (kNorm) {
    const uint4* gamma = static_cast<const uint4*>(p.norm_w);
    for (int u = threadIdx.x; u < p.k / 8; u += kWarps * 32) gamma_s[u] = __ldg(gamma + u);
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t k = p.k;
  constexpr bool kFact = kFactored<F>;
  constexpr int kCk = kChunkOf<F>, kLaneK = kCk / 4;  // K per chunk and per lane
  const T* x0 = static_cast<const T*>(p.x) + g * k;  // n-tile j's row for this lane: x0 + 8j * k, read when 8j + g < M

  RowPiece<F> a[U], b8[U];  // rows g and g + 8 of w (a pair: row g of gate and of up)
  float acc[NT][4];
  float ss[NT];  // the norm fusion: this lane's sum of squares of token 8j + g's x, over its k in chunk order
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    ss[j] = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  }

  const int64_t chunks = (k + kCk - 1) / kCk;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // x rows of each n-tile: loaded with the weights for dense weights; for codes (a quarter or half the bytes per
  // chunk, so twice or four times the chunks ahead) just before their use, to keep registers for the codes.
  constexpr bool kXAhead = F == Weights::kDense;
  constexpr int UX = kXAhead ? U : 1;
  constexpr int XH = kLaneK / 8;  // 16-byte loads of x per lane and n-tile
  uint4 bx[UX][NT][XH];
  // kInt4FactSym's x (K % 128 == 0 on the factored path, loaded for chunks inside K): 32-bit offsets from each
  // n-tile's row.
  const T* xrow[NT];
  bool xin[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) xin[j] = j * 8 + g < p.m, xrow[j] = x0 + (xin[j] ? int64_t{j} * 8 * k : 0);
  auto load_x = [&](int64_t c0, int u, uint4 (&dst)[NT][XH]) {
    const int64_t c = c0 + int64_t{u} * kWarps;
    if constexpr (kSymF<F>) {
      const uint32_t kk = static_cast<uint32_t>(c) * kCk + kLaneK * t;
#pragma unroll
      for (int h = 0; h < XH; ++h)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          dst[j][h] = xin[j] ? __ldg(reinterpret_cast<const uint4*>(xrow[j] + kk + 8 * h)) : zero;
    } else {
      const int64_t kk = c * kCk + kLaneK * t;
#pragma unroll
      for (int h = 0; h < XH; ++h)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          dst[j][h] = c < chunks && kk + 8 * h < k && j * 8 + g < p.m
                          ? __ldg(reinterpret_cast<const uint4*>(x0 + int64_t{j} * 8 * k + kk + 8 * h))
                          : zero;
    }
  };
  // The norm fusion: chunk c's x pieces become x̂ just before their use (pieces past K or M are zeros, adding 0).
  auto norm_x = [&](int64_t c, uint4 (&v)[NT][XH]) {
    if constexpr (kNorm) {
      const int64_t kk = c * kCk + kLaneK * t;
#pragma unroll
      for (int h = 0; h < XH; ++h) {
        const uint4 gv = kk + 8 * h < k ? gamma_s[(kk + 8 * h) / 8] : zero;
#pragma unroll
        for (int j = 0; j < NT; ++j) v[j][h] = norm_piece<T>(v[j][h], gv, ss[j]);
      }
    }
  };
  // The factored path's chunk to group: groups are whole chunks (cpg of them a group), one per row per chunk.
  const uint32_t cpg = kSymF<F> ? static_cast<uint32_t>(src.seg.group_size / kCk) : 1;
  auto load_w = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if constexpr (kSymF<F>) {
        const uint32_t c = static_cast<uint32_t>(c0) + u * kWarps, kk = c * kCk + kLaneK * t;
        const bool in = c < static_cast<uint32_t>(chunks);
        const uint32_t gi = !in ? 0 : cpg == 1 ? c : c / cpg;
        load_fact_piece<F>(a[u], static_cast<const uint8_t*>(src.wa), kk, gi, in, src.sa);
        load_fact_piece<F>(b8[u], static_cast<const uint8_t*>(src.wb), kk, gi, in, src.sb);
      } else {
        const int64_t c = c0 + int64_t{u} * kWarps;
        const int64_t kk = c * kCk + kLaneK * t;
        const bool in_k = c < chunks && kk < k;
        load_piece<T, F>(a[u], src.wa, kk, k, in_k, src.sa, src.za, src.seg.group_size);
        load_piece<T, F>(b8[u], src.wb, kk, k, in_k, src.sb, src.zb, src.seg.group_size);
      }
    }
  };
  // The first round of weights goes out before the wait for the kernel before (launch_pdl): no kernel writes them.
  load_w(warp);
  pdl_wait();
  pdl_trigger();
  if constexpr (kNorm) __syncthreads();  // gamma_s
  for (int64_t c0 = warp; c0 < chunks; c0 += int64_t{kWarps} * U) {
    if (c0 != warp) load_w(c0);
    if constexpr (kXAhead) {
#pragma unroll
      for (int u = 0; u < U; ++u) load_x(c0, u, bx[u]);
    }
    if constexpr (kFact) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (c0 + int64_t{u} * kWarps >= chunks) break;  // warp-uniform; depends on K alone
        load_x(c0, u, bx[0]);
        norm_x(c0 + int64_t{u} * kWarps, bx[0]);
        any_factored_chunk<T, F, NT>(acc, a[u], b8[u], bx[0], p.fold_zeros);
      }
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (c0 + int64_t{u} * kWarps >= chunks) break;  // warp-uniform; depends on K alone
        if constexpr (!kXAhead) load_x(c0, u, bx[0]);
        const int ux = kXAhead ? u : 0;
        norm_x(c0 + int64_t{u} * kWarps, bx[ux]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t frag[4] = {piece_word<T, F>(a[u], 2 * i), piece_word<T, F>(b8[u], 2 * i),
                                    piece_word<T, F>(a[u], 2 * i + 1), piece_word<T, F>(b8[u], 2 * i + 1)};
#pragma unroll
          for (int j = 0; j < NT; ++j)
            attn::mma16816<T>(acc[j], frag, word(bx[ux][j], 2 * i), word(bx[ux][j], 2 * i + 1));
        }
      }
    }
  }
  store_tile<T, NT, kNorm, pair>(p, src.seg, src.n0, acc, ss);
}

template <typename T, Weights F, int NT, int U, int MINB, int kFuse>
__global__ void __launch_bounds__(kWarps * 32, MINB) skinny_gemm_kernel(SkinnyGemmLaunch p) {
  skinny_tile<T, F, NT, U, kFuse>(p, blockIdx.x);
}

// PEREGRINE_SKINNY_PLAIN=1 (comparisons): codes take the dequantize-per-code path even where the factored one fits.
bool skinny_plain() {
  static const bool plain = std::getenv("PEREGRINE_SKINNY_PLAIN") != nullptr;
  return plain;
}

// Codes without zeros take kInt4FactSym / kUint8FactSym at every M <= kSkinnyMaxM alike; PEREGRINE_SKINNY_SYM=0
// keeps them on kInt4Fact / kUint8Fact (comparisons).
bool skinny_sym() {
  static const bool sym = [] {
    const char* e = std::getenv("PEREGRINE_SKINNY_SYM");
    return !(e && std::string_view(e) == "0");
  }();
  return sym;
}

// One kernel of the set, with the fusion l asks for (dense weights and the factored path only).
template <typename T, Weights F, int NT, int U, int MINB>
void launch_kernel(const dim3 grid, const dim3 block, cudaStream_t stream, const SkinnyGemmLaunch& l) {
  if constexpr (F == Weights::kDense || kFactored<F>) {
    const size_t gamma_bytes = static_cast<size_t>(l.k) * sizeof(T);
    if (l.silu_pair && !l.norm_w)
      return launch_pdl(skinny_gemm_kernel<T, F, NT, U, MINB, kFuseSilu>, grid, block, 0, stream, l.m, l);
    if (l.silu_pair)
      return launch_pdl(skinny_gemm_kernel<T, F, NT, U, MINB, kFusePair>, grid, block, gamma_bytes, stream, l.m, l);
    if (l.norm_w)
      return launch_pdl(skinny_gemm_kernel<T, F, NT, U, MINB, kFuseNorm>, grid, block, gamma_bytes, stream, l.m, l);
  }
  launch_pdl(skinny_gemm_kernel<T, F, NT, U, MINB, kFuseNone>, grid, block, 0, stream, l.m, l);
}

// How full a launch of `tiles` blocks leaves its last wave at per_sm blocks an SM (1: every slot of every wave used).
double wave_fill(const SkinnyGemmLaunch& l, int64_t tiles, int per_sm) {
  const int64_t slots = int64_t{std::max(1, l.sm_count)} * per_sm;
  return static_cast<double>(tiles) / static_cast<double>(ceil_div(tiles, slots) * slots);
}

// The symmetric factored kernels at M <= 8 without the norm fusion run three blocks an SM with two chunks ahead (80
// registers; the same chunk order as two blocks with four, so the same bits) where the launch has more tiles than two
// blocks an SM hold: more warps a scheduler to hide the codes' latency and a fuller last wave (H100, 8B shape, bs 1:
// W4A16 +5.7%, W8A16 +3.9%); a grid that two blocks an SM hold (o_proj, down_proj: 256 tiles) keeps four chunks
// ahead (+2.3% / +5.2% more; docs/BENCHMARKS.md). The norm-fused kernels would spill at 80 registers and were not
// measured so. PEREGRINE_SKINNY_FACT3=0 keeps two blocks everywhere, =1 takes three everywhere (comparisons);
// set_skinny_fact3 does the same for tests.
std::atomic<int> g_fact3{-1};  // -1: the environment not read yet; then 0 (two), 1 (three) or 2 (by the grid)
bool skinny_fact3(const SkinnyGemmLaunch& l, int64_t tiles) {
  int mode = g_fact3.load(std::memory_order_relaxed);
  if (mode < 0) {
    const char* e = std::getenv("PEREGRINE_SKINNY_FACT3");
    mode = e && std::string_view(e) == "0" ? 0 : e && std::string_view(e) == "1" ? 1 : 2;
    g_fact3.store(mode, std::memory_order_relaxed);
  }
  return mode == 1 || (mode == 2 && tiles > 2 * int64_t{std::max(1, l.sm_count)});
}

// The factored kernels (uint8 codes take twice the registers per chunk: one chunk ahead fewer).
template <typename T, Weights F>
void launch_factored(const SkinnyGemmLaunch& l, const dim3 grid, const dim3 block, cudaStream_t stream) {
  constexpr int kU1 = kU8F<F> ? kFactU1 - 1 : kFactU1;
  if (l.m <= 8) {
    if constexpr (kSymF<F>) {  // the norm fusions (off for codes unless asked) keep two blocks
      if (skinny_fact3(l, grid.x) && !l.norm_w) {
        if (l.silu_pair) return launch_pdl(skinny_gemm_kernel<T, F, 1, 2, 3, kFuseSilu>, grid, block, 0, stream, l.m, l);
        return launch_pdl(skinny_gemm_kernel<T, F, 1, 2, 3, kFuseNone>, grid, block, 0, stream, l.m, l);
      }
    }
    launch_kernel<T, F, 1, kU1, 2>(grid, block, stream, l);
  } else {
    launch_kernel<T, F, 2, kFactU2, 2>(grid, block, stream, l);
  }
}

template <typename T, Weights F>
void launch_typed(const SkinnyGemmLaunch& l, cudaStream_t stream) {
  const int64_t tiles = launch_tiles(l);
  const dim3 grid(static_cast<unsigned>(tiles)), block(kWarps * 32);
  static_assert(kSkinnyMaxM <= 16, "one or two n-tiles of 8 tokens");
  if constexpr (F == Weights::kInt4 || F == Weights::kUint8) {
    // Every group a whole number of 128-wide chunks: the factored path. PEREGRINE_SKINNY_PLAIN=1 keeps the
    // dequantize-per-code path (for comparisons).
    bool factored = !skinny_plain();
    for (int s = 0; s < l.num_segments; ++s) factored = factored && l.seg[s].group_size % 128 == 0;
    if (factored) {
      bool zeros = false;
      for (int s = 0; s < l.num_segments; ++s) zeros = zeros || l.seg[s].zeros != nullptr;
      if constexpr (F == Weights::kInt4) {
        if (!zeros && skinny_sym()) {
          launch_factored<T, Weights::kInt4FactSym>(l, grid, block, stream);
        } else {
          launch_factored<T, Weights::kInt4Fact>(l, grid, block, stream);
        }
      } else if (!zeros && skinny_sym()) {
        launch_factored<T, Weights::kUint8FactSym>(l, grid, block, stream);
      } else {
        launch_factored<T, Weights::kUint8Fact>(l, grid, block, stream);
      }
      PEREGRINE_CUDA_CHECK(cudaGetLastError());
      return;
    }
  }
  if (l.m <= 8) {
    // Two blocks per SM with four chunks ahead, or three with two ahead when that fills the last wave of blocks
    // much better (q/k/v's 384 tiles on 132 SMs: 73% of 2 x 132 slots in two waves, 97% of 3 x 132 in one).
    if constexpr (F == Weights::kInt4) {
      // Codes are a quarter of bf16's bytes per chunk: more chunks ahead for as many bytes.
      launch_kernel<T, F, 1, 8, 2>(grid, block, stream, l);
    } else if constexpr (F != Weights::kDense) {
      launch_kernel<T, F, 1, 4, 2>(grid, block, stream, l);
    } else if (wave_fill(l, tiles, 3) > wave_fill(l, tiles, 2) + 0.05) {
      launch_kernel<T, F, 1, 2, 3>(grid, block, stream, l);
    } else {
      launch_kernel<T, F, 1, 4, 2>(grid, block, stream, l);
    }
  } else {
    launch_kernel<T, F, 2, F == Weights::kDense ? 2 : 4, 2>(grid, block, stream, l);
  }
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_format(const SkinnyGemmLaunch& l, cudaStream_t stream) {
  if (l.codes == DType::kI4) return launch_typed<T, Weights::kInt4>(l, stream);
  if (l.codes == DType::kU8) return launch_typed<T, Weights::kUint8>(l, stream);
  launch_typed<T, Weights::kDense>(l, stream);
}

// ---- GGUF blocks on int8 tensor cores (launch_skinny_ggml) ----

// d = a * b + c on int8 tensor cores (s32 accumulators).
__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, const int (&c)[4]) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}

// The same with m16n8k16 (Q6_K's 16-value scales): a holds rows g and g + 8, k = 4t..4t+3 each; b k = 4t..4t+3.
__device__ __forceinline__ void mma_s8_k16(int (&d)[4], const uint32_t (&a)[2], uint32_t b, const int (&c)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}

// Integers to floats without I2F (a sixteenth of the FMA rate): the tensor cores add the block's dot product to
// kMagicI, the bits of 2^23 + 2^22, whose float minus kMagicF is the integer exactly (|value| < 2^22 here:
// |dot| <= 32 * 127 * 127).
constexpr int kMagicI = 0x4B400000;
constexpr float kMagicF = 12582912.0f;
__device__ __forceinline__ float magic_to_float(int biased) { return __int_as_float(biased) - kMagicF; }


constexpr int kGgmlChunk = 128;  // K per warp pass: four 32-value blocks, one mma step each

// Q5_0 / Q5_K: 4-bit codes plus a word of fifth bits; Q4_K / Q5_K: scales and mins of a 256-value super-block.
template <GgmlType G> constexpr bool kFiveBit = G == GgmlType::kQ5_0 || G == GgmlType::kQ5_K;
template <GgmlType G> constexpr bool kSuperMins = G == GgmlType::kQ4_K || G == GgmlType::kQ5_K;

// One weight row's share of a 128-value chunk for one lane: its codes (ggml_matmul.cuh's packed layout) and meta.
template <GgmlType G> struct GgmlPiece;
template <> struct GgmlPiece<GgmlType::kQ8_0> { uint4 v[2]; uint2 meta; };  // 4 blocks x 8 codes; 4 f16 scales
template <> struct GgmlPiece<GgmlType::kQ4_0> { uint4 v; uint2 meta; };     // 4 blocks x 4 nibble pairs
template <> struct GgmlPiece<GgmlType::kQ4_K> { uint4 v; uint4 meta; };     // the super-block's d, dmin, scales
template <> struct GgmlPiece<GgmlType::kQ5_0> { uint4 v; uint32_t h; uint2 meta; };  // Q4_0's, the fifth bits
template <> struct GgmlPiece<GgmlType::kQ5_K> { uint4 v; uint32_t h; uint4 meta; };  // Q4_K's, the fifth bits
// Q6_K: low nibbles as the 4-bit types, 2 words of high bits, the 8 int8 scales of 16 values, the super-block's d.
template <> struct GgmlPiece<GgmlType::kQ6_K> { uint4 v; uint2 hi; uint2 meta; uint32_t d; };

// codes: the row's codes plus this lane's offset (16t for the 4- and 5-bit types and Q6_K's low nibbles, 32t for
// Q8_0);
// meta: the row's meta row; q6_d: Q6_K's d of this row (the d region).
template <GgmlType G>
__device__ __forceinline__ void load_ggml_piece(GgmlPiece<G>& r, const uint8_t* codes, const uint8_t* meta,
                                                const uint8_t* q6_d, int t, int64_t c, bool in_k) {
  const uint4 z = make_uint4(0, 0, 0, 0);
  if constexpr (G == GgmlType::kQ6_K) {
    r.v = in_k ? __ldcs(reinterpret_cast<const uint4*>(codes + c * 96)) : z;
    r.hi = in_k ? __ldcs(reinterpret_cast<const uint2*>(codes + c * 96 + 64 - 8 * t)) : make_uint2(0, 0);
    r.meta = in_k ? __ldg(reinterpret_cast<const uint2*>(meta + c * 8)) : make_uint2(0, 0);
    r.d = in_k ? __ldg(reinterpret_cast<const unsigned short*>(q6_d) + c / 2) : 0u;
    return;
  }
  if constexpr (G == GgmlType::kQ8_0) {
    r.v[0] = in_k ? __ldcs(reinterpret_cast<const uint4*>(codes + c * 128)) : z;
    r.v[1] = in_k ? __ldcs(reinterpret_cast<const uint4*>(codes + c * 128 + 16)) : z;
  } else if constexpr (kFiveBit<G>) {
    r.v = in_k ? __ldcs(reinterpret_cast<const uint4*>(codes + c * 80)) : z;
    r.h = in_k ? __ldcs(reinterpret_cast<const unsigned int*>(codes + c * 80 + 64 - 12 * t)) : 0u;
  } else {
    r.v = in_k ? __ldcs(reinterpret_cast<const uint4*>(codes + c * 64)) : z;
  }
  if constexpr (kSuperMins<G>)
    r.meta = in_k ? __ldg(reinterpret_cast<const uint4*>(meta + (c / 2) * 16)) : z;
  else
    r.meta = in_k ? __ldg(reinterpret_cast<const uint2*>(meta + c * 8)) : make_uint2(0, 0);
}

__device__ __forceinline__ float half_lo(uint32_t w) { return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu))); }
__device__ __forceinline__ float half_hi(uint32_t w) { return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16))); }
__device__ __forceinline__ float comp(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ __forceinline__ int comp(const int4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// The chunk's four block scales (Q4_K / Q5_K: d * sc and dmin * m of sub-blocks 4h .. 4h + 3, h the chunk's half
// of its super-block; Q6_K: d * sc of each block's values 0..15 in d, of 16..31 in mn; computed as core/ggml_quant
// does).
template <GgmlType G>
__device__ __forceinline__ void ggml_scales(const GgmlPiece<G>& r, int64_t c, float (&d)[4], float (&mn)[4]) {
  if constexpr (G == GgmlType::kQ6_K) {
    const float dd = half_lo(r.d);
    const uint32_t lo = r.meta.x ^ 0x80808080u, hi = r.meta.y ^ 0x80808080u;  // int8 + 128, under 2^23 below
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t w = s < 2 ? lo : hi;
      const uint32_t sel0 = 0x7650u + static_cast<uint32_t>(2 * (s % 2)), sel1 = sel0 + 1;
      d[s] = __fmul_rn(dd, __uint_as_float(__byte_perm(w, 0x4B000000u, sel0)) - 8388736.0f);
      mn[s] = __fmul_rn(dd, __uint_as_float(__byte_perm(w, 0x4B000000u, sel1)) - 8388736.0f);
    }
  } else if constexpr (kSuperMins<G>) {
    const float dd = half_lo(r.meta.x), dm = half_hi(r.meta.x);
    const uint32_t s03 = r.meta.y, s47 = r.meta.z, s8b = r.meta.w;  // the 12 scale bytes q[0..11]
    // The four 6-bit scales and mins of sub-blocks 4h .. 4h + 3, a byte each, by word operations:
    //   h = 0 (j = s):     sc = q[j] & 63, m = q[j + 4] & 63
    //   h = 1 (j = 4 + s): sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4, m = (q[j + 4] >> 4) | (q[j] >> 6) << 4
    // (c % 2 is the warp's parity: uniform.)
    const bool h1 = c % 2 != 0;
    const uint32_t sc = h1 ? (s8b & 0x0f0f0f0fu) | ((s03 >> 2) & 0x30303030u) : s03 & 0x3f3f3f3fu;
    const uint32_t mw = h1 ? ((s8b >> 4) & 0x0f0f0f0fu) | ((s47 >> 2) & 0x30303030u) : s47 & 0x3f3f3f3fu;
#pragma unroll
    for (int s = 0; s < 4; ++s) {  // byte s under the exponent of 2^23 (one permute), minus 2^23: exact
      const uint32_t sel = 0x7650u + static_cast<uint32_t>(s);
      d[s] = __fmul_rn(dd, __uint_as_float(__byte_perm(sc, 0x4B000000u, sel)) - 8388608.0f);
      mn[s] = __fmul_rn(dm, __uint_as_float(__byte_perm(mw, 0x4B000000u, sel)) - 8388608.0f);
    }
  } else {
    d[0] = half_lo(r.meta.x);
    d[1] = half_hi(r.meta.x);
    d[2] = half_lo(r.meta.y);
    d[3] = half_hi(r.meta.y);
#pragma unroll
    for (int s = 0; s < 4; ++s) mn[s] = 0.0f;
  }
}

// One chunk: for each of its four blocks, the integer dot products on the tensor cores, then the block's scales
// (rows g and g + 8 in a, b8; this lane's C columns 8j + 2t and + 1 of x).
// kOne: M == 1, so only C column 0 (e = 0, 2 of lanes t = 0) is ever stored: the odd columns' epilogue is skipped
// (the same arithmetic for what is computed, so rows keep their bits).
template <GgmlType G, int NT, bool kOne>
__device__ __forceinline__ void ggml_chunk(float (&acc)[NT][4], const GgmlPiece<G>& a, const GgmlPiece<G>& b8,
                                           const SkinnyGemmLaunch& p, int64_t c, int g, int t) {
  const int64_t k = p.k, kb = k / 32;
  float da[4], db[4], ma[4], mb[4];
  ggml_scales<G>(a, c, da, ma);
  ggml_scales<G>(b8, c, db, mb);
  const uint4 z = make_uint4(0, 0, 0, 0);
  const float4 zf = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = 8 * j + g, c0 = 8 * j + 2 * t, c1 = c0 + 1;
    const int8_t* xr = p.xq + col * k + c * kGgmlChunk + 32 * t;
    const uint4 x0 = col < p.m ? __ldg(reinterpret_cast<const uint4*>(xr)) : z;
    const uint4 x1 = col < p.m ? __ldg(reinterpret_cast<const uint4*>(xr + 16)) : z;
    const float4 xd0 = c0 < p.m ? __ldg(reinterpret_cast<const float4*>(p.xd + c0 * kb + 4 * c)) : zf;
    const float4 xd1 = !kOne && c1 < p.m ? __ldg(reinterpret_cast<const float4*>(p.xd + c1 * kb + 4 * c)) : zf;
    const int4 zi = make_int4(0, 0, 0, 0);
    int4 xs0 = zi, xs1 = zi;
    if constexpr (G == GgmlType::kQ4_0 || kFiveBit<G> || kSuperMins<G>) {
      xs0 = c0 < p.m ? __ldg(reinterpret_cast<const int4*>(p.xsum + c0 * kb + 4 * c)) : zi;
      xs1 = !kOne && c1 < p.m ? __ldg(reinterpret_cast<const int4*>(p.xsum + c1 * kb + 4 * c)) : zi;
    }
    if constexpr (G == GgmlType::kQ6_K) {
      // The sums of x's 16-value halves: the mma's accumulators start at kMagicI - 32 * sum q (codes carry +32).
      const int* h0 = p.xsum16 + c0 * (k / 16) + 8 * c;
      const int* h1 = p.xsum16 + c1 * (k / 16) + 8 * c;
      const int4 h0a = c0 < p.m ? __ldg(reinterpret_cast<const int4*>(h0)) : zi;
      const int4 h0b = c0 < p.m ? __ldg(reinterpret_cast<const int4*>(h0 + 4)) : zi;
      const int4 h1a = !kOne && c1 < p.m ? __ldg(reinterpret_cast<const int4*>(h1)) : zi;
      const int4 h1b = !kOne && c1 < p.m ? __ldg(reinterpret_cast<const int4*>(h1 + 4)) : zi;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t wa = word_of(a.v, s), wb = word_of(b8.v, s);
        const uint32_t ha = (s < 2 ? a.hi.x : a.hi.y) >> (4 * (s % 2)), hb = (s < 2 ? b8.hi.x : b8.hi.y) >> (4 * (s % 2));
        const uint32_t xw0 = word_of(s < 2 ? x0 : x1, (2 * s) % 4), xw1 = word_of(s < 2 ? x0 : x1, (2 * s + 1) % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // values 0..15 of the block, then 16..31: one k16 step and scale each
          const uint32_t af[2] = {((wa >> (4 * h)) & 0x0f0f0f0fu) | ((((ha >> (2 * h)) & 0x03030303u)) << 4),
                                  ((wb >> (4 * h)) & 0x0f0f0f0fu) | ((((hb >> (2 * h)) & 0x03030303u)) << 4)};
          const int q = 2 * s + h;
          const int i0 = kMagicI - 32 * comp(q < 4 ? h0a : h0b, q % 4);
          const int i1 = kMagicI - 32 * comp(q < 4 ? h1a : h1b, q % 4);
          const int init[4] = {i0, i1, i0, i1};
          int ci[4];
          mma_s8_k16(ci, af, h ? xw1 : xw0, init);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (kOne && e % 2) continue;
            const float dx = comp(e % 2 ? xd1 : xd0, s);
            const float dw = h ? (e < 2 ? ma[s] : mb[s]) : (e < 2 ? da[s] : db[s]);
            acc[j][e] = fmaf(magic_to_float(ci[e]) * dx, dw, acc[j][e]);
          }
        }
      }
    } else {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        uint32_t af[4];
        if constexpr (G == GgmlType::kQ8_0) {
          af[0] = word(a.v, 2 * s);
          af[1] = word(b8.v, 2 * s);
          af[2] = word(a.v, 2 * s + 1);
          af[3] = word(b8.v, 2 * s + 1);
        } else {  // low nibbles: values 4t..4t+3; high: 16+4t..16+4t+3 (codes 0..15 as s8)
          const uint32_t wa = word_of(a.v, s), wb = word_of(b8.v, s);
          af[0] = wa & 0x0f0f0f0fu;
          af[1] = wb & 0x0f0f0f0fu;
          af[2] = (wa >> 4) & 0x0f0f0f0fu;
          af[3] = (wb >> 4) & 0x0f0f0f0fu;
          if constexpr (kFiveBit<G>) {  // bit s (low values) and 4 + s (high values) of each byte to bit 4: 0..31
            af[0] |= (a.h << (4 - s)) & 0x10101010u;
            af[1] |= (b8.h << (4 - s)) & 0x10101010u;
            af[2] |= (a.h >> s) & 0x10101010u;
            af[3] |= (b8.h >> s) & 0x10101010u;
          }
        }
        const uint4& xh = s < 2 ? x0 : x1;
        const int s0 = comp(xs0, s), s1 = comp(xs1, s);
        // Q4_0's codes carry +8 (Q5_0's +16): the accumulators start at kMagicI - 8 * sum q, so they end at
        // dot - 8 sum q, exactly.
        constexpr int kOff = G == GgmlType::kQ4_0 ? 8 : G == GgmlType::kQ5_0 ? 16 : 0;
        const int i0 = kMagicI - kOff * s0, i1 = kMagicI - kOff * s1;
        const int init[4] = {i0, i1, i0, i1};
        int ci[4];
        mma_s8(ci, af, word_of(xh, (2 * s) % 4), word_of(xh, (2 * s + 1) % 4), init);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kOne && e % 2) continue;
          const float dx = comp(e % 2 ? xd1 : xd0, s);
          const float dw = e < 2 ? da[s] : db[s];
          const float dot = magic_to_float(ci[e]);
          if constexpr (kSuperMins<G>) {
            const float xs = magic_to_float(kMagicI + (e % 2 ? s1 : s0));
            const float mw = e < 2 ? ma[s] : mb[s];
            acc[j][e] = fmaf(dx, fmaf(dw, dot, -mw * xs), acc[j][e]);
          } else {
            acc[j][e] = fmaf(dot * dx, dw, acc[j][e]);
          }
        }
      }
    }
  }
}

// NT n-tiles of 8 tokens, U chunks loaded ahead per warp, MINB blocks per SM; the grouping of loads never changes
// a sum's order.
template <GgmlType G, int NT, int U, int MINB, bool kOne = false>
__global__ void __launch_bounds__(kWarps * 32, MINB) skinny_ggml_kernel(SkinnyGemmLaunch p) {
  int64_t tile = blockIdx.x;
  SkinnySegment seg{};
  if (!find_segment<Weights::kGgml>(p, tile, seg)) return;  // whole block: uniform
  const int64_t n = seg.n;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t k = p.k, n0 = tile * kRowsPerTile, chunks = k / kGgmlChunk;
  const int64_t ra = n0 + g < n ? n0 + g : n - 1;  // rows past n read the last row; never stored
  const int64_t rb = n0 + g + 8 < n ? n0 + g + 8 : n - 1;
  constexpr int64_t kChunkCodeBytes = ggml_packed_code_bytes(G, 1, kGgmlChunk);  // per row and chunk
  const int64_t code_row = chunks * kChunkCodeBytes, meta_row = k / 16;
  const uint8_t* codes = static_cast<const uint8_t*>(seg.w);
  const uint8_t* meta = static_cast<const uint8_t*>(seg.meta);
  constexpr int kLaneBytes = G == GgmlType::kQ8_0 ? 32 : 16;
  const uint8_t* ca = codes + ra * code_row + t * kLaneBytes;
  const uint8_t* cb = codes + rb * code_row + t * kLaneBytes;
  const uint8_t* ma = meta + ra * meta_row;
  const uint8_t* mb = meta + rb * meta_row;
  // Q6_K's d region after the scales: [N, K / 256] f16.
  const uint8_t* q6_region = meta + n * meta_row;
  const uint8_t* da6 = q6_region + ra * (k / 256) * 2;
  const uint8_t* db6 = q6_region + rb * (k / 256) * 2;

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  // Before the wait for the kernel before (launch_pdl): the first round of this lane's weight codes prefetched to
  // L2 (no kernel writes them; no registers held across the wait). x's codes and scales are read only after it.
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = warp + int64_t{u} * kWarps;
    if (c < chunks) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(ca + c * kChunkCodeBytes));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(cb + c * kChunkCodeBytes));
    }
  }
  pdl_wait();
  pdl_trigger();
  GgmlPiece<G> a[U], b8[U];
  for (int64_t c0 = warp; c0 < chunks; c0 += int64_t{kWarps} * U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + int64_t{u} * kWarps;
      load_ggml_piece<G>(a[u], ca, ma, da6, t, c, c < chunks);
      load_ggml_piece<G>(b8[u], cb, mb, db6, t, c, c < chunks);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + int64_t{u} * kWarps;
      if (c >= chunks) break;  // warp-uniform; depends on K alone
      ggml_chunk<G, NT, kOne>(acc, a[u], b8[u], p, c, g, t);
    }
  }
  store_tile<bf16, NT, false, false>(p, seg, n0, acc, nullptr);  // no fusions: T unused
}

template <GgmlType G>
void launch_ggml_typed(const SkinnyGemmLaunch& l, cudaStream_t stream) {
  int64_t tiles = 0;
  for (int s = 0; s < l.num_segments; ++s) tiles += segment_tiles(l.seg[s].n);
  const dim3 grid(static_cast<unsigned>(tiles)), block(kWarps * 32);
  // Chunks ahead: as many as 128 registers hold without spilling (Q4_0's pieces are the smallest; Q4_K's carry 16
  // meta bytes).
  constexpr int kU1 = G == GgmlType::kQ4_0 || G == GgmlType::kQ5_0 ? 4 : 3;
  static_assert(kSkinnyGgmlMaxM <= 32, "up to four n-tiles of 8 tokens");
  // Four n-tiles hold their x pieces and scales in registers: one block per SM (255 registers).
  if (l.m == 1)
    launch_pdl(skinny_ggml_kernel<G, 1, kU1, 2, true>, grid, block, 0, stream, l.m, l);
  else if (l.m <= 8)
    launch_pdl(skinny_ggml_kernel<G, 1, kU1, 2>, grid, block, 0, stream, l.m, l);
  else if (l.m <= 16)
    launch_pdl(skinny_ggml_kernel<G, 2, G == GgmlType::kQ6_K ? 1 : 2, 2>, grid, block, 0, stream, l.m, l);
  else
    launch_pdl(skinny_ggml_kernel<G, 4, G == GgmlType::kQ6_K ? 1 : 2, 1>, grid, block, 0, stream, l.m, l);
  PEREGRINE_CUDA_CHECK(cudaGetLastError());
}

// ---- W8A8 on 8-bit tensor cores (launch_skinny_w8a8) ----

// d = a * b + c on FP8 tensor cores (e4m3 x e4m3, f32 accumulators).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                         const float (&c)[4]) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// Accumulators of one lane: int32 (exact) for int8, f32 for FP8.
template <bool kFp8> using W8Acc = std::conditional_t<kFp8, float, int>;

// How a W8A8 launch gets x's codes, and its fusions (skinny_w8a8_fuses): kXCodes reads launch_act_quant's codes;
// kXQuant, kXNorm and kXPair quantize x in the block: kXQuant x as it is, kXNorm rmsnorm(x) first (q/k/v), kXPair
// rmsnorm(x) and a gate/up pair (SiLU-mul). A residual add (o_proj, down_proj) goes with kXCodes, kXQuant or
// kXBlocks. kXBlocks: FP8 weights in 128 x 128 blocks (a scale per 128 rows and 128 k) and x's codes from
// launch_act_quant with a scale per token and 128 k; each chunk (one block column) is scaled as it is summed.
enum W8X { kXCodes = 0, kXQuant = 1, kXNorm = 2, kXPair = 3, kXBlocks = 4 };

// The scales of a kXBlocks chunk: this lane's two weight rows' (rows g and g + 8 of the tile: their block rows'
// scales, one per 128 k) and the launch's x scales ([M][K / 128]).
struct W8BlockScales {
  const float* wa;
  const float* wb;
  const float* xs;
};

// A lane's 32 consecutive bytes of a row's 128-wide chunk (bytes 32t .. 32t + 31): mma step i takes bytes
// 8i .. 8i + 3 as the fragment's k = 4t .. 4t + 3 and 8i + 4 .. 8i + 7 as k = 16 + 4t .. 16 + 4t + 3, for the weight
// rows (A) and the token's x codes (B) alike. x's codes: token col's row at xq + col * xstride, in global memory
// (launch_act_quant's) or, kSharedX, in the block's shared memory (quantize_x_in_block's).
// kBlocks (FP8): the chunk's sums scaled as w8_matmul's warp kernel scales a group's, acc = fmaf(sum * x_scale,
// w_scale, acc).
template <bool kFp8, int NT, bool kSharedX, bool kBlocks = false>
__device__ __forceinline__ void w8a8_chunk(W8Acc<kFp8> (&acc)[NT][4], const uint4 (&a)[2], const uint4 (&b8)[2],
                                           const SkinnyGemmLaunch& p, const int8_t* xq, int64_t xstride, int64_t c,
                                           int g, int t, const W8BlockScales& bs = {}) {
  static_assert(kFp8 || !kBlocks, "128 x 128 blocks are FP8's");
  const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = 8 * j + g;
    const int8_t* xr = xq + col * xstride + c * 128 + 32 * t;
    uint4 xv[2] = {z, z};
    if (col < p.m) {
      if constexpr (kSharedX) {
        xv[0] = *reinterpret_cast<const uint4*>(xr);
        xv[1] = *reinterpret_cast<const uint4*>(xr + 16);
      } else {
        xv[0] = __ldg(reinterpret_cast<const uint4*>(xr));
        xv[1] = __ldg(reinterpret_cast<const uint4*>(xr + 16));
      }
    }
    // FP8: the chunk's four steps accumulate on the tensor cores from zero (their sum is not exact f32), then go
    // to the f32 accumulators once per 128 values.
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t af[4] = {word(a, 2 * i), word(b8, 2 * i), word(a, 2 * i + 1), word(b8, 2 * i + 1)};
      if constexpr (kFp8)
        mma_e4m3(d, af, word(xv, 2 * i), word(xv, 2 * i + 1), d);
      else
        mma_s8(acc[j], af, word(xv, 2 * i), word(xv, 2 * i + 1), acc[j]);
    }
    if constexpr (kBlocks) {
      const float sa = __ldg(bs.wa + c), sb = __ldg(bs.wb + c);
      const int c0 = 8 * j + 2 * t, c1 = c0 + 1;  // the accumulators' tokens
      const int64_t xg = p.k / 128;  // x's scales a token
      const float x0 = c0 < p.m ? __ldg(bs.xs + c0 * xg + c) : 0.0f, x1 = c1 < p.m ? __ldg(bs.xs + c1 * xg + c) : 0.0f;
      acc[j][0] = fmaf(d[0] * x0, sa, acc[j][0]);
      acc[j][1] = fmaf(d[1] * x1, sa, acc[j][1]);
      acc[j][2] = fmaf(d[2] * x0, sb, acc[j][2]);
      acc[j][3] = fmaf(d[3] * x1, sb, acc[j][3]);
    } else if constexpr (kFp8) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] += d[e];
    }
  }
}

// The block's end for W8A8: the warps' partials added in warp order (int8: as integers, exactly), then
// fmaf(sum * xs[token], w_scale, 0) + bias, as w8_matmul's warp kernel computes it (xs in shared memory with
// kSharedX); then the residual add (out = round(residual + round(product)), as the unfused product and the next
// norm's add give it) or, kPair (rows 0..7 gate, 8..15 up of the same outputs), round(silu(round(gate)) *
// round(up)) as activation.cu's silu_mul of the two stored products.
// kBlocks: the sums are scaled already; the bias follows.
template <bool kFp8, int NT, bool kSharedX, bool kPair, bool kBlocks = false>
__device__ __forceinline__ void store_w8a8_tile(const SkinnyGemmLaunch& p, const SkinnySegment& seg, int64_t n0,
                                                const W8Acc<kFp8> (&acc)[NT][4], const float* xs) {
  using A = W8Acc<kFp8>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ A partial[kWarps][NT][32][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) partial[warp][j][lane][e] = acc[j][e];
  __syncthreads();
  const int64_t n = seg.n;
  auto sum_of = [&](int r, int col) {
    const int j = col / 8, c = col % 8;
    const int src_lane = (r % 8) * 4 + c / 2, e = (r / 8) * 2 + c % 2;
    A s = partial[0][j][src_lane][e];
#pragma unroll
    for (int ww = 1; ww < kWarps; ++ww) s += partial[ww][j][src_lane][e];
    return s;
  };
  auto x_scale = [&](int col) { return kSharedX ? xs[col] : __ldg(xs + col); };
  auto as_out = [&](float v) { return round_to(p.out_dtype, v); };
  if constexpr (kPair) {
    const SkinnySegment& up = p.seg[1];
    for_each_output<8, NT>(p, n0, n, [&](int r, int col, int64_t row) {
      const float xsc = x_scale(col);
      float gs = fmaf(static_cast<float>(sum_of(r, col)) * xsc, __ldg(seg.scales + row / seg.block_rows), 0.0f);
      float us = fmaf(static_cast<float>(sum_of(r + 8, col)) * xsc, __ldg(up.scales + row / up.block_rows), 0.0f);
      if (seg.bias) gs += load_any(seg.bias, seg.bias_dtype, row);
      if (up.bias) us += load_any(up.bias, up.bias_dtype, row);
      store_silu_pair(p, seg.out, n, col, row, gs, us, as_out);
    });
    return;
  }
  for_each_output<kRowsPerTile, NT>(p, n0, n, [&](int r, int col, int64_t row) {
    float v = kBlocks ? static_cast<float>(sum_of(r, col))
                      : fmaf(static_cast<float>(sum_of(r, col)) * x_scale(col), __ldg(seg.scales + row / seg.block_rows), 0.0f);
    if (seg.bias) v += load_any(seg.bias, seg.bias_dtype, row);
    store_output(p, seg.out, n, col, row, v, as_out);
  });
}

// x's eight values from element i (16-byte aligned) of a bf16 / f16 / f32 tensor of dtype t, as floats.
__device__ __forceinline__ void load_x8(const void* x, DType t, int64_t i, float (&v)[8]) {
  if (t == DType::kF32) return load8(static_cast<const float*>(x) + i, v);
  if (t == DType::kBF16) return load8(static_cast<const bf16*>(x) + i, v);
  load8(static_cast<const f16*>(x) + i, v);
}

// The norm's 1 / rms of each token into inv, through norm.cu's own arithmetic (norm_sum.cuh: its lanes per row for
// K, their pieces' squares, their sum): the same bits as the norm kernel.
__device__ __forceinline__ void norm_inv_in_block(const SkinnyGemmLaunch& p, float* inv) {
  static_assert(kWarps * 32 == kNormThreads, "the norm kernel's block");
  const int64_t k = p.k;
  const int tpr = rms_norm_lanes(k / 8);
  const int rows_per_pass = kNormThreads / tpr, lane = static_cast<int>(threadIdx.x) % tpr;
  for (int m0 = 0; m0 < static_cast<int>(p.m); m0 += rows_per_pass) {
    const int m = m0 + static_cast<int>(threadIdx.x) / tpr;
    float ss = 0.0f;
    if (m < p.m) {
      for (int64_t i = int64_t{lane} * 8; i < k; i += int64_t{tpr} * 8) {
        float v[8];
        load_x8(p.x, p.dtype, m * k + i, v);
        ss = add_squares8(v, ss);
      }
    }
    ss = row_sum(ss, tpr);
    if (m < p.m && lane == 0) inv[m] = rms_inv(ss, k, p.norm_eps);
    __syncthreads();  // row_sum's partials are the next pass's (and inv is read after the last)
  }
}

// W8A8 quantizing x in the block: per token, into shared memory ([M][K + kW8QuantXPad] codes and M scales), with
// the quantizer's arithmetic (act_quant.cuh: launch_act_quant's bits). kNorm: the values quantized are norm.cu's
// output, round(x * inv * gamma) in x's dtype. The pad puts the eight tokens' rows a lane group reads at once on
// different banks.
constexpr int64_t kW8QuantXPad = 16;
template <bool kFp8, bool kNorm>
__device__ __forceinline__ void quantize_x_in_block(const SkinnyGemmLaunch& p, int8_t* codes, float* scales) {
  __shared__ float red[kWarps][kSkinnyW8QuantXMaxM];
  __shared__ float inv[kNorm ? kSkinnyW8QuantXMaxM : 1];
  if constexpr (kNorm) norm_inv_in_block(p, inv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k = p.k, stride = k + kW8QuantXPad, step = int64_t{kWarps} * 32 * 8;
  const int m_count = static_cast<int>(p.m);
  auto values = [&](int m, int64_t i, float (&v)[8]) {
    load_x8(p.x, p.dtype, m * k + i, v);
    if constexpr (kNorm) {
      float gamma[8];
      load_x8(p.norm_w, p.dtype, i, gamma);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = round_to(p.dtype, v[e] * inv[m] * gamma[e]);
    }
  };
  for (int m = 0; m < m_count; ++m) {
    float amax = 0.0f;
    for (int64_t i = int64_t{threadIdx.x} * 8; i < k; i += step) {
      float v[8];
      values(m, i, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
    }
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) red[warp][m] = amax;
  }
  __syncthreads();
  for (int m = 0; m < m_count; ++m) {
    float amax = red[0][m];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) amax = fmaxf(amax, red[w][m]);
    const float s = kFp8 ? fp8_act_scale(amax) : int8_act_scale(amax), inv8 = int8_act_inv(amax);
    for (int64_t i = int64_t{threadIdx.x} * 8; i < k; i += step) {
      float v[8];
      values(m, i, v);
      uint32_t q[2] = {0, 0};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const uint32_t b = kFp8 ? fp8_act_code(v[e], s) : int8_act_code(v[e], amax, inv8);
        q[e / 4] |= b << (8 * (e % 4));
      }
      *reinterpret_cast<uint2*>(codes + m * stride + i) = make_uint2(q[0], q[1]);
    }
    if (threadIdx.x == 0) scales[m] = s;
  }
  __syncthreads();
}

// A W8A8 tile's weights: its segment, first row and each lane's two row pointers (rows 0..7 and 8..15 of the mma
// tile; a pair's gate and up rows).
struct W8Tile {
  SkinnySegment seg;
  int64_t n0;
  const uint8_t* wa;
  const uint8_t* wb;
  const float* swa;  // kXBlocks: the rows' block scales (one per 128 k)
  const float* swb;
};

template <bool kPair>
__device__ __forceinline__ void locate_w8_tile(const SkinnyGemmLaunch& p, int64_t tile, W8Tile& r) {
  r.seg = SkinnySegment{};
  if constexpr (kPair) {
    r.seg.w = p.seg[0].w;
    r.seg.bias = p.seg[0].bias;
    r.seg.bias_dtype = p.seg[0].bias_dtype;
    r.seg.out = p.seg[0].out;
    r.seg.n = p.seg[0].n;
    r.seg.scales = p.seg[0].scales;
    r.seg.block_rows = p.seg[0].block_rows;
    r.seg.groups = p.seg[0].groups;
  } else {
    find_segment<Weights::kW8>(p, tile, r.seg);  // tile < the launch's tiles: always found
  }
  const int64_t n = r.seg.n, k = p.k;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  r.n0 = tile * (kPair ? 8 : kRowsPerTile);
  const int64_t ra = r.n0 + g < n ? r.n0 + g : n - 1;  // rows past n read the last row; never stored
  const int64_t rb = kPair ? ra : r.n0 + g + 8 < n ? r.n0 + g + 8 : n - 1;
  r.wa = static_cast<const uint8_t*>(r.seg.w) + ra * k + 32 * t;
  r.wb = static_cast<const uint8_t*>(kPair ? p.seg[1].w : r.seg.w) + rb * k + 32 * t;
  r.swa = r.seg.scales + (ra / r.seg.block_rows) * r.seg.groups;
  r.swb = (kPair ? p.seg[1].scales : r.seg.scales) + (rb / r.seg.block_rows) * r.seg.groups;
}

// U chunks loaded, then computed, round after round; a block takes a run of consecutive tiles (a wave of fat
// blocks: the first round of its next tile goes out before the current tile's epilogue, and the in-block
// quantizer runs once per block). kX (W8X): where x's codes come from and the fusions; with the block's own
// quantizer, x is quantized into dynamic shared memory after the first round of weights has gone out. kXPair: a
// tile is 8 rows of gate (segment 0) and the same 8 of up (segment 1).
template <bool kFp8, int NT, int U, int MINB, int kX = kXCodes>
__global__ void __launch_bounds__(kWarps * 32, MINB) skinny_w8a8_kernel(SkinnyGemmLaunch p) {
  constexpr bool kInBlock = kX != kXCodes && kX != kXBlocks, kPair = kX == kXPair, kBlocks = kX == kXBlocks;
  static_assert(!kInBlock || 8 * NT <= kSkinnyW8QuantXMaxM, "the in-block quantizer's tokens");
  extern __shared__ __align__(16) int8_t x_codes[];  // kInBlock: [M][K + kW8QuantXPad]
  __shared__ float x_scales[kInBlock ? kSkinnyW8QuantXMaxM : 1];
  // The grid's blocks split the tiles evenly: consecutive runs, the first tiles % blocks of them one tile longer.
  const int tiles = static_cast<int>(p.tiles), blocks = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const int q = tiles / blocks, extra = tiles % blocks;
  const int first = b * q + min(b, extra);
  const int last = first + q + (b < extra ? 1 : 0);
  if (first >= last) return pdl_wait();  // whole block: uniform
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t k = p.k, chunks = k / 128;
  const uint4 z = make_uint4(0, 0, 0, 0);
  auto load = [&](const W8Tile& r, int64_t c, uint4 (&la)[2], uint4 (&lb)[2]) {
    const bool in_k = c < chunks;  // warp-uniform
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      la[h] = in_k ? __ldcs(reinterpret_cast<const uint4*>(r.wa + c * 128 + 16 * h)) : z;
      lb[h] = in_k ? __ldcs(reinterpret_cast<const uint4*>(r.wb + c * 128 + 16 * h)) : z;
    }
  };
  W8Tile cur;
  locate_w8_tile<kPair>(p, first, cur);
  uint4 a[U][2], b8[U][2];
  // The first round of weights goes out before the wait for the kernel before (launch_pdl): no kernel writes them;
  // x (or its codes, the quantizer's output) is read after it.
#pragma unroll
  for (int u = 0; u < U; ++u) load(cur, warp + int64_t{u} * kWarps, a[u], b8[u]);
  if constexpr (kX == kXNorm || kX == kXPair) {
    // The norm's weights (no kernel writes them) into L1 meanwhile: the quantizer's passes read them there.
    const char* gamma = static_cast<const char*>(p.norm_w);
    for (int64_t b = int64_t{threadIdx.x} * 128; b < k * 2; b += int64_t{kWarps} * 32 * 128)
      asm volatile("prefetch.global.L1 [%0];" ::"l"(gamma + b));
  }
  pdl_wait();
  pdl_trigger();
  const int8_t* xq = p.xq;
  int64_t xstride = k;
  const float* xs = p.xs;
  if constexpr (kInBlock) {
    quantize_x_in_block<kFp8, kX == kXNorm || kX == kXPair>(p, x_codes, x_scales);
    xq = x_codes;
    xstride = k + kW8QuantXPad;
    xs = x_scales;
  }
  for (int tile = first; tile < last; ++tile) {
    W8Acc<kFp8> acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0;
    for (int64_t c0 = warp; c0 < chunks; c0 += int64_t{kWarps} * U) {
      if (c0 != warp) {
#pragma unroll
        for (int u = 0; u < U; ++u) load(cur, c0 + int64_t{u} * kWarps, a[u], b8[u]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + int64_t{u} * kWarps;
        if (c >= chunks) break;  // warp-uniform; depends on K alone
        w8a8_chunk<kFp8, NT, kInBlock, kBlocks>(acc, a[u], b8[u], p, xq, xstride, c, g, t,
                                                W8BlockScales{cur.swa, cur.swb, xs});
      }
    }
    // The next tile's first round goes out before this one's epilogue.
    const bool more = tile + 1 < last;  // block-uniform
    W8Tile next = cur;
    if (more) {
      locate_w8_tile<kPair>(p, tile + 1, next);
#pragma unroll
      for (int u = 0; u < U; ++u) load(next, warp + int64_t{u} * kWarps, a[u], b8[u]);
    }
    store_w8a8_tile<kFp8, NT, kInBlock, kPair, kBlocks>(p, cur.seg, cur.n0, acc, xs);
    if (!more) break;
    __syncthreads();  // the epilogue's shared partials are the next tile's
    cur = next;
  }
}

// x's codes given (kXCodes, or kXBlocks): n-tiles, chunks ahead and blocks per SM by M.
template <bool kFp8, int kX>
void launch_w8a8_codes(dim3 grid, dim3 block, cudaStream_t stream, const SkinnyGemmLaunch& l) {
  if (l.m <= 8)
    launch_pdl(skinny_w8a8_kernel<kFp8, 1, 4, 2, kX>, grid, block, 0, stream, l.m, l);
  else if (l.m <= 16)
    launch_pdl(skinny_w8a8_kernel<kFp8, 2, 2, 2, kX>, grid, block, 0, stream, l.m, l);
  else
    launch_pdl(skinny_w8a8_kernel<kFp8, 4, 2, 1, kX>, grid, block, 0, stream, l.m, l);
}

template <bool kFp8>
void launch_w8a8_typed(const SkinnyGemmLaunch& launch, cudaStream_t stream) {
  SkinnyGemmLaunch l = launch;
  l.tiles = 0;
  if (l.silu_pair) {
    l.tiles = (l.seg[0].n + 7) / 8;
  } else {
    for (int s = 0; s < l.num_segments; ++s) l.tiles += segment_tiles(l.seg[s].n);
  }
  // One wave of blocks (blocks per SM times the SMs, or fewer when there are fewer tiles), the tiles split evenly
  // among them in consecutive runs; PEREGRINE_W8_TILES_PER_BLOCK=N makes runs of about N (comparisons; 1 = a tile
  // a block), PEREGRINE_W8_BLOCKS_PER_SM=N the blocks an SM gets (comparisons; default: as many as fit, 2 at M <= 16,
  // else 1).
  static const int64_t fixed = [] {
    const char* v = std::getenv("PEREGRINE_W8_TILES_PER_BLOCK");
    return v ? std::max<int64_t>(1, std::atoll(v)) : int64_t{0};
  }();
  static const int per_sm = [] {
    const char* v = std::getenv("PEREGRINE_W8_BLOCKS_PER_SM");
    return v ? std::max(1, std::atoi(v)) : 0;
  }();
  const int minb = per_sm > 0 ? per_sm : l.m <= 16 ? 2 : 1;
  const int64_t slots = std::max<int64_t>(1, static_cast<int64_t>(l.sm_count) * minb);
  const int64_t blocks = fixed > 0 ? (l.tiles + fixed - 1) / fixed : std::min(l.tiles, slots);
  const dim3 grid(static_cast<unsigned>(blocks)), block(kWarps * 32);
  const size_t x_bytes = l.quantize_x ? static_cast<size_t>(l.m * (l.k + kW8QuantXPad)) : 0;
  if (skinny_w8a8_blocks(l)) {  // FP8 only (skinny_w8a8_takes)
    if constexpr (kFp8) launch_w8a8_codes<kFp8, kXBlocks>(grid, block, stream, l);
    return;
  }
  if (l.silu_pair)
    launch_pdl(skinny_w8a8_kernel<kFp8, 1, 4, 2, kXPair>, grid, block, x_bytes, stream, l.m, l);
  else if (l.norm_w)
    launch_pdl(skinny_w8a8_kernel<kFp8, 1, 4, 2, kXNorm>, grid, block, x_bytes, stream, l.m, l);
  else if (l.quantize_x)
    launch_pdl(skinny_w8a8_kernel<kFp8, 1, 4, 2, kXQuant>, grid, block, x_bytes, stream, l.m, l);
  else
    launch_w8a8_codes<kFp8, kXCodes>(grid, block, stream, l);
}

}  // namespace

bool skinny_gemm_supports(const SkinnyGemmLaunch& l) {
  if (l.dtype != DType::kBF16 && l.dtype != DType::kF16) return false;
  if (l.out_dtype != DType::kBF16 && l.out_dtype != DType::kF16 && l.out_dtype != DType::kF32) return false;
  if (l.m < 1 || l.m > kSkinnyMaxM || l.k < 8 || l.k % 8 != 0) return false;
  if (l.num_segments < 1 || l.num_segments > kSkinnyMaxSegments || !aligned16(l.x)) return false;
  const bool quantized = l.codes == DType::kI4 || l.codes == DType::kU8;
  if (quantized && l.k % 16 != 0) return false;
  for (int s = 0; s < l.num_segments; ++s) {
    const SkinnySegment& g = l.seg[s];
    if (g.n < 1 || !aligned16(g.w)) return false;
    if (quantized && (!g.scales || g.group_size < 16 || g.group_size % 16 != 0 || g.groups * g.group_size != l.k))
      return false;
  }
  return true;
}

bool skinny_gemm_fuses(const SkinnyGemmLaunch& l) {
  if (!skinny_gemm_supports(l)) return false;
  const bool fused = l.norm_w || l.residual || l.silu_pair;
  if (!fused) return true;
  if (l.codes == DType::kI4 || l.codes == DType::kU8) {
    if (skinny_plain()) return false;
    for (int s = 0; s < l.num_segments; ++s)
      if (l.seg[s].group_size % 128 != 0) return false;  // the plain code path has no fusions
  }
  // The norm's weights go to shared memory (K values of x's dtype, within the 48 KB a launch has without opt-in).
  if (l.norm_w && (!aligned16(l.norm_w) || l.k * 2 > kSkinnyNormMaxBytes)) return false;
  if ((l.residual || l.silu_pair) && l.out_dtype != l.dtype) return false;
  if (l.residual && l.num_segments != 1) return false;
  if (l.silu_pair) {
    const SkinnySegment &a = l.seg[0], &b = l.seg[1];
    if (l.residual || l.num_segments != 2 || a.n != b.n || a.groups != b.groups || a.group_size != b.group_size ||
        (a.scales == nullptr) != (b.scales == nullptr) || (a.zeros == nullptr) != (b.zeros == nullptr) ||
        (b.bias && a.bias && a.bias_dtype != b.bias_dtype) || (b.bias && !a.bias))
      return false;
  }
  return true;
}

void set_skinny_fact3(int mode) { g_fact3.store(mode, std::memory_order_relaxed); }

void launch_skinny_gemm(const SkinnyGemmLaunch& launch, cudaStream_t stream) {
  if (launch.norm_w || launch.residual || launch.silu_pair)
    PEREGRINE_CHECK(skinny_gemm_fuses(launch), "skinny matmul: fusions asked of a launch that does not take them");
  static const bool no_fold = [] {
    const char* e = std::getenv("PEREGRINE_SKINNY_FOLD");
    return e && std::string_view(e) == "0";
  }();
  SkinnyGemmLaunch l = launch;
  if (no_fold) l.fold_zeros = false;
  if (l.dtype == DType::kBF16) return launch_format<bf16>(l, stream);
  launch_format<f16>(l, stream);
}

bool skinny_ggml_takes(const SkinnyGemmLaunch& l) {
  if (l.out_dtype != DType::kBF16 && l.out_dtype != DType::kF16 && l.out_dtype != DType::kF32) return false;
  if (l.m < 1 || l.m > kSkinnyGgmlMaxM || !ggml_packable(l.ggml, l.k)) return false;
  if (l.num_segments < 1 || l.num_segments > kSkinnyMaxSegments) return false;
  for (int s = 0; s < l.num_segments; ++s) {
    const SkinnySegment& g = l.seg[s];
    if (g.n < 1 || !aligned16(g.w) || !aligned16(g.meta)) return false;
  }
  return true;
}

bool skinny_ggml_supports(const SkinnyGemmLaunch& l) {
  if (!skinny_ggml_takes(l)) return false;
  if (!l.xq || !l.xd || !l.xsum || !aligned16(l.xq) || !aligned16(l.xd) || !aligned16(l.xsum)) return false;
  return l.ggml != GgmlType::kQ6_K || (l.xsum16 && aligned16(l.xsum16));
}

void launch_skinny_ggml(const SkinnyGemmLaunch& l, cudaStream_t stream) {
  switch (l.ggml) {
    case GgmlType::kQ8_0: return launch_ggml_typed<GgmlType::kQ8_0>(l, stream);
    case GgmlType::kQ4_0: return launch_ggml_typed<GgmlType::kQ4_0>(l, stream);
    case GgmlType::kQ5_0: return launch_ggml_typed<GgmlType::kQ5_0>(l, stream);
    case GgmlType::kQ4_K: return launch_ggml_typed<GgmlType::kQ4_K>(l, stream);
    case GgmlType::kQ5_K: return launch_ggml_typed<GgmlType::kQ5_K>(l, stream);
    case GgmlType::kQ6_K: return launch_ggml_typed<GgmlType::kQ6_K>(l, stream);
    default: throw Error(ErrorCode::kUnsupported, "cuda: no int8 skinny kernel for ggml type " + ggml_type_name(l.ggml));
  }
}

bool skinny_w8a8_quantizes(const SkinnyGemmLaunch& l) {
  return l.m >= 1 && l.m <= kSkinnyW8QuantXMaxM && l.k % 128 == 0 && l.m * (l.k + kW8QuantXPad) <= kSkinnyW8QuantXMaxBytes &&
         aligned16(l.x) && (l.dtype == DType::kBF16 || l.dtype == DType::kF16 || l.dtype == DType::kF32);
}

bool skinny_w8a8_takes(const SkinnyGemmLaunch& l) {
  const bool fp8 = l.codes == DType::kF8E4M3;
  if (!fp8 && l.codes != DType::kI8) return false;
  if (l.out_dtype != DType::kBF16 && l.out_dtype != DType::kF16 && l.out_dtype != DType::kF32) return false;
  if (l.m < 1 || l.m > (fp8 ? kSkinnyW8F8MaxM : kSkinnyW8I8MaxM) || l.k < 128 || l.k % 128 != 0) return false;
  if (l.quantize_x && !skinny_w8a8_quantizes(l)) return false;
  if (l.num_segments < 1 || l.num_segments > kSkinnyMaxSegments) return false;
  // 128 x 128 FP8 blocks (groups K / 128 in every segment, or per channel in every one): a tile's rows within one
  // block row, x's codes given (a scale per token and 128 k), no norm or pair fusion (they quantize x per token).
  const bool blocks = skinny_w8a8_blocks(l);
  for (int s = 0; s < l.num_segments; ++s) {
    const SkinnySegment& g = l.seg[s];
    if (g.n < 1 || !aligned16(g.w) || !g.scales || g.block_rows < 1) return false;
    if ((g.groups > 1) != blocks) return false;
    if (blocks && (g.groups != l.k / 128 || g.block_rows % kRowsPerTile != 0)) return false;
  }
  if (blocks && (!fp8 || l.quantize_x || l.norm_w || l.silu_pair)) return false;
  if (!l.norm_w && !l.residual && !l.silu_pair) return true;
  // The fusions: bf16 / f16 x; the norm (and the pair, which needs it) quantizes x in the block; the residual add and
  // the pair write x's dtype.
  const bool b16 = l.dtype == DType::kBF16 || l.dtype == DType::kF16;
  if (!b16) return false;
  if (l.norm_w && (!l.quantize_x || !aligned16(l.norm_w) || l.residual)) return false;
  if ((l.residual || l.silu_pair) && l.out_dtype != l.dtype) return false;
  if (l.residual && l.num_segments != 1) return false;
  if (l.silu_pair) {
    const SkinnySegment &a = l.seg[0], &b = l.seg[1];
    if (!l.norm_w || l.num_segments != 2 || a.n != b.n) return false;
  }
  return true;
}

void launch_skinny_w8a8(const SkinnyGemmLaunch& l, cudaStream_t stream) {
  PEREGRINE_CHECK(skinny_w8a8_takes(l), "skinny W8A8 matmul: a launch (or fusion) the kernel does not take");
  PEREGRINE_CHECK(l.quantize_x || (l.xq && l.xs && aligned16(l.xq)), "skinny W8A8 matmul: x's codes not given");
  if (l.codes == DType::kF8E4M3) return launch_w8a8_typed<true>(l, stream);
  launch_w8a8_typed<false>(l, stream);
}

}  // namespace peregrine::cuda
