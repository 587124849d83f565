// W4A8 (symmetric int4 codes, per group or per channel, with activations quantized to int8 per token): the ref
// backend against a plain reference written here (x quantized per row as ops.h says, exact int32 dot products
// per group, then the group and token scales), and the CPU backend's int4 x int8 kernels (scalar, AVX2 maddubs,
// AVX-512 maddubs, AVX-512 VNNI) against the ref backend on fresh random inputs, every output element; rows
// independent of M and of the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "op_test_util.h"

namespace peregrine::test {
namespace {

struct W4Case {
  int64_t k, group;
  bool bias;
};

std::vector<W4Case> w4_cases() {
  // group 128 (the default), per channel (group = K), a small group the wide kernels cannot step (the portable
  // kernel or the generic path takes it), and K = 384 / 1024 as pycoder-tiny has.
  return {{256, 128, false}, {384, 128, true}, {1024, 128, true}, {384, 384, false},
          {512, 512, true},  {256, 64, true},  {192, 32, false},  {96, 96, true}};
}

struct Problem {
  std::vector<uint8_t> codes;  // [N, K / 2]
  std::vector<float> scales, bias, x;
  ops::WeightQuant q;
  int64_t n = 0, k = 0, m = 0;
};

Problem make_problem(const W4Case& c, int64_t m, std::mt19937& rng) {
  Problem p;
  p.n = 37;
  p.k = c.k;
  p.m = m;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  p.codes.resize(static_cast<size_t>(p.n * p.k / 2));
  for (auto& b : p.codes) b = static_cast<uint8_t>(rng());
  const int64_t groups = c.k / c.group;
  p.scales.resize(static_cast<size_t>(p.n * groups));
  for (float& s : p.scales) s = 0.001f + 0.02f * std::fabs(u(rng));
  p.bias.resize(static_cast<size_t>(p.n));
  for (float& b : p.bias) b = u(rng);
  p.x.resize(static_cast<size_t>(m * p.k));
  for (float& v : p.x) v = u(rng) * (1.0f + 3.0f * std::fabs(u(rng)));
  if (m > 2) std::fill(p.x.begin() + p.k, p.x.begin() + 2 * p.k, 0.0f);  // an all-zero row
  if (m > 3) p.x[static_cast<size_t>(3 * p.k + 5)] = 40.0f;               // an outlier
  p.q.scales = TensorView(p.scales.data(), DType::kF32, {p.n, groups});
  p.q.group_size = c.group;
  p.q.act = ops::ActQuant::kInt8;
  return p;
}

std::string describe(const W4Case& c) {
  return "W4A8 K=" + std::to_string(c.k) + " G=" + std::to_string(c.group) + (c.bias ? " bias" : "");
}

// The plain reference: per row, s = amax / 127 and q = rint(x * (127 / amax)) in float32 (ops.h); per group the
// exact integer sum of q * (code - 8); out = s * sum_g scale_g * sum_g (+ bias), in double.
std::vector<double> plain_w4a8(const Problem& p, bool bias) {
  std::vector<double> out(static_cast<size_t>(p.m * p.n));
  const int64_t gs = p.q.group_size, groups = p.k / gs;
  for (int64_t i = 0; i < p.m; ++i) {
    float amax = 0;
    for (int64_t c = 0; c < p.k; ++c) amax = std::max(amax, std::fabs(p.x[i * p.k + c]));
    std::vector<int> q(static_cast<size_t>(p.k), 0);
    if (amax > 0)
      for (int64_t c = 0; c < p.k; ++c)
        q[c] = static_cast<int>(std::clamp(std::nearbyint(p.x[i * p.k + c] * (127.0f / amax)), -128.0f, 127.0f));
    const double s = static_cast<double>(amax / 127.0f);
    for (int64_t j = 0; j < p.n; ++j) {
      double acc = 0;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t dot = 0;
        for (int64_t c = g * gs; c < (g + 1) * gs; ++c) {
          const int64_t idx = j * p.k + c;
          const int code = (idx % 2 == 0) ? (p.codes[idx / 2] & 0xf) : (p.codes[idx / 2] >> 4);
          dot += static_cast<int64_t>(q[c]) * (code - 8);
        }
        acc += static_cast<double>(p.scales[j * groups + g]) * static_cast<double>(dot);
      }
      out[i * p.n + j] = s * acc + (bias ? p.bias[j] : 0.0);
    }
  }
  return out;
}

void run(ops::Backend& b, const Problem& p, bool bias, std::vector<float>& out, int64_t row0 = 0, int64_t rows = -1) {
  if (rows < 0) rows = p.m;
  out.assign(static_cast<size_t>(rows * p.n), NAN);
  b.matmul({TensorView(const_cast<float*>(p.x.data()) + row0 * p.k, DType::kF32, {rows, p.k}),
            TensorView(const_cast<uint8_t*>(p.codes.data()), DType::kI4, {p.n, p.k}),
            bias ? TensorView(const_cast<float*>(p.bias.data()), DType::kF32, {p.n}) : TensorView(),
            TensorView(out.data(), DType::kF32, {rows, p.n}), p.q});
}

float max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return static_cast<float>(m);
}

TEST(RefW4A8, MatchesThePlainIntegerReference) {
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(41);
  for (const W4Case& c : w4_cases()) {
    Problem p = make_problem(c, 6, rng);
    std::vector<float> got;
    run(*ref, p, c.bias, got);
    const std::vector<double> want = plain_w4a8(p, c.bias);
    const float ymax = max_abs(want);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6 * (ymax + 1e-30)) << describe(c) << " element " << i;
  }
}

// Weight-only int4 (act = kNone) is W4A16: the quantized activations make a measurable difference, so the ref
// backend is seen to quantize x at all.
TEST(RefW4A8, ActivationsAreQuantized) {
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(43);
  Problem p = make_problem({256, 128, false}, 4, rng);
  std::vector<float> a8, a16;
  run(*ref, p, false, a8);
  p.q.act = ops::ActQuant::kNone;
  run(*ref, p, false, a16);
  double diff = 0;
  for (size_t i = 0; i < a8.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a8[i] - a16[i])));
  EXPECT_GT(diff, 0.0);
}

class CpuW4A8 : public ::testing::TestWithParam<ops::CpuIsa> {
 protected:
  void SetUp() override {
    if (!ops::cpu_isa_available(GetParam())) GTEST_SKIP() << "kernel set not available on this CPU";
  }
};

TEST_P(CpuW4A8, MatchesRefOnEveryElementAndKeepsRowsIndependent) {
  auto ref = ops::make_ref_backend();
  auto cpu = ops::make_cpu_backend(2, GetParam());
  auto cpu1 = ops::make_cpu_backend(1, GetParam());
  std::mt19937 rng(47);
  for (const W4Case& c : w4_cases()) {
    for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{13}}) {
      Problem p = make_problem(c, m, rng);
      std::vector<float> want, got;
      run(*ref, p, c.bias, want);
      run(*cpu, p, c.bias, got);
      float ymax = 0;
      for (float v : want) ymax = std::max(ymax, std::fabs(v));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5f * (ymax + 1e-30f)) << describe(c) << " M=" << m << " element " << i;
      for (int64_t r = 0; r < m; ++r) {
        std::vector<float> one;
        run(r % 2 ? *cpu1 : *cpu, p, c.bias, one, r, 1);
        ASSERT_EQ(std::memcmp(one.data(), got.data() + r * p.n, 4 * static_cast<size_t>(p.n)), 0)
            << describe(c) << " M=" << m << " row " << r;
      }
    }
  }
}

// A prefill-sized problem (GEMM tiles, weight blocks reused across row tiles, N split over threads) on a
// Llama-like K with group 128 and per channel.
TEST_P(CpuW4A8, PrefillMatchesRef) {
  auto ref = ops::make_ref_backend();
  auto cpu = ops::make_cpu_backend(2, GetParam());
  std::mt19937 rng(53);
  for (const W4Case& c : {W4Case{2048, 128, true}, W4Case{1024, 1024, false}}) {
    Problem p = make_problem(c, 37, rng);
    p.n = 150;
    p.codes.resize(static_cast<size_t>(p.n * p.k / 2));
    for (auto& b : p.codes) b = static_cast<uint8_t>(rng());
    p.scales.resize(static_cast<size_t>(p.n * (c.k / c.group)));
    for (float& s : p.scales) s = 0.001f + 0.01f * static_cast<float>(rng() % 1000) / 1000.0f;
    p.bias.resize(static_cast<size_t>(p.n), 0.25f);
    p.q.scales = TensorView(p.scales.data(), DType::kF32, {p.n, c.k / c.group});
    std::vector<float> want, got;
    run(*ref, p, c.bias, want);
    run(*cpu, p, c.bias, got);
    float ymax = 0;
    for (float v : want) ymax = std::max(ymax, std::fabs(v));
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * ymax) << describe(c) << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuW4A8,
                         ::testing::Values(ops::CpuIsa::kScalar, ops::CpuIsa::kAvx2, ops::CpuIsa::kAvx512,
                                           ops::CpuIsa::kAvx512Vnni),
                         [](const ::testing::TestParamInfo<ops::CpuIsa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace peregrine::test
