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

}  // namespace

bool ggml_packable(GgmlType t) { return t == GgmlType::kQ4_0 || t == GgmlType::kQ8_0 || t == GgmlType::kQ4_K; }

int64_t ggml_packed_group_bytes(GgmlType t, int64_t k) {
  switch (t) {
    case GgmlType::kQ4_0: return k / 32 * R * 18;
    case GgmlType::kQ8_0: return k / 32 * R * 34;
    case GgmlType::kQ4_K: return k / 256 * R * 148;
    default: return 0;
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
    std::memset(dst, 0, static_cast<size_t>(gb));  // padded rows: zero scales and codes
    for (int64_t r = 0; r < R && g * R + r < n; ++r) {
      const uint8_t* row = w + (g * R + r) * row_bytes;
      if (t == GgmlType::kQ4_0 || t == GgmlType::kQ8_0) {
        const bool q8 = t == GgmlType::kQ8_0;
        const int64_t src_bytes = q8 ? 34 : 18, dst_bytes = R * src_bytes, chunks = q8 ? 8 : 4;
        for (int64_t b = 0; b < k / 32; ++b) {
          const uint8_t* s = row + b * src_bytes;
          uint8_t* d = dst + b * dst_bytes;
          std::memcpy(d + 2 * r, s, 2);
          for (int64_t c = 0; c < chunks; ++c)
            for (int64_t i = 0; i < 4; ++i) {
              const uint8_t v = s[2 + 4 * c + i];
              d[32 + 64 * c + 4 * r + i] = q8 ? static_cast<uint8_t>(v ^ 0x80) : v;
            }
        }
      } else {  // Q4_K
        for (int64_t b = 0; b < k / 256; ++b) {
          const uint8_t* s = row + b * 144;
          uint8_t* d = dst + b * R * 148;
          std::memcpy(d + 2 * r, s, 2);
          std::memcpy(d + 32 + 2 * r, s + 2, 2);
          for (int sb = 0; sb < 8; ++sb) scale_min_k4(s + 4, sb, d + 64 + 16 * sb + r, d + 192 + 16 * sb + r);
          for (int64_t j = 0; j < 4; ++j)
            for (int64_t c = 0; c < 8; ++c) std::memcpy(d + 320 + 512 * j + 64 * c + 4 * r, s + 16 + 32 * j + 4 * c, 4);
        }
      }
    }
  }
}

}  // namespace peregrine::cpu

#if !(defined(__x86_64__) || defined(_M_X64))
namespace peregrine::cpu {
GgmlPackedMatmulFn ggml_vnni_packed_matmul() { return nullptr; }  // x86 only (ggml_packed_vnni.cpp)
}  // namespace peregrine::cpu
#endif
