// Random ggml (GGUF) blocks for kernel tests, CPU and CUDA: every byte random (so every code value, every packed
// 6-bit scale and min, every high bit occurs), then the f16 super-scales (d, and dmin / m where the type has one)
// replaced by random finite halves of either sign, scaled so that a dot product over K stays O(1).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/ggml_quant.h"

namespace peregrine::test {

inline void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Byte offsets of the f16 fields of one block: the scale, and the min (or dmin), -1 where there is none.
struct GgmlHalfFields {
  int d = 0, m = -1;
};
inline GgmlHalfFields ggml_half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_1: case GgmlType::kQ5_1: case GgmlType::kQ4_K: case GgmlType::kQ5_K: return {0, 2};
    case GgmlType::kQ6_K: return {208, -1};
    default: return {0, -1};
  }
}

// Rows x blocks of `t` holding `k` values per row. Scales are drawn so |w| is about 1/sqrt(k) on average.
inline std::vector<uint8_t> random_ggml_rows(GgmlType t, int64_t rows, int64_t k, std::mt19937& rng) {
  const GgmlBlockInfo b = *ggml_block_info(t);
  const size_t row_bytes = ggml_row_bytes(t, k);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(rows));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());
  const GgmlHalfFields f = ggml_half_fields(t);
  // Typical magnitude of the integer part of one weight: codes up to 2^bits, times a 6-bit (or int8) sub-scale.
  double code = 8;
  switch (t) {
    case GgmlType::kQ8_0: code = 64; break;
    case GgmlType::kQ5_0: case GgmlType::kQ5_1: code = 16; break;
    case GgmlType::kQ4_K: code = 8 * 32; break;
    case GgmlType::kQ5_K: code = 16 * 32; break;
    case GgmlType::kQ6_K: code = 32 * 64; break;
    default: break;
  }
  std::uniform_real_distribution<double> u(0.25, 1.0);
  std::bernoulli_distribution neg(0.5);
  const double base = 1.0 / code / std::sqrt(static_cast<double>(k));
  for (size_t blk = 0; blk < w.size() / static_cast<size_t>(b.type_size); ++blk) {
    uint8_t* p = w.data() + blk * static_cast<size_t>(b.type_size);
    put_f16(p + f.d, static_cast<float>((neg(rng) ? -1 : 1) * u(rng) * base));
    if (f.m >= 0) put_f16(p + f.m, static_cast<float>((neg(rng) ? -1 : 1) * u(rng) * base * (t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1 ? 4 : 2)));
  }
  return w;
}

// x [m, k] as the CPU's integer kernels round it (llama.cpp's rule): per block of qb columns of a row, scale
// d = amax / 127 and codes clamp(nearbyint(x * 127 / amax), -127, 127); returns code * d per element, in double.
inline std::vector<double> rounded_x_blocks(const float* x, int64_t m, int64_t k, int64_t qb) {
  std::vector<double> xq(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < k / qb; ++b) {
      float amax = 0;
      for (int64_t kk = b * qb; kk < (b + 1) * qb; ++kk) amax = std::max(amax, std::fabs(x[i * k + kk]));
      const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      for (int64_t kk = b * qb; kk < (b + 1) * qb; ++kk) {
        const float v = x[i * k + kk] * inv;
        const double c = std::clamp(static_cast<double>(std::nearbyint(v)), -127.0, 127.0);
        xq[static_cast<size_t>(i * k + kk)] = c * d;
      }
    }
  return xq;
}

inline const GgmlType kGgmlBlockTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                           GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

}  // namespace peregrine::test
