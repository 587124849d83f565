// CPU kernels on GGUF blocks (llama.cpp's Q4_0 ... Q6_K, core/ggml_quant.h): one table per ISA (portable,
// AVX2, AVX-512 VNNI), each compiled in its own translation unit (ggml_kernels_*.cpp over ggml_kernels_impl.h).
//
// The matmul quantizes each row of x once per call to int8 in blocks of 32 values (32-value weight types) or 256
// (K-quants), scale amax / 127, with the int16 sums of every 16 values, as llama.cpp's CPU matmuls do; the
// kernels then take integer dot products of weight codes and x codes (VNNI vpdpbusd, or AVX2 maddubs + madd) and
// turn each block's integer sum into f32 once. Weight blocks are read once per tile of rows of x and decoded in
// registers; nothing full-precision is written.
// NOTE determinism: every output element is one 8-lane f32 accumulator fed block by block in k order (per block:
// integer lane sums, then an FMA with the block's f32 scale product), then a fixed horizontal sum, + bias; the
// tile shape, M and the range split change nothing, so a row's bits never depend on the batch.
#pragma once

#include <cstdint>

#include "core/ggml_quant.h"

namespace peregrine::cpu {

// x prepared for the ggml matmul: per row, the int8 codes, the f32 scale of every block of qk, the int16 sums
// of every 16 codes. For the 4/5-bit 32-value types (Q4_0, Q4_1, Q5_0, Q5_1) the codes of blocks 2p and 2p + 1
// are laid out as [2p: 0..15 | 2p+1: 0..15 | 2p: 16..31 | 2p+1: 16..31] (so one 32-byte vector of nibbles of two
// weight blocks meets its x codes) and each such pair p has 8 int32 lane offsets ([-offset * sum(2p), 0, 0, 0,
// -offset * sum(2p+1), 0, 0, 0]) and 16 floats ([d(2p) x4, d(2p+1) x4], [d(2p) * sum(2p), 0, 0, 0, d(2p+1) *
// sum(2p+1), 0, 0, 0]); a last unpaired block has zeros in place of its partner.
struct GgmlQuantizedX {
  const int8_t* q = nullptr;         // [M, q_stride]
  int64_t q_stride = 0;              // K, or K rounded up to 64 for the paired layout
  const float* d = nullptr;          // [M, K / qk]
  const int16_t* sums = nullptr;     // [M, K / 16]
  const int32_t* pair_off = nullptr; // [M, pairs, 8] (paired layout only)
  const float* pair_f = nullptr;     // [M, pairs, 16] (paired layout only)
};

// The block size x is quantized in for a weight type: 32, or 256 for the K-quants.
inline int64_t ggml_x_block(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K ? 256 : 32;
}

// True for the types whose x uses the paired layout; the code offset those kernels subtract (8 for Q4_0, 16 for
// Q5_0, 0 for the types with a min).
inline bool ggml_x_paired(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1;
}
inline int ggml_x_offset(GgmlType t) {
  return t == GgmlType::kQ4_0 ? 8 : t == GgmlType::kQ5_0 ? 16 : 0;
}
// Sizes of the prepared x per row: codes (q_stride), pairs.
inline int64_t ggml_x_q_stride(GgmlType t, int64_t k) {
  return ggml_x_paired(t) ? (k + 63) / 64 * 64 : k;
}
inline int64_t ggml_x_pairs(GgmlType t, int64_t k) {
  return ggml_x_paired(t) ? (k / 32 + 1) / 2 : 0;
}

struct GgmlMatmulArgs {
  GgmlType type = GgmlType::kNone;
  const uint8_t* w = nullptr;  // [N, row_bytes]
  int64_t row_bytes = 0;
  GgmlQuantizedX x;
  const float* bias = nullptr;  // [N] or null
  float* out = nullptr;         // [M, N]
  int64_t m = 0, k = 0, n = 0;
};

struct GgmlKernelTable {
  const char* name = "";
  // Rows [0, rows) of x [rows, k] into the GgmlQuantizedX layout for weight type t (out's pointers at row 0;
  // out.q_stride the row stride of the codes; pair_off null: the plain layout, as for the unpaired types).
  void (*quantize_x)(const float* x, int64_t rows, int64_t k, GgmlType t, const GgmlQuantizedX& out) = nullptr;
  // Columns [n_begin, n_end) of rows [m_begin, m_end); every supported block type.
  void (*matmul)(const GgmlMatmulArgs& a, int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end) = nullptr;
};

const GgmlKernelTable& ggml_scalar_kernels();
// Null when the build has no such kernels (non-x86 target); callers check the CPU separately.
const GgmlKernelTable* ggml_avx2_kernels();
const GgmlKernelTable* ggml_vnni_kernels();  // AVX-512 F/BW/VL + VNNI

}  // namespace peregrine::cpu
