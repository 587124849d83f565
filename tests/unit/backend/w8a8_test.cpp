// W8A8 (int8 and fp8 e4m3 codes with activations quantized per token) and 8-bit weights on the ref backend (the
// definition in ops.h, checked against a computation written here from the README formulas) and on the CPU
// backend against the ref backend on fresh random inputs, every output element, on every kernel set (the int8
// dot products: scalar, AVX2 maddubs, AVX-512 maddubs, AVX-512 VNNI); rows independent of M and threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "core/dtype.h"
#include "op_test_util.h"
#include "ops/act_quant.h"

namespace peregrine::test {
namespace {

// The e4m3fn value nearest to v by search over the 127 finite magnitudes of v's sign, ties to the even code
// (even mantissa).
uint8_t fp8_by_search(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(v));
  uint8_t best = 0;
  double best_d = 1e30;
  for (int c = 0; c < 0x7f; ++c) {
    const double d = std::fabs(static_cast<double>(fp8_e4m3_to_f32(static_cast<uint8_t>(c))) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_d = d;
    }
  }
  return sign | best;
}

TEST(Fp8E4m3, ConversionRoundsToNearestEvenAndSaturates) {
  std::mt19937 rng(3);
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
  // Every midpoint between neighbours and random values across the range.
  std::vector<float> probes;
  for (int c = 0; c < 0x7e; ++c) {
    const float a = fp8_e4m3_to_f32(static_cast<uint8_t>(c)), b = fp8_e4m3_to_f32(static_cast<uint8_t>(c + 1));
    probes.push_back((a + b) / 2);
    probes.push_back(-(a + b) / 2);
  }
  std::uniform_real_distribution<float> u(-460.0f, 460.0f), small(-0.02f, 0.02f);
  for (int i = 0; i < 20000; ++i) probes.push_back(i % 2 ? u(rng) : small(rng));
  for (float v : probes) {
    const float clamped = std::clamp(v, -448.0f, 448.0f);
    EXPECT_EQ(f32_to_fp8_e4m3(v), fp8_by_search(clamped)) << v;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e6f), 0xfe);
}

// x quantized as ops.h says, written out here without ops::quantize_act_*.
std::vector<double> act_dequant(const std::vector<float>& x, int64_t m, int64_t k, ops::ActQuant act, int64_t group) {
  std::vector<double> out(x.size());
  const int64_t g = group > 0 ? group : k;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c0 = 0; c0 < k; c0 += g) {
      const int64_t c1 = std::min(k, c0 + g);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * k + c]));
      for (int64_t c = c0; c < c1; ++c) {
        const float v = x[r * k + c];
        if (act == ops::ActQuant::kInt8) {
          const float s = amax / 127.0f;
          const float q = amax == 0 ? 0.0f : std::clamp(std::nearbyint(v * (127.0f / amax)), -128.0f, 127.0f);
          out[r * k + c] = static_cast<double>(q) * s;
        } else {
          const float s = std::max(amax / 448.0f, 1.0f / (448.0f * 512.0f));
          out[r * k + c] = static_cast<double>(fp8_e4m3_to_f32(fp8_by_search(std::clamp(v / s, -448.0f, 448.0f)))) * s;
        }
      }
    }
  return out;
}

struct W8Case {
  DType codes;
  ops::ActQuant act;
  int64_t k, group, block_rows, act_group;
  bool bias;
};

std::vector<W8Case> w8_cases() {
  using A = ops::ActQuant;
  return {
      {DType::kI8, A::kInt8, 256, 256, 1, 0, false},   {DType::kI8, A::kInt8, 512, 512, 1, 0, true},
      {DType::kI8, A::kInt8, 200, 200, 1, 0, true},    {DType::kI8, A::kInt8, 36, 36, 1, 0, false},
      {DType::kI8, A::kInt8, 320, 320, 37, 0, true},   {DType::kI8, A::kNone, 128, 128, 1, 0, true},
      {DType::kI8, A::kInt8, 256, 64, 1, 0, false},    {DType::kF8E4M3, A::kFp8, 256, 256, 1, 0, true},
      {DType::kF8E4M3, A::kFp8, 256, 128, 16, 128, false}, {DType::kF8E4M3, A::kFp8, 320, 128, 16, 128, true},
      {DType::kF8E4M3, A::kNone, 128, 128, 1, 0, false}, {DType::kF8E4M3, A::kFp8, 96, 96, 37, 0, false},
  };
}

struct Problem {
  std::vector<uint8_t> w;
  std::vector<float> scales, bias, x;
  ops::WeightQuant q;
  int64_t n = 0, k = 0, m = 0;
};

Problem make_problem(const W8Case& c, int64_t m, std::mt19937& rng) {
  Problem p;
  p.n = 37;
  p.k = c.k;
  p.m = m;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  p.w.resize(static_cast<size_t>(p.n * p.k));
  for (auto& b : p.w) {
    b = static_cast<uint8_t>(rng());
    if (c.codes == DType::kF8E4M3 && (b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
  }
  const int64_t groups = (c.k + c.group - 1) / c.group, rows = (p.n + c.block_rows - 1) / c.block_rows;
  p.scales.resize(static_cast<size_t>(rows * groups));
  for (float& s : p.scales) s = 0.001f + 0.01f * std::fabs(u(rng));
  p.bias.resize(static_cast<size_t>(p.n));
  for (float& b : p.bias) b = u(rng);
  p.x.resize(static_cast<size_t>(m * p.k));
  for (float& v : p.x) v = u(rng) * (1.0f + 3.0f * std::fabs(u(rng)));
  if (m > 2) std::fill(p.x.begin() + p.k, p.x.begin() + 2 * p.k, 0.0f);  // an all-zero row
  p.q.scales = TensorView(p.scales.data(), DType::kF32, {rows, groups});
  p.q.group_size = c.group;
  p.q.block_rows = c.block_rows;
  p.q.act = c.act;
  p.q.act_group = c.act_group;
  return p;
}

std::string describe(const W8Case& c) {
  return std::string(dtype_name(c.codes)) + (c.act == ops::ActQuant::kNone ? " weight-only" : " W8A8") + " K=" +
         std::to_string(c.k) + " G=" + std::to_string(c.group) + " rows/scale=" + std::to_string(c.block_rows) +
         " act_group=" + std::to_string(c.act_group);
}

TEST(RefW8A8, QuantizesActivationsAsOpsDefines) {
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(5);
  for (const W8Case& c : w8_cases()) {
    Problem p = make_problem(c, 6, rng);
    std::vector<float> out(static_cast<size_t>(p.m * p.n));
    ref->matmul({TensorView(p.x.data(), DType::kF32, {p.m, p.k}), TensorView(p.w.data(), c.codes, {p.n, p.k}),
                 c.bias ? TensorView(p.bias.data(), DType::kF32, {p.n}) : TensorView(), TensorView(out.data(), DType::kF32, {p.m, p.n}),
                 p.q});
    const std::vector<double> xd = c.act == ops::ActQuant::kNone
                                       ? std::vector<double>(p.x.begin(), p.x.end())
                                       : act_dequant(p.x, p.m, p.k, c.act, c.act_group);
    const int64_t groups = p.q.scales.dim(1);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = c.bias ? p.bias[j] : 0.0;
        for (int64_t kk = 0; kk < p.k; ++kk) {
          const uint8_t b = p.w[j * p.k + kk];
          const double code = c.codes == DType::kI8 ? static_cast<int8_t>(b) : fp8_e4m3_to_f32(b);
          acc += xd[i * p.k + kk] * code * p.scales[(j / c.block_rows) * groups + kk / c.group];
        }
        ASSERT_NEAR(out[i * p.n + j], acc, 1e-6 * (std::fabs(acc) + 1)) << describe(c) << " at " << i << "," << j;
      }
  }
}

TEST(RefW8A8, ActivationQuantizationHelpers) {
  const float x[4] = {0.5f, -1.0f, 0.25f, 0.0f};
  int8_t q[4];
  EXPECT_FLOAT_EQ(ops::quantize_act_int8(x, 4, q), 1.0f / 127.0f);
  EXPECT_EQ(q[0], 64);  // 63.5 rounds to even
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 32);  // 31.75
  const float z[3] = {0, 0, 0};
  EXPECT_EQ(ops::quantize_act_int8(z, 3, q), 0.0f);
  EXPECT_EQ(q[0], 0);
  uint8_t f[4];
  EXPECT_FLOAT_EQ(ops::quantize_act_fp8(x, 4, f), 1.0f / 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(f[1]), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(f[0]), 224.0f);
  EXPECT_FLOAT_EQ(ops::quantize_act_fp8(z, 3, f), 1.0f / (448.0f * 512.0f));
}

class CpuW8A8 : public ::testing::TestWithParam<ops::CpuIsa> {
 protected:
  void SetUp() override {
    if (!ops::cpu_isa_available(GetParam())) GTEST_SKIP() << "kernel set not available on this CPU";
  }
};

TEST_P(CpuW8A8, MatchesRefOnEveryElementAndKeepsRowsIndependent) {
  auto ref = ops::make_ref_backend();
  auto cpu = ops::make_cpu_backend(2, GetParam());
  auto cpu1 = ops::make_cpu_backend(1, GetParam());
  std::mt19937 rng(17);
  for (const W8Case& c : w8_cases()) {
    for (int64_t m : {int64_t{1}, int64_t{7}}) {
      Problem p = make_problem(c, m, rng);
      const TensorView wv(p.w.data(), c.codes, {p.n, p.k});
      const TensorView bv = c.bias ? TensorView(p.bias.data(), DType::kF32, {p.n}) : TensorView();
      const TensorView xv(p.x.data(), DType::kF32, {m, p.k});
      std::vector<float> want(static_cast<size_t>(m * p.n)), got(want.size(), NAN);
      ref->matmul({xv, wv, bv, TensorView(want.data(), DType::kF32, {m, p.n}), p.q});
      cpu->matmul({xv, wv, bv, TensorView(got.data(), DType::kF32, {m, p.n}), p.q});
      float ymax = 0;
      for (float v : want) ymax = std::max(ymax, std::fabs(v));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5f * (ymax + 1e-30f)) << describe(c) << " M=" << m << " element " << i;
      for (int64_t r = 0; r < m; ++r) {
        std::vector<float> one(static_cast<size_t>(p.n), NAN);
        (r % 2 ? cpu1 : cpu)->matmul({TensorView(p.x.data() + r * p.k, DType::kF32, {1, p.k}), wv, bv,
                                      TensorView(one.data(), DType::kF32, {1, p.n}), p.q});
        ASSERT_EQ(std::memcmp(one.data(), got.data() + r * p.n, 4 * static_cast<size_t>(p.n)), 0) << describe(c) << " row " << r;
      }
    }
  }
}

// A prefill-sized int8 problem (GEMM tiles, weight blocks reused across row tiles, N split over threads) and the
// same bits from every int8 kernel set: the sums are exact integers.
TEST_P(CpuW8A8, Int8PrefillAgreesWithScalarBitForBit) {
  auto scalar = ops::make_cpu_backend(2, ops::CpuIsa::kScalar);
  auto cpu = ops::make_cpu_backend(2, GetParam());
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(23);
  W8Case c{DType::kI8, ops::ActQuant::kInt8, 1024, 1024, 1, 0, true};
  Problem p = make_problem(c, 37, rng);
  p.n = 37;
  const TensorView wv(p.w.data(), DType::kI8, {p.n, p.k}), bv(p.bias.data(), DType::kF32, {p.n}),
      xv(p.x.data(), DType::kF32, {p.m, p.k});
  std::vector<float> a(static_cast<size_t>(p.m * p.n)), b(a.size()), want(a.size());
  scalar->matmul({xv, wv, bv, TensorView(a.data(), DType::kF32, {p.m, p.n}), p.q});
  cpu->matmul({xv, wv, bv, TensorView(b.data(), DType::kF32, {p.m, p.n}), p.q});
  ref->matmul({xv, wv, bv, TensorView(want.data(), DType::kF32, {p.m, p.n}), p.q});
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0);
  float ymax = 0;
  for (float v : want) ymax = std::max(ymax, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(b[i], want[i], 1e-5f * ymax) << i;
}

// int8 W8A8 on the packed copy (AVX-512 VNNI: pack_weight groups rows by 16, "lanes as outputs") gives the plain
// codes' bits for every M (the GEMV's four streams, the GEMM's 4 x 2 tiles, partial groups, row blocks of scales,
// bias), alone and inside matmuls(); where the kernel set packs nothing, pack_weight returns an empty buffer.
TEST_P(CpuW8A8, PackedInt8IsThePlainBits) {
  auto cpu = ops::make_cpu_backend(2, GetParam());
  std::mt19937 rng(29);
  struct Shape { int64_t n, k, block_rows; bool bias; };
  for (const Shape& s : {Shape{37, 36, 1, true}, Shape{16, 200, 1, false}, Shape{100, 1024, 37, true},
                         Shape{130, 256, 1, false}}) {
    W8Case c{DType::kI8, ops::ActQuant::kInt8, s.k, s.k, s.block_rows, 0, s.bias};
    for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{9}, int64_t{37}}) {
      Problem p = make_problem(c, m, rng);
      p.n = s.n;
      p.w.resize(static_cast<size_t>(p.n * p.k));
      for (auto& b : p.w) b = static_cast<uint8_t>(rng());
      p.scales.resize(static_cast<size_t>((p.n + s.block_rows - 1) / s.block_rows));
      for (float& v : p.scales) v = 0.001f + 0.01f * static_cast<float>(rng() % 1000) / 1000.0f;
      p.bias.resize(static_cast<size_t>(p.n), 0.25f);
      p.q.scales = TensorView(p.scales.data(), DType::kF32, {static_cast<int64_t>(p.scales.size()), 1});
      const TensorView wv(p.w.data(), DType::kI8, {p.n, p.k});
      const TensorView bv = s.bias ? TensorView(p.bias.data(), DType::kF32, {p.n}) : TensorView();
      const TensorView xv(p.x.data(), DType::kF32, {m, p.k});
      ops::DeviceBuffer packed = cpu->pack_weight(wv, p.q);
      if (!packed.data()) {
        EXPECT_NE(GetParam(), ops::CpuIsa::kAvx512Vnni) << "the VNNI kernel set packs int8 W8A8 weights";
        return;
      }
      ops::WeightQuant pq = p.q;
      pq.packed = packed.data();
      std::vector<float> plain(static_cast<size_t>(m * p.n), NAN), got(plain.size(), NAN), fused(plain.size(), NAN);
      cpu->matmul({xv, wv, bv, TensorView(plain.data(), DType::kF32, {m, p.n}), p.q});
      cpu->matmul({xv, wv, bv, TensorView(got.data(), DType::kF32, {m, p.n}), pq});
      EXPECT_EQ(std::memcmp(plain.data(), got.data(), 4 * plain.size()), 0)
          << "N " << p.n << " K " << p.k << " rows/scale " << s.block_rows << " M " << m;
      const ops::MatmulParams two[] = {{xv, wv, bv, TensorView(fused.data(), DType::kF32, {m, p.n}), pq},
                                       {xv, wv, bv, TensorView(got.data(), DType::kF32, {m, p.n}), p.q}};
      cpu->matmuls(two);
      EXPECT_EQ(std::memcmp(plain.data(), fused.data(), 4 * plain.size()), 0) << "matmuls, N " << p.n << " M " << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuW8A8,
                         ::testing::Values(ops::CpuIsa::kScalar, ops::CpuIsa::kAvx2, ops::CpuIsa::kAvx512,
                                           ops::CpuIsa::kAvx512Vnni),
                         [](const ::testing::TestParamInfo<ops::CpuIsa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace peregrine::test
