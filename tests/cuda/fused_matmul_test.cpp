// Fused decode matmuls (ops.h MatmulFusion; the skinny kernel's norm made piece by piece as x is read, residual add
// and SiLU·mul epilogues) against the ref backend's definition on fresh random inputs, every output element: dense
// bf16/f16 and W4A16 / W8A16 codes on the factored path, q/k/v-like groups with the norm and bias, a residual add in
// place, and gate/up as a silu pair with and without the norm; rows bitwise the same for every M <= 16; and what the
// backend refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/status.h"
#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

constexpr int64_t kMaxM = ops::kSkinnyMatmulMaxM;
constexpr DType kDense = DType::kF32;  // as `codes`: a dense weight in the activation dtype

struct Weights {
  HostTensor w, scales, zeros;  // dense w, or codes with f32 group scales and zeros
  DeviceTensor d_w, d_scales, d_zeros;
  ops::WeightQuant host_q, dev_q;
};

Weights make_weights(DType act, DType codes, int64_t n, int64_t k, std::mt19937& rng, int64_t group = 128) {
  Weights r;
  if (codes == kDense) {
    r.w = random_tensor(act, {n, k}, rng, 1.0 / std::sqrt(static_cast<double>(k)));
    r.d_w = DeviceTensor(r.w);
    return r;
  }
  const int64_t groups = k / group;
  r.w = HostTensor(codes, {n, k});
  for (auto& b : r.w.bytes) b = static_cast<uint8_t>(rng());
  r.scales = HostTensor(DType::kF32, {n, groups});
  r.zeros = HostTensor(DType::kF32, {n, groups});
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double top = codes == DType::kI4 ? 15 : 255;
  for (int64_t i = 0; i < n * groups; ++i) {
    r.scales.set(i, (0.2 + u(rng)) / std::sqrt(static_cast<double>(k)) / (codes == DType::kI4 ? 4 : 64));
    r.zeros.set(i, std::round(u(rng) * top));
  }
  r.d_w = DeviceTensor(r.w);
  r.d_scales = DeviceTensor(r.scales);
  r.d_zeros = DeviceTensor(r.zeros);
  r.host_q.scales = r.scales.view();
  r.host_q.zeros = r.zeros.view();
  r.host_q.group_size = group;
  r.dev_q = r.host_q;
  r.dev_q.scales = r.d_scales.view();
  r.dev_q.zeros = r.d_zeros.view();
  return r;
}

// One fused group of the given kind on both backends: every element against the ref.
// kPlain: the group's matmuls one by one, without a fusion; kSiluOnly: the silu pair without the norm (x already
// normalised; the epilogue fusion the model uses where the norm runs on its own). Returns the device's outputs.
enum class Kind { kNormGroup, kResidual, kSiluPair, kPlain, kSiluOnly };

std::vector<HostTensor> check_group(Kind kind, DType act, DType codes, int64_t m, int64_t k, std::vector<int64_t> ns,
                                    bool bias, std::mt19937& rng, int64_t group = 128) {
  HostTensor x = random_tensor(act, {m, k}, rng, 3.0);  // a residual stream well away from unit scale
  HostTensor gamma = random_tensor(act, {k}, rng);
  DeviceTensor d_x(x), d_gamma(gamma);
  std::vector<Weights> ws;
  std::vector<HostTensor> b, want;
  std::vector<DeviceTensor> d_b, d_out;
  for (int64_t n : ns) {
    ws.push_back(make_weights(act, codes, n, k, rng, group));
    b.push_back(bias ? random_tensor(DType::kF32, {n}, rng) : HostTensor());
    d_b.push_back(bias ? DeviceTensor(b.back()) : DeviceTensor());
    want.push_back(kind == Kind::kResidual ? random_tensor(act, {m, n}, rng) : HostTensor(act, {m, n}));
    d_out.emplace_back(want.back());
    if (kind != Kind::kResidual) d_out.back().poison();
  }
  std::vector<ops::MatmulParams> hp, dp;
  for (size_t i = 0; i < ns.size(); ++i) {
    hp.push_back({x.view(), ws[i].w.view(), bias ? b[i].view() : TensorView(), want[i].view(), ws[i].host_q});
    dp.push_back({d_x.view(), ws[i].d_w.view(), bias ? d_b[i].view() : TensorView(), d_out[i].view(), ws[i].dev_q});
  }
  ops::MatmulFusion hf, df;
  if (kind == Kind::kNormGroup || kind == Kind::kSiluPair) {
    hf.norm_weight = gamma.view();
    df.norm_weight = d_gamma.view();
    hf.eps = df.eps = 1e-5f;
  }
  if (kind == Kind::kResidual) {
    hf.residual = want[0].view();
    df.residual = d_out[0].view();
  }
  hf.silu_mul = df.silu_mul = kind == Kind::kSiluPair || kind == Kind::kSiluOnly;
  if (kind == Kind::kPlain) {
    for (size_t i = 0; i < ns.size(); ++i) {
      ref().matmul(hp[i]);
      gpu().matmul(dp[i]);
    }
  } else {
    ref().matmuls_fused(hp, hf);
    gpu().matmuls_fused(dp, df);
  }
  const size_t outs = hf.silu_mul ? 1 : ns.size();
  std::vector<HostTensor> got;
  for (size_t i = 0; i < outs; ++i) {
    got.push_back(d_out[i].to_host());
    EXPECT_TRUE(all_close(got.back(), want[i])) << dtype_name(act) << " codes " << dtype_name(codes) << " kind "
                                                << static_cast<int>(kind) << " M " << m << " out " << i;
  }
  return got;
}

TEST(CudaFusedMatmul, MatchesTheReferenceOnEveryElement) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(4101);
  for (DType act : {DType::kBF16, DType::kF16})
    for (DType codes : {kDense, DType::kI4, DType::kU8})
      for (int64_t m : {1, 3, 8, 9, 16}) {
        const bool bias = m % 2 == 1;
        check_group(Kind::kNormGroup, act, codes, m, 512, {384, 128, 136}, bias, rng);
        check_group(Kind::kResidual, act, codes, m, 640, {264}, bias, rng);
        check_group(Kind::kSiluPair, act, codes, m, 512, {1000, 1000}, bias, rng);
        check_group(Kind::kSiluOnly, act, codes, m, 512, {1000, 1000}, bias, rng);
      }
  // More tiles than a wave of blocks, N tails included; K not a multiple of a chunk (its tail pieces are zeros) and a
  // long K.
  for (int64_t m : {1, 16}) {
    check_group(Kind::kSiluPair, DType::kBF16, kDense, m, 512, {4100, 4100}, true, rng);
    check_group(Kind::kNormGroup, DType::kBF16, DType::kI4, m, 512, {4096, 1024, 1032}, false, rng);
    check_group(Kind::kNormGroup, DType::kBF16, kDense, m, 520, {64, 72}, true, rng);
    check_group(Kind::kSiluPair, DType::kF16, kDense, m, 19456, {96, 96}, false, rng);
    check_group(Kind::kSiluOnly, DType::kBF16, DType::kI4, m, 4096, {2056, 2056}, false, rng);
    check_group(Kind::kSiluOnly, DType::kBF16, DType::kU8, m, 4096, {2056, 2056}, true, rng);
  }
}

// Rows of every M in 1..16 bitwise equal to the same rows of M = 16, for the norm group and the silu pair on the
// Llama-3-8B shapes.
TEST(CudaFusedMatmul, RowsDoNotDependOnM) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(4102);
  const int64_t k = 4096;
  for (DType codes : {kDense, DType::kI4}) {
    HostTensor x = random_tensor(DType::kBF16, {kMaxM, k}, rng, 3.0);
    DeviceTensor d_x(x), d_gamma(random_tensor(DType::kBF16, {k}, rng));
    Weights gate = make_weights(DType::kBF16, codes, 14336, k, rng), up = make_weights(DType::kBF16, codes, 14336, k, rng);
    auto run = [&](int64_t mm) {
      DeviceTensor out(HostTensor(DType::kBF16, {mm, 14336})), unused(HostTensor(DType::kBF16, {mm, 14336}));
      const std::array<ops::MatmulParams, 2> ps = {
          ops::MatmulParams{d_x.view().slice_rows(0, mm), gate.d_w.view(), TensorView(), out.view(), gate.dev_q},
          ops::MatmulParams{d_x.view().slice_rows(0, mm), up.d_w.view(), TensorView(), unused.view(), up.dev_q}};
      ops::MatmulFusion f;
      f.norm_weight = d_gamma.view();
      f.silu_mul = true;
      gpu().matmuls_fused(ps, f);
      return out.to_host();
    };
    const HostTensor full = run(kMaxM);
    std::string bad;
    for (int64_t mm = 1; mm < kMaxM; ++mm) {
      const HostTensor got = run(mm);
      if (!std::equal(got.bytes.begin(), got.bytes.end(), full.bytes.begin())) bad += " " + std::to_string(mm);
    }
    EXPECT_TRUE(bad.empty()) << "codes " << dtype_name(codes) << ": rows differing at M =" << bad;
  }
}

// What has no fused kernel is refused by fuses_matmuls and by matmuls_fused (with an Error, not a wrong result).
TEST(CudaFusedMatmul, RefusesWhatItHasNoKernelFor) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(4103);
  HostTensor x = random_tensor(DType::kBF16, {kMaxM + 1, 256}, rng);
  DeviceTensor d_x(x), d_gamma(random_tensor(DType::kBF16, {256}, rng)), d_w(random_tensor(DType::kBF16, {64, 256}, rng));
  DeviceTensor d_out(HostTensor(DType::kBF16, {kMaxM + 1, 64}));
  ops::MatmulFusion f;
  f.norm_weight = d_gamma.view();
  const ops::MatmulParams big{d_x.view(), d_w.view(), TensorView(), d_out.view()};  // M = 17: past the kernel
  EXPECT_FALSE(gpu().fuses_matmuls({&big, 1}, f));
  EXPECT_THROW(gpu().matmuls_fused({&big, 1}, f), peregrine::Error);
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kBatchInvariantSplitK);  // no skinny kernel at all
  const ops::MatmulParams one{d_x.view().slice_rows(0, 1), d_w.view(), TensorView(), d_out.view().slice_rows(0, 1)};
  EXPECT_FALSE(gpu().fuses_matmuls({&one, 1}, f));
  EXPECT_THROW(gpu().matmuls_fused({&one, 1}, f), peregrine::Error);
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  // The model takes the fused path for dense weights unless told not to (PEREGRINE_FUSE=0); the kernel itself runs
  // either way.
  const char* on = std::getenv("PEREGRINE_FUSE");
  EXPECT_EQ(gpu().fuses_matmuls({&one, 1}, f), !(on != nullptr && std::string(on) == "0"));
  EXPECT_NO_THROW(gpu().matmuls_fused({&one, 1}, f));
  // A residual add into another dtype than the product's, and a silu pair of two sizes, have no kernel.
  DeviceTensor f32_out(HostTensor(DType::kF32, {1, 64}));
  ops::MatmulFusion fr;
  fr.residual = f32_out.view();
  const ops::MatmulParams to_f32{d_x.view().slice_rows(0, 1), d_w.view(), TensorView(), f32_out.view()};
  EXPECT_FALSE(gpu().fuses_matmuls({&to_f32, 1}, fr));
  ops::MatmulFusion fp;
  fp.silu_mul = true;
  DeviceTensor d_w72(random_tensor(DType::kBF16, {72, 256}, rng)), d_out72(HostTensor(DType::kBF16, {1, 72}));
  const ops::MatmulParams other{d_x.view().slice_rows(0, 1), d_w72.view(), TensorView(), d_out72.view()};
  const std::array<ops::MatmulParams, 2> pair = {one, other};
  EXPECT_FALSE(gpu().fuses_matmuls(pair, fp));
  // The norm's weights must fit in shared memory (K <= 19456).
  DeviceTensor xw(random_tensor(DType::kBF16, {1, 19520}, rng)), gw(random_tensor(DType::kBF16, {19520}, rng));
  DeviceTensor ww(random_tensor(DType::kBF16, {64, 19520}, rng)), ow(HostTensor(DType::kBF16, {1, 64}));
  ops::MatmulFusion fw;
  fw.norm_weight = gw.view();
  const ops::MatmulParams wide{xw.view(), ww.view(), TensorView(), ow.view()};
  EXPECT_FALSE(gpu().fuses_matmuls({&wide, 1}, fw));
  EXPECT_THROW(gpu().matmuls_fused({&wide, 1}, fw), peregrine::Error);
}

}  // namespace
}  // namespace peregrine::cuda_test
