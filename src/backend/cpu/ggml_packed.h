// GGUF blocks repacked once at load for the AVX-512 VNNI kernels (Backend::pack_weight): "lanes as outputs".
//
// The plain kernels (ggml_kernels_impl.h) give each output an 8-lane accumulator and end with a horizontal sum;
// here one 512-bit vector holds 16 outputs, one int32 lane per weight row, so a block's integer sum, its int->f32
// convert and its FMA with the scales cover 16 rows at once, x's codes are broadcast 4 bytes at a time from the
// plain int8 layout (vpdpbusd {1to16}), and no horizontal sum is left. Rows are taken in groups of 16 (the last
// group padded with zero blocks); a group's blocks are contiguous in k order, so an M = 1 kernel reads one
// sequential stream per group. Per block b of a group (r = row in the group, 0..15):
//   32-value types (ggml_packed_32): [d: f16 x 16][m: f16 x 16, Q4_1/Q5_1][chunks c: 16 rows x 4 code bytes (64 B)]
//        [Q5: per chunk c two 64-bit masks, bit 4r + i the high bit of value 4c + i / 16 + 4c + i of row r].
//     Q4_0 (288 B = 16 x 18), Q4_1 (320 = 16 x 20), Q5_0 (352 = 16 x 22), Q5_1 (384 = 16 x 24): 4 chunks of
//        qs[4c .. 4c+3]; chunk c's low nibbles are values 4c..4c+3, its high nibbles values 16+4c..16+4c+3.
//     Q8_0 (544 B = 16 x 34): 8 chunks of qs[4c .. 4c+3] ^ 0x80 — codes as u8 w + 128 (the +128 is taken off
//        through the x block's sum, as Q4_0's -8 and Q5_0's -16).
//   Q4_K (2368 B = 16 x 148, one 256-value super-block): [d x 16][dmin x 16][scales: 8 sub-blocks x 16 rows u8]
//        [mins: 8 x 16 u8][4 sub-block pairs j x 8 chunks c x 16 rows x qs[32j + 4c .. +3]] — the 6-bit scales
//        unpacked at load (+4 bytes a row per super-block, 2.8 %), the nibbles as Q4_0's.
//   Q5_K (2880 B = 16 x 180): Q4_K's layout, then per (j, c) two 64-bit masks of the high bits (values
//        64j + 4c + i and 64j + 32 + 4c + i), as Q5_0's.
//   Q6_K (3360 B = 16 x 210): [d x 16][scales: 16 sub-blocks x 16 rows int8][4 segments (h, cc): S0 of steps
//        c = 4cc .. 4cc+3, then S1 of them, then S2 (vectors of 16 rows x 4 bytes)] — step (h, c) holds the 6-bit
//        codes q_t of values 128h + 32t + 4c + i, t = 0..3, as S_t = q_t | (two bits of q_3) << 6 (S0: q_3's
//        bits 0-1, S1: 2-3, S2: 4-5), so q_0..q_2 are one AND each and a segment is read front to back.
// NOTE determinism: per output, each block's integer sum is exact (int32, any summation order), then
// acc = fma(f32(isum), d_w * d_x, acc) block after block in k order (the types with a min: then the min term),
// then + bias: the same whatever M, the tile, or the split over groups / rows, so a row's bits never depend on
// the batch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_quant.h"

namespace peregrine::cpu {

constexpr int64_t kGgmlPackRows = 16;

// The types with a packed layout: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
bool ggml_packable(GgmlType t);
// Geometry of a packed block of the 32-value types (byte offsets within one block of 16 rows).
struct GgmlPacked32 {
  int64_t block = 0;     // bytes of one block of 16 rows
  int chunks = 0;        // 64-byte code vectors per block
  bool has_min = false;  // Q4_1 / Q5_1: w = d * q + m
  bool has_high = false; // Q5_0 / Q5_1: the fifth bit in masks
  int offset = 0;        // the code offset taken off through the x block's sum (8, 16, 128; 0 with a min)
  int qs_at = 0;         // the codes in the file's block
  int codes_at = 0;      // the code vectors in the packed block
  int masks_at = 0;      // the high-bit masks in the packed block
};
constexpr GgmlPacked32 ggml_packed_32(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return {288, 4, false, false, 8, 2, 32, 0};
    case GgmlType::kQ4_1: return {320, 4, true, false, 0, 4, 64, 0};
    case GgmlType::kQ5_0: return {352, 4, false, true, 16, 6, 32, 288};
    case GgmlType::kQ5_1: return {384, 4, true, true, 0, 8, 64, 320};
    case GgmlType::kQ8_0: return {544, 8, false, false, 128, 2, 32, 0};
    default: return {};
  }
}
// Bytes of one packed group of 16 rows of k values, and of a whole packed weight of n rows.
int64_t ggml_packed_group_bytes(GgmlType t, int64_t k);
size_t ggml_packed_bytes(GgmlType t, int64_t n, int64_t k);
// Groups [g0, g1) of w (n rows of row_bytes, ggml blocks of type t) into out (the whole packed buffer).
void ggml_pack_groups(GgmlType t, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out,
                      int64_t g0, int64_t g1);

struct GgmlPackedArgs {
  GgmlType type = GgmlType::kNone;
  const uint8_t* w = nullptr;   // packed groups
  int64_t group_bytes = 0;
  const int8_t* xq = nullptr;   // [M, K] plain int8 codes (no pair layout)
  const float* xd = nullptr;    // [M, K / qk] block scales of x
  const int16_t* xs = nullptr;  // [M, K / 16] sums of every 16 codes
  const float* bias = nullptr;  // [N] or null
  float* out = nullptr;         // [M, N]
  int64_t m = 0, k = 0, n = 0;
};

// Rows [m0, m1) of x against groups [g0, g1); null when the build has no such kernels.
using GgmlPackedMatmulFn = void (*)(const GgmlPackedArgs& a, int64_t m0, int64_t m1, int64_t g0, int64_t g1);
GgmlPackedMatmulFn ggml_vnni_packed_matmul();
GgmlPackedMatmulFn ggml_avx2_packed_matmul();  // the same layout as two slabs of 8 rows per group (AVX2 + FMA + F16C)

}  // namespace peregrine::cpu
