// W4A16 / W8A16 on the CPU backend with int8 activations (backend/cpu/quant_lowp.h): the weight packed as GGUF
// blocks by Backend::pack_weight, x rounded per block of 32. Fresh random inputs, every output element, on every
// ISA that packs:
//  - against an oracle written from the rule alone (W dequantized in double with the scale rounded to f16, Q4_1's
//    min as f16(-scale * zero), x rounded per 32 as llama.cpp rounds it): up to f32 summation;
//  - against the ref backend's exact op: within the move that x's rounding and the f16 scale can cause, per element;
//  - the row rule (a row alone, on one thread, gives its bits from inside the batch) and Backend::matmuls (q/k/v of
//    one x) equal to single matmuls bit for bit;
//  - act-order (x gathered into code-column order before rounding);
//  - what keeps the float path: irregular g_idx, uint8 with zero points, groups of 16, scales outside
//    f16's normal range, and PEREGRINE_CPU_INT8_ACT=0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "ggml_test_blocks.h"
#include "op_test_util.h"
#include "peregrine/error.h"

namespace peregrine::test {
namespace {

float half(float v) { return f16_to_f32(f32_to_f16(v)); }

struct LowpWeight {
  DType codes = DType::kI4;
  int64_t n = 0, k = 0, group = 0;
  std::vector<uint8_t> w;
  std::vector<float> scales, zeros;
  std::vector<int32_t> perm;  // act-order: code column c reads x column perm[c]
  ops::WeightQuant q;
  TensorView view() { return TensorView(w.data(), codes, {n, k}); }
  int code(int64_t j, int64_t kk) const {
    if (codes == DType::kU8) return w[static_cast<size_t>(j * k + kk)];
    const size_t i = static_cast<size_t>(j * k + kk);
    return (w[i / 2] >> ((i & 1) * 4)) & 0xF;
  }
  float zero(int64_t j, int64_t g) const {
    return zeros.empty() ? (codes == DType::kI4 ? 8.0f : 128.0f) : zeros[static_cast<size_t>(j * (k / group) + g)];
  }
  float scale(int64_t j, int64_t g) const { return scales[static_cast<size_t>(j * (k / group) + g)]; }
  // zeros: 0 none, 1 every zero the midpoint, 2 random zero points.
  LowpWeight(DType c, int64_t n_, int64_t k_, int64_t g, int zero_mode, std::mt19937& rng)
      : codes(c), n(n_), k(k_), group(g) {
    w.resize(dtype_bytes(c, static_cast<size_t>(n * k)));
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> u(0.25f, 1.0f);
    const float top = c == DType::kI4 ? 15.0f : 255.0f;
    scales.resize(static_cast<size_t>(n * (k / g)));
    for (float& s : scales) s = std::max(1e-4f, u(rng) * 2.0f / top / std::sqrt(static_cast<float>(k)));
    if (zero_mode == 1) zeros.assign(scales.size(), top == 15.0f ? 8.0f : 128.0f);
    if (zero_mode == 2) {
      zeros.resize(scales.size());
      for (float& z : zeros) z = static_cast<float>(rng() % static_cast<uint32_t>(top + 1));
    }
    q.scales = TensorView(scales.data(), DType::kF32, {n, k / g});
    if (!zeros.empty()) q.zeros = TensorView(zeros.data(), DType::kF32, {n, k / g});
    q.group_size = g;
  }
  void shuffle_columns(std::mt19937& rng) {
    perm.resize(static_cast<size_t>(k));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    q.perm = TensorView(perm.data(), DType::kI32, {k});
  }
  // x [m, k] in code-column order (x itself without a permutation).
  std::vector<float> gathered(const float* x, int64_t m) const {
    std::vector<float> out(x, x + m * k);
    for (int64_t i = 0; !perm.empty() && i < m; ++i)
      for (int64_t c = 0; c < k; ++c) out[static_cast<size_t>(i * k + c)] = x[i * k + perm[static_cast<size_t>(c)]];
    return out;
  }
};

// out[i, j] for x rounded per 32 and W as its blocks hold it (see the header), in double.
std::vector<double> lowp_oracle(const LowpWeight& lw, bool q4_1, const std::vector<double>& xq, const float* bias,
                                int64_t m) {
  std::vector<double> out(static_cast<size_t>(m * lw.n));
  const int64_t k = lw.k;
  for (int64_t j = 0; j < lw.n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t g = kk / lw.group;
        const double d = half(lw.scale(j, g));
        const double wv = q4_1 ? d * lw.code(j, kk) + half(-lw.scale(j, g) * lw.zero(j, g))
                               : d * (lw.code(j, kk) - lw.zero(j, g));
        s += xq[static_cast<size_t>(i * k + kk)] * wv;
      }
      out[static_cast<size_t>(i * lw.n + j)] = s + (bias ? bias[j] : 0.0f);
    }
  return out;
}

// Per element, the most x's rounding and the f16 scale (and min) can move a result off the exact op.
std::vector<double> lowp_bound(const LowpWeight& lw, const float* x, const std::vector<double>& xq, int64_t m) {
  std::vector<double> bound(static_cast<size_t>(m * lw.n));
  for (int64_t j = 0; j < lw.n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double b = 0;
      for (int64_t kk = 0; kk < lw.k; ++kk) {
        const int64_t g = kk / lw.group;
        const double exact = double(lw.scale(j, g)) * (lw.code(j, kk) - lw.zero(j, g));
        const double xe = x[i * lw.k + kk], xr = xq[static_cast<size_t>(i * lw.k + kk)];
        b += std::fabs(xe - xr) * std::fabs(exact) * 1.01 + std::fabs(xr) * std::fabs(exact) * 2.0 / 2048.0 +
             std::fabs(xr) * std::fabs(lw.scale(j, g) * lw.zero(j, g)) / 2048.0;
      }
      bound[static_cast<size_t>(i * lw.n + j)] = b;
    }
  return bound;
}

class CpuQuantLowp : public CpuIsaTest {};

TEST_P(CpuQuantLowp, PackedBlocksMatchTheRuleAndTheExactOpOnEveryElement) {
  auto ref = ops::make_ref_backend();
  auto cpu = make(2);
  auto cpu1 = make(1);
  std::mt19937 rng(4242);
  struct Case { DType codes; int64_t k, group; int zeros; bool q4_1, perm; };
  const Case cases[] = {{DType::kI4, 256, 32, 0, false, false},  {DType::kI4, 512, 128, 2, true, false},
                        {DType::kI4, 384, 384, 0, false, false}, {DType::kI4, 256, 64, 1, false, false},
                        {DType::kU8, 256, 128, 0, false, false}, {DType::kU8, 320, 320, 1, false, false},
                        {DType::kI4, 1024, 128, 2, true, false}, {DType::kU8, 2048, 128, 0, false, false},
                        {DType::kI4, 512, 128, 2, true, true},   {DType::kU8, 256, 64, 0, false, true}};
  int packed_cases = 0;
  for (const Case& c : cases) {
    const int64_t n = 40;  // two groups of 16 rows and a padded third
    LowpWeight lw(c.codes, n, c.k, c.group, c.zeros, rng);
    if (c.perm) lw.shuffle_columns(rng);
    ops::DeviceBuffer packed = cpu->pack_weight(lw.view(), lw.q);
    if (!packed.data()) {
      // Only a backend without packed GGUF kernels (the scalar set) keeps every weight on the float path.
      ASSERT_EQ(GetParam(), ops::CpuIsa::kScalar) << "a convertible weight was not packed";
      continue;
    }
    ++packed_cases;
    ops::WeightQuant q = lw.q;
    q.packed = packed.data();
    for (int64_t m : {1, 3, 17, 64}) {
      const std::string what = std::string(dtype_name(c.codes)) + " K=" + std::to_string(c.k) + " G=" +
                               std::to_string(c.group) + " zeros=" + std::to_string(c.zeros) +
                               (c.perm ? " act-order" : "") + " M=" + std::to_string(m);
      Buffer x = random_buffer(DType::kF32, m * c.k, rng);
      Buffer bias = random_buffer(DType::kF32, n, rng);
      const bool with_bias = m % 2 == 1;
      const TensorView bv = with_bias ? bias.view({n}) : TensorView();
      Buffer want = poisoned(DType::kF32, m * n), got = poisoned(DType::kF32, m * n);
      ref->matmul({x.view({m, c.k}), lw.view(), bv, want.view({m, n}), lw.q});
      cpu->matmul({x.view({m, c.k}), lw.view(), bv, got.view({m, n}), q});
      const std::vector<float> xg = lw.gathered(x.f32(), m);
      const std::vector<double> xq = rounded_x_blocks(xg.data(), m, c.k, 32);
      const std::vector<double> rule = lowp_oracle(lw, c.q4_1, xq, with_bias ? bias.f32() : nullptr, m);
      const std::vector<double> bound = lowp_bound(lw, xg.data(), xq, m);
      double ss = 0;
      for (int64_t i = 0; i < want.n; ++i) ss += double(want.get(i)) * want.get(i);
      const double rms = std::sqrt(ss / static_cast<double>(want.n));
      int64_t bad = 0;
      for (int64_t i = 0; i < want.n; ++i) {
        const double g = got.get(i), e = rule[static_cast<size_t>(i)], exact = want.get(i);
        if (!(std::fabs(g - e) <= 3e-6 * (std::fabs(e) + rms)) && bad++ < 5)
          ADD_FAILURE() << what << ": element " << i << " got " << g << " want (rule) " << e;
        const double tol = bound[static_cast<size_t>(i)] + 1e-4 * (std::fabs(exact) + rms);
        if (!(std::fabs(g - exact) <= tol) && bad++ < 5)
          ADD_FAILURE() << what << ": element " << i << " got " << g << " want (exact op) " << exact << " tol " << tol;
      }
      ASSERT_EQ(bad, 0) << what << ": " << bad << " bad elements of " << want.n;
      for (int64_t r = 0; r < m; r += (m > 8 ? 7 : 1)) {
        Buffer one = poisoned(DType::kF32, n);
        TensorView xr(x.bytes.data() + r * c.k * 4, DType::kF32, {1, c.k});
        (r % 2 ? cpu1 : cpu)->matmul({xr, lw.view(), bv, one.view({1, n}), q});
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(std::memcmp(&one.bytes[j * 4], &got.bytes[(r * n + j) * 4], 4), 0)
              << what << " row " << r << " col " << j;
      }
    }
  }
  std::cout << cpu->name() << ": " << packed_cases << " weights packed as GGUF blocks\n";
}

// Matmuls of one x through Backend::matmuls (one kept on the float path, one act-order) give each output matmul()'s
// bits, and the three without a permutation alone again.
TEST_P(CpuQuantLowp, MatmulsOfOneXEqualSingleMatmuls) {
  auto cpu = make(2);
  std::mt19937 rng(4243);
  const int64_t k = 512;
  LowpWeight a(DType::kI4, 64, k, 128, 0, rng), b(DType::kI4, 40, k, 128, 2, rng), c(DType::kI4, 24, k, 16, 0, rng);
  LowpWeight d(DType::kU8, 32, k, 128, 0, rng);
  d.shuffle_columns(rng);
  std::vector<ops::DeviceBuffer> packed;
  std::vector<ops::WeightQuant> qs;
  for (LowpWeight* lw : {&a, &b, &c, &d}) {
    packed.push_back(cpu->pack_weight(lw->view(), lw->q));
    qs.push_back(lw->q);
    qs.back().packed = packed.back().data();
  }
  EXPECT_FALSE(packed[2].data()) << "groups of 16 keep the float path";
  for (int64_t m : {1, 5}) {
    Buffer x = random_buffer(DType::kF32, m * k, rng);
    std::vector<Buffer> one, many;
    std::vector<ops::MatmulParams> ps;
    int i = 0;
    for (LowpWeight* lw : {&a, &b, &c, &d}) {
      one.push_back(poisoned(DType::kF32, m * lw->n));
      many.push_back(poisoned(DType::kF32, m * lw->n));
      cpu->matmul({x.view({m, k}), lw->view(), {}, one.back().view({m, lw->n}), qs[i]});
      ps.push_back({x.view({m, k}), lw->view(), {}, many.back().view({m, lw->n}), qs[i]});
      ++i;
    }
    cpu->matmuls(ps);
    for (size_t j = 0; j < ps.size(); ++j) EXPECT_TRUE(bits_equal(one[j], many[j])) << "M=" << m << " matmul " << j;
    // The two packed ones without a permutation (at M = 1 one parallel region over both).
    for (size_t j = 0; j < 2; ++j) many[j] = poisoned(DType::kF32, m * (j == 0 ? a.n : b.n));
    ps[0].out = many[0].view({m, a.n});
    ps[1].out = many[1].view({m, b.n});
    cpu->matmuls(std::span<const ops::MatmulParams>(ps.data(), 2));
    for (size_t j = 0; j < 2; ++j) EXPECT_TRUE(bits_equal(one[j], many[j])) << "M=" << m << " pair " << j;
  }
}

TEST_P(CpuQuantLowp, WeightsItCannotConvertKeepTheFloatPath) {
  auto cpu = make(2);
  std::mt19937 rng(4244);
  LowpWeight probe(DType::kI4, 16, 256, 128, 0, rng);
  if (!cpu->pack_weight(probe.view(), probe.q).data()) GTEST_SKIP() << cpu->name() << " has no packed GGUF kernels";
  const int64_t k = 256;
  std::vector<int32_t> g_idx(k);
  for (int64_t i = 0; i < k; ++i) g_idx[static_cast<size_t>(i)] = static_cast<int32_t>(i / 128);
  LowpWeight irregular(DType::kI4, 16, k, 128, 0, rng);
  irregular.q.g_idx = TensorView(g_idx.data(), DType::kI32, {k});
  LowpWeight u8_zeros(DType::kU8, 16, k, 128, 2, rng);
  LowpWeight group16(DType::kI4, 16, k, 16, 0, rng);
  LowpWeight tiny_scale(DType::kI4, 16, k, 128, 0, rng);
  tiny_scale.scales[3] = 1e-6f;  // below f16's normal range
  LowpWeight big_min(DType::kI4, 16, k, 128, 2, rng);
  big_min.scales[0] = 60000.0f;
  big_min.zeros[0] = 15.0f;  // -scale * zero overflows f16
  LowpWeight w8a8(DType::kI4, 16, k, 128, 0, rng);
  w8a8.q.act = ops::ActQuant::kInt8;
  for (LowpWeight* lw : {&irregular, &u8_zeros, &group16, &tiny_scale, &big_min, &w8a8})
    EXPECT_FALSE(cpu->pack_weight(lw->view(), lw->q).data());
  setenv("PEREGRINE_CPU_INT8_ACT", "0", 1);
  auto exact = make(2);
  unsetenv("PEREGRINE_CPU_INT8_ACT");
  EXPECT_FALSE(exact->pack_weight(probe.view(), probe.q).data()) << "PEREGRINE_CPU_INT8_ACT=0";
  // A packed pointer that is not this backend's copy is refused, not read.
  ops::WeightQuant forged = probe.q;
  std::vector<uint8_t> junk(4096, 0);
  forged.packed = junk.data();
  Buffer x = random_buffer(DType::kF32, k, rng);
  Buffer out = poisoned(DType::kF32, 16);
  EXPECT_THROW(cpu->matmul({x.view({1, k}), probe.view(), {}, out.view({1, 16}), forged}), Error);
}

PEREGRINE_INSTANTIATE_ISA_TESTS(CpuQuantLowp);

}  // namespace
}  // namespace peregrine::test
