// CUDA 8-bit matmuls vs the ref backend on fresh random inputs, every output element: int8 W8A8 per channel, FP8
// W8A8 per channel and in 128x128 blocks with per-token-group activations, weight-only int8 / fp8 codes, bias,
// bf16 and f32 activations, M from 1 to 64; rows bit-identical for every M within a path (FP8 per channel at
// M = 64 runs cuBLASLt's FP8 GEMM: f32 outputs within 1e-3 of max|y| there, tensor-core accumulation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

TEST(CudaW8Matmul, MatchesRefOnEveryElement) {
  std::mt19937 rng(31);
  struct Case { DType codes; ops::ActQuant act; int64_t n, k, group, block_rows, act_group; };
  using A = ops::ActQuant;
  const Case cases[] = {{DType::kI8, A::kInt8, 384, 512, 512, 1, 0},        {DType::kI8, A::kInt8, 130, 1024, 1024, 1, 0},
                        {DType::kF8E4M3, A::kFp8, 256, 512, 512, 1, 0},     {DType::kF8E4M3, A::kFp8, 384, 512, 128, 128, 128},
                        {DType::kF8E4M3, A::kFp8, 200, 384, 128, 128, 128}, {DType::kI8, A::kNone, 96, 256, 256, 1, 0},
                        {DType::kF8E4M3, A::kNone, 96, 256, 128, 128, 0}};
  for (const Case& c : cases) {
    HostTensor codes(c.codes, {c.n, c.k});
    for (auto& b : codes.bytes) {
      b = static_cast<uint8_t>(rng());
      if (c.codes == DType::kF8E4M3 && (b & 0x7f) == 0x7f) b ^= 1;
    }
    const int64_t rows = (c.n + c.block_rows - 1) / c.block_rows, groups = (c.k + c.group - 1) / c.group;
    HostTensor scales(DType::kF32, {rows, groups});
    std::uniform_real_distribution<double> u(0.2, 1.0);
    for (int64_t i = 0; i < rows * groups; ++i)
      scales.set(i, u(rng) / std::sqrt(static_cast<double>(c.k)) / (c.codes == DType::kI8 ? 64 : 200));
    ops::WeightQuant q;
    q.scales = scales.view();
    q.group_size = c.group;
    q.block_rows = c.block_rows;
    q.act = c.act;
    q.act_group = c.act_group;
    DeviceTensor d_codes(codes), d_scales(scales);
    ops::WeightQuant dq = q;
    dq.scales = d_scales.view();
    HostTensor bias = random_tensor(DType::kBF16, {c.n}, rng);
    DeviceTensor d_bias(bias);
    for (DType act : {DType::kBF16, DType::kF32}) {
      HostTensor x = random_tensor(act, {64, c.k}, rng);
      HostTensor want(act, {64, c.n});
      ref().matmul({x.view(), codes.view(), bias.view(), want.view(), q});
      double ymax = 0;
      for (int64_t i = 0; i < want.numel(); ++i) ymax = std::max(ymax, std::fabs(want.get(i)));
      DeviceTensor d_x(x), d_out(want);
      d_out.poison();
      gpu().matmul({d_x.view(), d_codes.view(), d_bias.view(), d_out.view(), dq});
      const HostTensor got = d_out.to_host();
      const std::string what = std::string(dtype_name(c.codes)) + " act " + std::to_string(static_cast<int>(c.act)) +
                               " N " + std::to_string(c.n) + " K " + std::to_string(c.k) + " G " + std::to_string(c.group) +
                               " x " + std::string(dtype_name(act));
      const bool lt_path = c.codes == DType::kF8E4M3 && c.act == A::kFp8 && c.block_rows == 1 && c.group == c.k;
      if (act == DType::kF32) {
        for (int64_t i = 0; i < got.numel(); ++i)
          ASSERT_NEAR(got.get(i), want.get(i), (lt_path ? 1e-3 : 1e-5) * ymax) << what << " element " << i;
      } else {
        EXPECT_TRUE(all_close(got, want)) << what;
      }
      // Rows alone give the same bits as inside the batch (within the small-M path; and at 64 off cuBLASLt).
      HostTensor five;
      for (int64_t m : {5, 1}) {
        HostTensor xm(act, {m, c.k});
        std::memcpy(xm.bytes.data(), x.bytes.data(), xm.bytes.size());
        DeviceTensor d_xm(xm), d_om(HostTensor(act, {m, c.n}));
        gpu().matmul({d_xm.view(), d_codes.view(), d_bias.view(), d_om.view(), dq});
        const HostTensor om = d_om.to_host();
        if (m == 5) five = om;
        const HostTensor& base = lt_path ? five : got;
        EXPECT_EQ(std::memcmp(om.bytes.data(), base.bytes.data(), om.bytes.size()), 0) << what << " M " << m;
      }
    }
  }
}

}  // namespace
}  // namespace peregrine::cuda_test
