// W4A16 / W8A16 matmul on the CPU backend against the ref backend on fresh random inputs (every output element),
// on every ISA: int4 and uint8 codes, groups of 32..K and odd ones (the generic path), zero points, act-order
// permutations, irregular g_idx, bias; and the row rule: a row's bits do not depend on M or the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "op_test_util.h"

namespace peregrine::test {
namespace {

struct QCase {
  DType codes;
  int64_t k, group;
  bool zeros, perm, irregular;
};

class CpuQuantMatmul : public CpuIsaTest {};

TEST_P(CpuQuantMatmul, MatchesRefAndKeepsRowsIndependent) {
  auto ref = ops::make_ref_backend();
  auto cpu = ops::make_cpu_backend(2, GetParam());
  auto cpu1 = ops::make_cpu_backend(1, GetParam());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::vector<QCase> cases = {
      {DType::kI4, 256, 32, false, false, false}, {DType::kI4, 256, 64, true, false, false},
      {DType::kI4, 256, 128, true, true, false},  {DType::kI4, 256, 256, false, false, false},
      {DType::kI4, 96, 16, true, false, false},   {DType::kI4, 128, 32, true, true, true},
      {DType::kU8, 256, 128, false, false, false}, {DType::kU8, 192, 64, true, true, false},
      {DType::kU8, 40, 8, false, false, false},   {DType::kU8, 256, 256, true, false, false},
  };
  for (const QCase& qc : cases) {
    const int64_t k = qc.k, n = 37, groups = k / qc.group;
    std::vector<uint8_t> w(dtype_bytes(qc.codes, static_cast<size_t>(n * k)));
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    std::vector<float> scales(n * groups), zeros(n * groups), bias(n);
    for (float& s : scales) s = 0.01f + 0.05f * std::fabs(u(rng));
    const float top = qc.codes == DType::kI4 ? 15.0f : 255.0f;
    for (float& z : zeros) z = std::round((u(rng) * 0.5f + 0.5f) * top);
    for (float& b : bias) b = u(rng);
    std::vector<int32_t> perm(k), g_idx(k);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t c = 0; c < k; ++c) g_idx[c] = static_cast<int32_t>(rng() % groups);
    ops::WeightQuant q;
    q.scales = TensorView(scales.data(), DType::kF32, {n, groups});
    if (qc.zeros) q.zeros = TensorView(zeros.data(), DType::kF32, {n, groups});
    if (qc.perm) q.perm = TensorView(perm.data(), DType::kI32, {k});
    if (qc.irregular) q.g_idx = TensorView(g_idx.data(), DType::kI32, {k});
    q.group_size = qc.group;
    const std::string what = std::string(dtype_name(qc.codes)) + " K=" + std::to_string(k) + " G=" +
                             std::to_string(qc.group) + (qc.zeros ? " zeros" : "") + (qc.perm ? " perm" : "") +
                             (qc.irregular ? " g_idx" : "");
    const int64_t m_max = 9;
    Buffer x = random_buffer(DType::kF32, m_max * k, rng);
    Buffer want = poisoned(DType::kF32, m_max * n), got = poisoned(DType::kF32, m_max * n);
    const TensorView wv(w.data(), qc.codes, {n, k});
    const TensorView bv(bias.data(), DType::kF32, {n});
    ref->matmul({x.view({m_max, k}), wv, bv, want.view({m_max, n}), q});
    cpu->matmul({x.view({m_max, k}), wv, bv, got.view({m_max, n}), q});
    expect_close(got, want, 2e-5f, what);
    // Row rule: each row alone (and on one thread) gives the same bits as inside the batch.
    for (int64_t r = 0; r < m_max; ++r) {
      Buffer one = poisoned(DType::kF32, n);
      TensorView xr(x.bytes.data() + r * k * 4, DType::kF32, {1, k});
      (r % 2 ? cpu1 : cpu)->matmul({xr, wv, bv, one.view({1, n}), q});
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(std::memcmp(&one.bytes[j * 4], &got.bytes[(r * n + j) * 4], 4), 0) << what << " row " << r << " col " << j;
    }
  }
}

PEREGRINE_INSTANTIATE_ISA_TESTS(CpuQuantMatmul);

}  // namespace
}  // namespace peregrine::test
