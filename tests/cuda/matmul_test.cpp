// CUDA vs ref matmul: cuBLASLt dtypes (bf16, f16, f32), the generic kernel for mixed dtypes, fused and
// separate bias; and the ops.h contract that a row's result does not depend on M (batch invariance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

struct MatmulCase {
  DType x, w, out;
  int64_t m, n, k;
  bool bias;
  DType bias_t;
};

void run_matmul_case(const MatmulCase& c, std::mt19937& rng) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.k));
  HostTensor x = random_tensor(c.x, {c.m, c.k}, rng), w = random_tensor(c.w, {c.n, c.k}, rng, scale);
  HostTensor bias = c.bias ? random_tensor(c.bias_t, {c.n}, rng) : HostTensor();
  HostTensor want(c.out, {c.m, c.n});
  ref().matmul({x.view(), w.view(), c.bias ? bias.view() : TensorView(), want.view()});
  DeviceTensor d_x(x), d_w(w), d_out(want);
  DeviceTensor d_bias = c.bias ? DeviceTensor(bias) : DeviceTensor();
  d_out.poison();
  gpu().matmul({d_x.view(), d_w.view(), c.bias ? d_bias.view() : TensorView(), d_out.view()});
  EXPECT_TRUE(all_close(d_out.to_host(), want))
      << dtype_name(c.x) << "/" << dtype_name(c.w) << "/" << dtype_name(c.out) << " M " << c.m << " N " << c.n
      << " K " << c.k << (c.bias ? " bias" : "");
}

TEST(CudaMatmul, CublasLtDtypesAndShapes) {
  std::mt19937 rng(11);
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32})
    for (int64_t m : {1, 3, 64, 257})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{384, 384}, {1000, 64}, {8, 1024}})
        run_matmul_case({t, t, t, m, n, k, false, t}, rng);
}

TEST(CudaMatmul, BiasFusedAndSeparate) {
  std::mt19937 rng(12);
  run_matmul_case({DType::kBF16, DType::kBF16, DType::kBF16, 17, 256, 128, true, DType::kBF16}, rng);
  run_matmul_case({DType::kBF16, DType::kBF16, DType::kBF16, 17, 256, 128, true, DType::kF32}, rng);
  run_matmul_case({DType::kF32, DType::kF32, DType::kF32, 5, 96, 200, true, DType::kF32}, rng);
  run_matmul_case({DType::kF16, DType::kF16, DType::kF16, 2, 64, 64, true, DType::kBF16}, rng);
}

TEST(CudaMatmul, GenericKernelForMixedDtypes) {
  std::mt19937 rng(13);
  run_matmul_case({DType::kF32, DType::kBF16, DType::kF32, 7, 130, 300, false, DType::kF32}, rng);
  run_matmul_case({DType::kF32, DType::kF16, DType::kF32, 65, 64, 64, true, DType::kBF16}, rng);
  run_matmul_case({DType::kBF16, DType::kF32, DType::kBF16, 3, 70, 33, false, DType::kF32}, rng);
  run_matmul_case({DType::kF32, DType::kBF16, DType::kF32, 1, 4096, 4096, false, DType::kF32}, rng);
}

// Rows computed inside batches of M rows must equal (bitwise) the same rows of the largest batch.
int count_variant_ms(ops::MatmulPolicy policy, int64_t n, int64_t k, std::mt19937& rng) {
  gpu_services().set_matmul_policy(policy);
  const std::vector<int64_t> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  const int64_t max_m = ms.back();
  HostTensor x = random_tensor(DType::kBF16, {max_m, k}, rng);
  HostTensor w = random_tensor(DType::kBF16, {n, k}, rng, 1.0 / std::sqrt(static_cast<double>(k)));
  DeviceTensor d_x(x), d_w(w), d_full(HostTensor(DType::kBF16, {max_m, n}));
  gpu().matmul({d_x.view(), d_w.view(), TensorView(), d_full.view()});
  HostTensor full = d_full.to_host();
  int variants = 0;
  std::string report;
  for (int64_t m : ms) {
    DeviceTensor d_out(HostTensor(DType::kBF16, {m, n}));
    gpu().matmul({d_x.view().slice_rows(0, m), d_w.view(), TensorView(), d_out.view()});
    HostTensor got = d_out.to_host();
    const bool same = std::equal(got.bytes.begin(), got.bytes.end(), full.bytes.begin());
    if (!same) {
      ++variants;
      report += " M=" + std::to_string(m);
    }
  }
  const char* name = policy == ops::MatmulPolicy::kFastest          ? "fastest"
                     : policy == ops::MatmulPolicy::kBatchInvariant ? "batch-invariant"
                     : policy == ops::MatmulPolicy::kSkinnySmallM   ? "skinny then split-K (default)"
                                                                    : "batch-invariant split-K";
  std::printf("  matmul [%ld x %ld] policy %s: rows differing from M=%ld at:%s\n", static_cast<long>(n),
              static_cast<long>(k), name, static_cast<long>(max_m), report.empty() ? " none" : report.c_str());
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);  // the default
  return variants;
}

TEST(CudaMatmul, RowsDoNotDependOnBatchSize) {
  std::mt19937 rng(14);
  count_variant_ms(ops::MatmulPolicy::kFastest, 4096, 4096, rng);  // informative only
  EXPECT_EQ(count_variant_ms(ops::MatmulPolicy::kBatchInvariant, 4096, 4096, rng), 0);
  EXPECT_EQ(count_variant_ms(ops::MatmulPolicy::kBatchInvariant, 6144, 4096, rng), 0);
  EXPECT_EQ(count_variant_ms(ops::MatmulPolicy::kBatchInvariant, 4096, 14336, rng), 0);
  EXPECT_EQ(count_variant_ms(ops::MatmulPolicy::kBatchInvariantSplitK, 4096, 4096, rng), 0);
  EXPECT_EQ(count_variant_ms(ops::MatmulPolicy::kBatchInvariantSplitK, 4096, 14336, rng), 0);
  // Informative: the default differs from M = 4096 at M <= 16 (the skinny kernel), matches it above.
  count_variant_ms(ops::MatmulPolicy::kSkinnySmallM, 4096, 4096, rng);
}

// q/k/v-shaped dense weights stored one after another in one buffer (the loader's stacked q/k/v) run as one GEMM
// past the skinny kernel's M under set_adjacent_matmuls(1): every output element against the matmuls run one by one
// (another GEMM shape, so within bf16 rounding), the outputs' rows the same for every M past 16, small M unchanged,
// and weights that are not adjacent (or with a bias) still run one by one.
TEST(CudaMatmul, AdjacentWeightsRunAsOneGemm) {
  struct Restore {
    ~Restore() { gpu_services().set_adjacent_matmuls(-1); }
  } restore;
  std::mt19937 rng(15);
  const int64_t k = 1024, ns[] = {1024, 256, 256};
  const double scale = 1.0 / std::sqrt(static_cast<double>(k));
  const HostTensor stacked = random_tensor(DType::kBF16, {1536, k}, rng, scale);
  DeviceTensor d_w(stacked);
  const HostTensor x = random_tensor(DType::kBF16, {300, k}, rng);
  DeviceTensor d_x(x);
  auto run = [&](int64_t m, int mode) {
    gpu_services().set_adjacent_matmuls(mode);
    std::vector<DeviceTensor> outs;
    std::vector<ops::MatmulParams> ps;
    int64_t row = 0;
    for (int64_t n : ns) {
      outs.emplace_back(HostTensor(DType::kBF16, {m, n}));
      outs.back().poison();
      ps.push_back({d_x.view().slice_rows(0, m), d_w.view().slice_rows(row, n), TensorView(), outs.back().view()});
      row += n;
    }
    gpu().matmuls(ps);
    std::vector<HostTensor> host;
    for (DeviceTensor& o : outs) host.push_back(o.to_host());
    return host;
  };
  const std::vector<HostTensor> big = run(300, 1);
  // The stacked path ran: only it uses scratch slot 8 (the stacked output), which is grown now.
  EXPECT_NE(gpu_services().scratch(0, 8), nullptr);
  for (int64_t m : {1, 16, 17, 64, 300}) {
    const std::vector<HostTensor> one = run(m, 0), stacked_out = run(m, 1);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(all_close(stacked_out[i], one[i])) << "M " << m << " #" << i;
      if (m <= 16) {
        EXPECT_TRUE(bitwise_equal(stacked_out[i], one[i])) << "M " << m << " #" << i << ": small M changed";
      } else {
        const size_t bytes = stacked_out[i].bytes.size();
        EXPECT_TRUE(std::equal(stacked_out[i].bytes.begin(), stacked_out[i].bytes.end(), big[i].bytes.begin()))
            << "M " << m << " #" << i << ": rows depend on M (" << bytes << " bytes)";
      }
    }
  }
}

}  // namespace
}  // namespace peregrine::cuda_test
