// CUDA W4A16 / W8A16 matmul vs the ref backend on fresh random inputs, every output element: int4 and uint8
// codes, groups 32..K (groups of 128 and more take the skinny kernel's factored path at M <= 16, smaller ones its
// dequantize-per-code path), zero points, act-order perm, irregular g_idx (dequantize path), bias, bf16, f16 and f32
// activations, M across the small-M kernels and the dequantize + GEMM path; and rows bit-identical for every M
// within each path.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

struct QuantInputs {
  HostTensor codes, scales, zeros, perm, g_idx;
  ops::WeightQuant host_quant(bool z, bool p, bool g, int64_t group) const {
    ops::WeightQuant q;
    q.scales = scales.view();
    if (z) q.zeros = zeros.view();
    if (p) q.perm = perm.view();
    if (g) q.g_idx = g_idx.view();
    q.group_size = group;
    return q;
  }
};

QuantInputs make_inputs(DType codes, int64_t n, int64_t k, int64_t group, std::mt19937& rng) {
  QuantInputs in;
  const int64_t groups = k / group;
  in.codes = HostTensor(codes, {n, k});
  for (auto& b : in.codes.bytes) b = static_cast<uint8_t>(rng());
  in.scales = HostTensor(DType::kF32, {n, groups});
  in.zeros = HostTensor(DType::kF32, {n, groups});
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double top = codes == DType::kI4 ? 15 : 255;
  for (int64_t i = 0; i < n * groups; ++i) {
    in.scales.set(i, (0.2 + u(rng)) / std::sqrt(static_cast<double>(k)) / (codes == DType::kI4 ? 4 : 64));
    in.zeros.set(i, std::round(u(rng) * top));
  }
  std::vector<int32_t> perm(static_cast<size_t>(k)), g_idx(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (auto& g : g_idx) g = static_cast<int32_t>(rng() % groups);
  in.perm = int_tensor(perm);
  in.g_idx = int_tensor(g_idx);
  return in;
}

TEST(CudaQuantMatmul, MatchesRefOnEveryElement) {
  std::mt19937 rng(21);
  struct Case { DType codes; int64_t n, k, group; bool zeros, perm, g_idx; };
  const Case cases[] = {{DType::kI4, 384, 512, 128, false, false, false}, {DType::kI4, 256, 256, 32, true, false, false},
                        {DType::kI4, 130, 1024, 64, true, true, false},   {DType::kI4, 64, 256, 256, false, false, false},
                        {DType::kI4, 96, 256, 64, true, false, true},     {DType::kI4, 200, 384, 128, true, false, false},
                        {DType::kU8, 200, 512, 128, false, false, false},
                        {DType::kU8, 128, 384, 128, true, true, false},   {DType::kU8, 64, 256, 256, true, false, false}};
  for (const Case& c : cases) {
    const QuantInputs in = make_inputs(c.codes, c.n, c.k, c.group, rng);
    DeviceTensor d_codes(in.codes), d_scales(in.scales), d_zeros(in.zeros), d_perm(in.perm), d_gidx(in.g_idx);
    ops::WeightQuant dq;
    dq.scales = d_scales.view();
    if (c.zeros) dq.zeros = d_zeros.view();
    if (c.perm) dq.perm = d_perm.view();
    if (c.g_idx) dq.g_idx = d_gidx.view();
    dq.group_size = c.group;
    const ops::WeightQuant hq = in.host_quant(c.zeros, c.perm, c.g_idx, c.group);
    HostTensor bias = random_tensor(DType::kBF16, {c.n}, rng);
    DeviceTensor d_bias(bias);
    for (DType act : {DType::kBF16, DType::kF16, DType::kF32})  // bf16/f16 at M <= 16: the skinny kernel; f32: GEMV
      for (int64_t m : {1, 3, 8, 9, 16, 17, 100}) {
        HostTensor x = random_tensor(act, {m, c.k}, rng);
        HostTensor want(act, {m, c.n});
        ref().matmul({x.view(), in.codes.view(), bias.view(), want.view(), hq});
        DeviceTensor d_x(x), d_out(want);
        d_out.poison();
        gpu().matmul({d_x.view(), d_codes.view(), d_bias.view(), d_out.view(), dq});
        EXPECT_TRUE(all_close(d_out.to_host(), want, act == DType::kF32 ? 1e-4 : -1))
            << dtype_name(c.codes) << " N " << c.n << " K " << c.k << " G " << c.group << (c.zeros ? " zeros" : "")
            << (c.perm ? " perm" : "") << (c.g_idx ? " g_idx" : "") << " act " << dtype_name(act) << " M " << m;
      }
  }
}

TEST(CudaQuantMatmul, RowsDoNotDependOnMWithinAPath) {
  std::mt19937 rng(22);
  for (DType codes : {DType::kI4, DType::kU8}) {
    const int64_t n = 512, k = 1024;
    const QuantInputs in = make_inputs(codes, n, k, 128, rng);
    DeviceTensor d_codes(in.codes), d_scales(in.scales), d_perm(in.perm);
    ops::WeightQuant dq;
    dq.scales = d_scales.view();
    dq.perm = d_perm.view();
    dq.group_size = 128;
    HostTensor x = random_tensor(DType::kBF16, {256, k}, rng);
    DeviceTensor d_x(x);
    auto run = [&](int64_t m) {
      DeviceTensor d_out(HostTensor(DType::kBF16, {m, n}));
      gpu().matmul({d_x.view().slice_rows(0, m), d_codes.view(), TensorView(), d_out.view(), dq});
      return d_out.to_host();
    };
    const HostTensor small = run(16), large = run(256);
    for (int64_t m : {1, 2, 5, 8}) {
      const HostTensor got = run(m);
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), small.bytes.begin())) << "M " << m;
    }
    for (int64_t m : {17, 64, 200}) {
      const HostTensor got = run(m);
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), large.bytes.begin())) << "M " << m;
    }
  }
}

// q/k/v and gate/up of a W4A16 / W8A16 model go as one skinny launch (Backend::matmuls): each output bitwise equal
// to its own matmul's, on the factored (group 128) and the dequantize-per-code (group 64) paths, with and without
// zero points and bias; past M = 16 the group falls back to one matmul each.
TEST(CudaQuantMatmul, GroupedMatmulsEqualSeparateOnes) {
  std::mt19937 rng(23);
  for (DType codes : {DType::kI4, DType::kU8})
    for (int64_t group : {128, 64})
      for (bool zeros : {false, true})
        for (int64_t m : {1, 9, 16, 20}) {
          const int64_t k = 1024;
          const int64_t ns[3] = {512, 128, 144};
          std::vector<QuantInputs> in;
          std::vector<DeviceTensor> d_codes, d_scales, d_zeros, d_bias, d_sep, d_grp;
          for (int64_t n : ns) {
            in.push_back(make_inputs(codes, n, k, group, rng));
            d_codes.emplace_back(in.back().codes);
            d_scales.emplace_back(in.back().scales);
            d_zeros.emplace_back(in.back().zeros);
            d_bias.emplace_back(random_tensor(DType::kBF16, {n}, rng));
            d_sep.emplace_back(HostTensor(DType::kBF16, {m, n}));
            d_grp.emplace_back(HostTensor(DType::kBF16, {m, n}));
            d_grp.back().poison();
          }
          HostTensor x = random_tensor(DType::kBF16, {m, k}, rng);
          DeviceTensor d_x(x);
          std::vector<ops::MatmulParams> sep, grp;
          for (size_t i = 0; i < 3; ++i) {
            ops::WeightQuant q;
            q.scales = d_scales[i].view();
            if (zeros) q.zeros = d_zeros[i].view();
            q.group_size = group;
            const TensorView b = i == 1 ? d_bias[i].view() : TensorView();
            sep.push_back({d_x.view(), d_codes[i].view(), b, d_sep[i].view(), q});
            grp.push_back({d_x.view(), d_codes[i].view(), b, d_grp[i].view(), q});
          }
          for (const ops::MatmulParams& p : sep) gpu().matmul(p);
          gpu().matmuls(grp);
          for (size_t i = 0; i < 3; ++i)
            EXPECT_TRUE(bitwise_equal(d_grp[i].to_host(), d_sep[i].to_host()))
                << dtype_name(codes) << " G " << group << (zeros ? " zeros" : "") << " M " << m << " segment " << i;
        }
}

}  // namespace
}  // namespace peregrine::cuda_test
