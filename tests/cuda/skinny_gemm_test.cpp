// The skinny tensor-core matmul (skinny_gemm.cuh; the default policy's path for bf16/f16 at M <= 16): every output
// element against the ref backend on fresh random inputs (tails in N and K, bias, every out dtype), rows bitwise
// the same for every M in its range, grouped launches (Backend::matmuls) bitwise equal to separate matmuls, and
// the larger-M path still batch-invariant among its own M.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

constexpr int64_t kMaxM = ops::kSkinnyMatmulMaxM;

bool same_bytes(const HostTensor& a, const HostTensor& b, int64_t rows, int64_t n) {
  const size_t bytes = static_cast<size_t>(rows * n) * dtype_bytes(a.dtype, 1);
  return std::equal(a.bytes.begin(), a.bytes.begin() + static_cast<std::ptrdiff_t>(bytes), b.bytes.begin());
}

TEST(CudaSkinnyGemm, MatchesReferenceOnEveryElement) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(3101);
  struct Shape {
    int64_t n, k;
  };
  // N tails (not a multiple of 16), K tails (not a multiple of the 64-wide chunk), K shorter than 8 warps' chunks.
  const Shape shapes[] = {{16, 64}, {40, 136}, {384, 384}, {1000, 1024}, {7, 8}, {1024, 4096}, {257, 520}};
  for (DType t : {DType::kBF16, DType::kF16})
    for (const Shape& s : shapes)
      for (int64_t m : {1, 2, 3, 7, 8, 9, 15, 16})
        for (DType out_t : {t, DType::kF32}) {
          const bool with_bias = (m + s.n) % 2 == 1;
          HostTensor x = random_tensor(t, {m, s.k}, rng);
          HostTensor w = random_tensor(t, {s.n, s.k}, rng, 1.0 / std::sqrt(static_cast<double>(s.k)));
          HostTensor bias = with_bias ? random_tensor(DType::kF32, {s.n}, rng) : HostTensor();
          HostTensor want(out_t, {m, s.n});
          ref().matmul({x.view(), w.view(), with_bias ? bias.view() : TensorView(), want.view()});
          DeviceTensor d_x(x), d_w(w), d_out(want);
          DeviceTensor d_bias = with_bias ? DeviceTensor(bias) : DeviceTensor();
          d_out.poison();
          gpu().matmul({d_x.view(), d_w.view(), with_bias ? d_bias.view() : TensorView(), d_out.view()});
          EXPECT_EQ(gpu_services().describe_last_matmul().rfind("skinny", 0), 0u);
          EXPECT_TRUE(all_close(d_out.to_host(), want)) << dtype_name(t) << " -> " << dtype_name(out_t) << " M " << m
                                                        << " N " << s.n << " K " << s.k << (with_bias ? " bias" : "");
        }
}

// Rows of every M in 1..16 equal bitwise the same rows of M = 16 (the kernel's range), on the Llama-3-8B shapes.
TEST(CudaSkinnyGemm, RowsDoNotDependOnMWithinItsRange) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(3102);
  struct Shape {
    int64_t n, k;
  };
  for (const Shape& s : {Shape{4096, 4096}, Shape{1024, 4096}, Shape{4096, 14336}, Shape{14336, 4096}}) {
    HostTensor x = random_tensor(DType::kBF16, {kMaxM + 8, s.k}, rng);
    HostTensor w = random_tensor(DType::kBF16, {s.n, s.k}, rng, 1.0 / std::sqrt(static_cast<double>(s.k)));
    DeviceTensor d_x(x), d_w(w);
    auto run = [&](int64_t first, int64_t m) {
      DeviceTensor d_out(HostTensor(DType::kBF16, {m, s.n}));
      gpu().matmul({d_x.view().slice_rows(first, m), d_w.view(), TensorView(), d_out.view()});
      return d_out.to_host();
    };
    const HostTensor full = run(0, kMaxM);
    std::string bad;
    for (int64_t m = 1; m < kMaxM; ++m)
      if (!same_bytes(run(0, m), full, m, s.n)) bad.append(" ").append(std::to_string(m));
    // A row at another offset within the batch: x row 5 computed as M = 1 and as row 0 of M = 3.
    const HostTensor at5 = run(5, 1), at5_of3 = run(5, 3);
    HostTensor row5(DType::kBF16, {1, s.n});
    std::copy(full.bytes.begin() + 5 * s.n * 2, full.bytes.begin() + 6 * s.n * 2, row5.bytes.begin());
    if (!same_bytes(at5, row5, 1, s.n)) bad += " 1@5";
    if (!same_bytes(at5_of3, row5, 1, s.n)) bad += " 3@5";
    EXPECT_TRUE(bad.empty()) << "[" << s.n << " x " << s.k << "] rows differing at M =" << bad;
  }
}

// q/k/v in one launch: each output bitwise equal to its own matmul, with and without bias, at several M. Llama-3-8B's
// q/k/v (384 tiles) launch as three blocks per SM where each alone launches as two: the results must not differ.
TEST(CudaSkinnyGemm, GroupedMatmulsEqualSeparateOnes) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(3103);
  struct Case {
    int64_t m, k;
    std::array<int64_t, 3> ns;
    bool with_bias;
  };
  std::vector<Case> cases;
  for (int64_t m : {1, 5, 16, 17, 40})  // 17, 40: past the kernel, grouped falls back to one matmul each
    for (bool with_bias : {false, true}) cases.push_back({m, 512, {384, 128, 136}, with_bias});
  for (int64_t m : {1, 8}) cases.push_back({m, 4096, {4096, 1024, 1024}, false});
  for (const auto& [m, k, ns, with_bias] : cases) {
    HostTensor x = random_tensor(DType::kBF16, {m, k}, rng);
    DeviceTensor d_x(x);
    const double w_scale = 1.0 / std::sqrt(static_cast<double>(k));
    std::vector<DeviceTensor> d_w, d_b, d_sep, d_grp;
    std::vector<ops::MatmulParams> sep, grp;
    for (int64_t n : ns) {
      d_w.emplace_back(random_tensor(DType::kBF16, {n, k}, rng, w_scale));
      d_b.emplace_back(with_bias ? DeviceTensor(random_tensor(DType::kBF16, {n}, rng)) : DeviceTensor());
      d_sep.emplace_back(HostTensor(DType::kBF16, {m, n}));
      d_grp.emplace_back(HostTensor(DType::kBF16, {m, n}));
    }
    for (size_t i = 0; i < ns.size(); ++i) {
      const TensorView b = with_bias ? d_b[i].view() : TensorView();
      sep.push_back({d_x.view(), d_w[i].view(), b, d_sep[i].view()});
      grp.push_back({d_x.view(), d_w[i].view(), b, d_grp[i].view()});
      d_grp[i].poison();
    }
    for (const ops::MatmulParams& p : sep) gpu().matmul(p);
    gpu().matmuls(grp);
    for (size_t i = 0; i < ns.size(); ++i)
      EXPECT_TRUE(bitwise_equal(d_grp[i].to_host(), d_sep[i].to_host()))
          << "M " << m << " segment " << i << (with_bias ? " bias" : "");
  }
}

// Past the kernel's range the default policy is the batch-invariant split-K cuBLASLt path: rows of M = 17..512
// equal the same rows of M = 512.
TEST(CudaSkinnyGemm, LargerMRowsDoNotDependOnM) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(3104);
  const int64_t n = 4096, k = 4096, full_m = 512;
  HostTensor x = random_tensor(DType::kBF16, {full_m, k}, rng);
  HostTensor w = random_tensor(DType::kBF16, {n, k}, rng, 1.0 / 64);
  DeviceTensor d_x(x), d_w(w);
  auto run = [&](int64_t m) {
    DeviceTensor d_out(HostTensor(DType::kBF16, {m, n}));
    gpu().matmul({d_x.view().slice_rows(0, m), d_w.view(), TensorView(), d_out.view()});
    return d_out.to_host();
  };
  const HostTensor full = run(full_m);
  for (int64_t m : {kMaxM + 1, int64_t{32}, int64_t{100}, int64_t{256}})
    EXPECT_TRUE(same_bytes(run(m), full, m, n)) << "M " << m;
  // Informative: how far apart the two paths' rows are (they round differently; both match the ref).
  const HostTensor small = run(1);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(small.get(i) - full.get(i)));
  std::printf("  skinny M=1 vs cuBLASLt M=512, row 0: largest difference %.3g\n", worst);
}

}  // namespace
}  // namespace peregrine::cuda_test
