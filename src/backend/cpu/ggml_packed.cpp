// The packed GGUF layouts (ggml_packed.h): the repacking, portable code run once at load.
#include "backend/cpu/ggml_packed.h"

#include <cstring>

namespace peregrine::cpu {
namespace {

constexpr int64_t R = kGgmlPackRows;

// Q4_K's 6-bit scale and min of sub-block s from the 12 packed bytes.
void scale_min_k4(const uint8_t* q, int s, uint8_t* sc, uint8_t* m) {
  if (s < 4) {
    *sc = q[s] & 63;
    *m = q[s + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[s + 4] & 0x0f) | ((q[s - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[s + 4] >> 4) | ((q[s] >> 6) << 4));
  }
}

// Bit 4r + i of the 64-bit mask at `mask` (row r of the group, value i of a 4-value chunk) set to `bit`.
void set_mask_bit(uint8_t* mask, int64_t r, int64_t i, bool bit) {
  const int64_t pos = 4 * r + i;
  if (bit) mask[pos / 8] = static_cast<uint8_t>(mask[pos / 8] | (1u << (pos % 8)));
}

// The 32-value types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (layouts in ggml_packed.h).
void pack_row_32(GgmlType t, const uint8_t* row, int64_t r, int64_t k, uint8_t* dst) {
  const GgmlPacked32 f = ggml_packed_32(t);
  const int64_t src_bytes = ggml_block_info(t)->type_size;
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* s = row + b * src_bytes;
    uint8_t* d = dst + b * f.block;
    std::memcpy(d + 2 * r, s, 2);
    if (f.has_min) std::memcpy(d + 32 + 2 * r, s + 2, 2);
    uint32_t qh = 0;
    if (f.has_high) std::memcpy(&qh, s + (f.has_min ? 4 : 2), 4);
    const uint8_t* qs = s + f.qs_at;
    for (int64_t c = 0; c < f.chunks; ++c)
      for (int64_t i = 0; i < 4; ++i) {
        const uint8_t v = qs[4 * c + i];
        d[f.codes_at + 64 * c + 4 * r + i] = t == GgmlType::kQ8_0 ? static_cast<uint8_t>(v ^ 0x80) : v;
        if (f.has_high) {
          set_mask_bit(d + f.masks_at + 16 * c, r, i, (qh >> (4 * c + i)) & 1u);
          set_mask_bit(d + f.masks_at + 16 * c + 8, r, i, (qh >> (16 + 4 * c + i)) & 1u);
        }
      }
  }
}

// Q4_K and Q5_K: one 256-value super-block per step.
void pack_row_k45(GgmlType t, const uint8_t* row, int64_t r, int64_t k, uint8_t* dst) {
  const bool q5 = t == GgmlType::kQ5_K;
  const int64_t src_bytes = q5 ? 176 : 144, block = q5 ? 2880 : 2368;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* s = row + b * src_bytes;
    const uint8_t* qh = s + 16;
    const uint8_t* qs = s + (q5 ? 48 : 16);
    uint8_t* d = dst + b * block;
    std::memcpy(d + 2 * r, s, 2);
    std::memcpy(d + 32 + 2 * r, s + 2, 2);
    for (int sb = 0; sb < 8; ++sb) scale_min_k4(s + 4, sb, d + 64 + 16 * sb + r, d + 192 + 16 * sb + r);
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t c = 0; c < 8; ++c) {
        std::memcpy(d + 320 + 512 * j + 64 * c + 4 * r, qs + 32 * j + 4 * c, 4);
        if (!q5) continue;
        for (int64_t i = 0; i < 4; ++i) {
          const uint8_t h = qh[4 * c + i];
          set_mask_bit(d + 2368 + 128 * j + 16 * c, r, i, (h >> (2 * j)) & 1u);
          set_mask_bit(d + 2368 + 128 * j + 16 * c + 8, r, i, (h >> (2 * j + 1)) & 1u);
        }
      }
  }
}

// Q6_K: [d x 16][scales: 16 sub-blocks x 16 rows][4 segments (h, cc) x [S0 x 4 steps][S1 x 4][S2 x 4]]. Step
// (h, c = 4cc + c4) holds the 6-bit codes q_t of values 128h + 32t + 4c + i (t = 0..3) as S_t = q_t | (2 bits of
// q_3) << 6 for t < 3: S0 takes q_3's bits 0-1, S1 bits 2-3, S2 bits 4-5 — the file's 210 bytes a row per
// super-block, regrouped so the kernel reads each segment front to back (t = 0, 1, 2; t = 3 from L1).
void pack_row_q6_k(const uint8_t* row, int64_t r, int64_t k, uint8_t* dst) {
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* s = row + b * 210;
    uint8_t* d = dst + b * 3360;
    std::memcpy(d + 2 * r, s + 208, 2);
    for (int sb = 0; sb < 16; ++sb) d[32 + 16 * sb + r] = s[192 + sb];
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t c = 0; c < 8; ++c)
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t l = 4 * c + i;
          const uint8_t qa = s[64 * h + l], qb = s[64 * h + 32 + l], qh = s[128 + 32 * h + l];
          const int q0 = (qa & 0x0f) | ((qh & 3) << 4), q1 = (qb & 0x0f) | (((qh >> 2) & 3) << 4);
          const int q2 = (qa >> 4) | (((qh >> 4) & 3) << 4), q3 = (qb >> 4) | (((qh >> 6) & 3) << 4);
          uint8_t* v = d + 288 + 768 * (2 * h + c / 4) + 64 * (c % 4) + 4 * r + i;
          v[0] = static_cast<uint8_t>(q0 | ((q3 & 3) << 6));
          v[256] = static_cast<uint8_t>(q1 | (((q3 >> 2) & 3) << 6));
          v[512] = static_cast<uint8_t>(q2 | (((q3 >> 4) & 3) << 6));
        }
  }
}

}  // namespace

bool ggml_packable(GgmlType t) { return ggml_is_supported_block_type(t); }  // every block type the loader takes

int64_t ggml_packed_group_bytes(GgmlType t, int64_t k) {
  switch (t) {
    case GgmlType::kQ4_K: return k / 256 * 2368;
    case GgmlType::kQ5_K: return k / 256 * 2880;
    case GgmlType::kQ6_K: return k / 256 * 3360;
    default: return k / 32 * ggml_packed_32(t).block;
  }
}

size_t ggml_packed_bytes(GgmlType t, int64_t n, int64_t k) {
  return static_cast<size_t>((n + R - 1) / R * ggml_packed_group_bytes(t, k));
}

void ggml_pack_groups(GgmlType t, const uint8_t* w, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out,
                      int64_t g0, int64_t g1) {
  const int64_t gb = ggml_packed_group_bytes(t, k);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = out + g * gb;
    std::memset(dst, 0, static_cast<size_t>(gb));  // padded rows: zero scales, codes and high bits
    for (int64_t r = 0; r < R && g * R + r < n; ++r) {
      const uint8_t* row = w + (g * R + r) * row_bytes;
      if (t == GgmlType::kQ4_K || t == GgmlType::kQ5_K) pack_row_k45(t, row, r, k, dst);
      else if (t == GgmlType::kQ6_K) pack_row_q6_k(row, r, k, dst);
      else pack_row_32(t, row, r, k, dst);
    }
  }
}

}  // namespace peregrine::cpu

#if !(defined(__x86_64__) || defined(_M_X64))
namespace peregrine::cpu {
GgmlPackedMatmulFn ggml_vnni_packed_matmul() { return nullptr; }  // x86 only (ggml_packed_vnni.cpp)
GgmlPackedMatmulFn ggml_avx2_packed_matmul() { return nullptr; }  // x86 only (ggml_packed_avx2.cpp)
}  // namespace peregrine::cpu
#endif
