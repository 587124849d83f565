// The quantized-weight matmul contract (ops.h WeightQuant) on the ref backend: int4/uint8/int8/fp8 codes with
// group scales, zero points, act-order group indices and row blocks, against a dequantization written out here;
// malformed quantization fields are refused by op_checks; the CPU backend refuses int8/fp8 codes (issue 12).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/status.h"

namespace peregrine::ops {
namespace {

TEST(RefQuantMatmul, DequantizesEveryCodeFormat) {
  auto ref = make_ref_backend();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t m = 3, n = 6, k = 16, group = 4, groups = k / group;
  std::vector<float> x(m * k);
  for (float& v : x) v = u(rng);
  for (DType codes : {DType::kI4, DType::kU8, DType::kI8, DType::kF8E4M3}) {
    for (bool with_zeros : {false, true}) {
      for (bool act_order : {false, true}) {
        for (int64_t block_rows : {int64_t{1}, int64_t{4}}) {
          std::vector<uint8_t> w(dtype_bytes(codes, static_cast<size_t>(n * k)));
          for (auto& b : w) b = static_cast<uint8_t>(rng() & 0xff);
          if (codes == DType::kF8E4M3)
            for (auto& b : w) b &= 0xbf;  // keep exponents small: no NaN codes
          const int64_t scale_rows = (n + block_rows - 1) / block_rows;
          std::vector<float> scales(scale_rows * groups), zeros(n * groups);
          for (float& s : scales) s = 0.01f + std::fabs(u(rng));
          for (float& z : zeros) z = std::round(4 * u(rng) + 6);
          std::vector<int32_t> g_idx(k);
          for (int64_t c = 0; c < k; ++c) g_idx[c] = static_cast<int32_t>((c * 3 + 1) % groups);  // a permutation pattern
          WeightQuant q;
          q.scales = TensorView(scales.data(), DType::kF32, {scale_rows, groups});
          if (with_zeros) q.zeros = TensorView(zeros.data(), DType::kF32, {n, groups});
          if (act_order) q.g_idx = TensorView(g_idx.data(), DType::kI32, {k});
          q.group_size = group;
          q.block_rows = block_rows;
          std::vector<float> out(m * n);
          ref->matmul({TensorView(x.data(), DType::kF32, {m, k}), TensorView(w.data(), codes, {n, k}), {},
                       TensorView(out.data(), DType::kF32, {m, n}), q});
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t i = 0; i < m; ++i) {
              double acc = 0;
              for (int64_t c = 0; c < k; ++c) {
                const int64_t e = r * k + c;
                double code = 0, zero = 0;
                if (codes == DType::kI4) {
                  code = (e % 2 == 0) ? (w[e / 2] & 0xf) : (w[e / 2] >> 4);
                  zero = 8;
                } else if (codes == DType::kU8) {
                  code = w[e];
                  zero = 128;
                } else if (codes == DType::kI8) {
                  code = static_cast<int8_t>(w[e]);
                } else {
                  code = fp8_e4m3_to_f32(w[e]);
                }
                const int64_t g = act_order ? g_idx[c] : c / group;
                if (with_zeros) zero = zeros[r * groups + g];
                acc += x[i * k + c] * (code - zero) * scales[(r / block_rows) * groups + g];
              }
              EXPECT_NEAR(out[i * n + r], acc, 1e-4 * (1 + std::fabs(acc)))
                  << dtype_name(codes) << " zeros " << with_zeros << " act_order " << act_order << " block_rows "
                  << block_rows << " at " << i << "," << r;
            }
          }
        }
      }
    }
  }
}

TEST(RefQuantMatmul, Fp8Values) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);       // exponent 7 = bias
  EXPECT_EQ(fp8_e4m3_to_f32(0xb8), -1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);     // the largest finite value
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
}

TEST(RefQuantMatmul, MalformedQuantizationIsRefused) {
  auto ref = make_ref_backend();
  std::vector<float> x(2 * 8), out(2 * 4), scales(4 * 2), zeros(4 * 2);
  std::vector<uint8_t> w(4 * 8);
  std::vector<int32_t> g_idx(8, 5);
  auto run = [&](DType codes, WeightQuant q, int64_t k = 8) {
    ref->matmul({TensorView(x.data(), DType::kF32, {2, k}), TensorView(w.data(), codes, {4, k}), {},
                 TensorView(out.data(), DType::kF32, {2, 4}), q});
  };
  WeightQuant good;
  good.scales = TensorView(scales.data(), DType::kF32, {4, 2});
  good.group_size = 4;
  EXPECT_NO_THROW(run(DType::kI8, good));
  EXPECT_THROW(run(DType::kF32, good), Error);  // float values are not codes
  WeightQuant q = good;
  q.group_size = 0;
  EXPECT_THROW(run(DType::kI8, q), Error);
  q = good;
  q.scales = TensorView(scales.data(), DType::kF32, {4, 1});
  EXPECT_THROW(run(DType::kI8, q), Error);  // scales must be [N, groups]
  q = good;
  q.zeros = TensorView(zeros.data(), DType::kF32, {2, 2});
  EXPECT_THROW(run(DType::kI8, q), Error);
  q = good;
  q.g_idx = TensorView(g_idx.data(), DType::kI32, {8});
  EXPECT_THROW(run(DType::kI8, q), Error);  // group 5 of 2
  q = good;
  q.block_rows = 0;
  EXPECT_THROW(run(DType::kI8, q), Error);
  EXPECT_THROW(run(DType::kI4, good, 7), Error);  // odd K for int4
}

// (int8 / fp8 codes on the CPU backend: tests/unit/backend/w8a8_test.cpp)

}  // namespace
}  // namespace peregrine::ops
