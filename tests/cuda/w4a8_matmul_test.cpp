// CUDA W4A8 matmul (symmetric int4 codes per group or per channel, activations int8 per token) vs the ref
// backend on fresh random inputs, every output element: the warp GEMV (M <= 16: codes widened in registers,
// dp4a) and the large-M path (x widened, codes dequantized, cuBLASLt into f32, scales after), bf16 and f32
// activations, bias; rows bit-identical for every M within a path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"
#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

struct W4Inputs {
  HostTensor codes, scales;
};

W4Inputs make_w4(int64_t n, int64_t k, int64_t group, std::mt19937& rng) {
  W4Inputs in{HostTensor(DType::kI4, {n, k}), HostTensor(DType::kF32, {n, k / group})};
  for (auto& b : in.codes.bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<double> u(0.2, 1.0);
  for (int64_t i = 0; i < in.scales.numel(); ++i) in.scales.set(i, u(rng) / std::sqrt(static_cast<double>(k)) / 4);
  return in;
}

ops::WeightQuant quant(const TensorView& scales, int64_t group) {
  ops::WeightQuant q;
  q.scales = scales;
  q.group_size = group;
  q.act = ops::ActQuant::kInt8;
  return q;
}

TEST(CudaW4A8Matmul, MatchesRefOnEveryElement) {
  std::mt19937 rng(61);
  struct Case { int64_t n, k, group; bool bias; };
  const Case cases[] = {{384, 512, 128, false}, {130, 1024, 128, true}, {256, 512, 512, true},
                        {96, 256, 32, false},   {200, 384, 384, true},  {64, 2048, 64, false}};
  for (const Case& c : cases) {
    const W4Inputs in = make_w4(c.n, c.k, c.group, rng);
    DeviceTensor d_codes(in.codes), d_scales(in.scales);
    const ops::WeightQuant hq = quant(in.scales.view(), c.group), dq = quant(d_scales.view(), c.group);
    HostTensor bias = random_tensor(DType::kBF16, {c.n}, rng);
    DeviceTensor d_bias(bias);
    const TensorView hb = c.bias ? bias.view() : TensorView(), db = c.bias ? d_bias.view() : TensorView();
    for (DType act : {DType::kBF16, DType::kF32})
      for (int64_t m : {1, 3, 16, 17, 64, 100}) {
        HostTensor x = random_tensor(act, {m, c.k}, rng);
        HostTensor want(act, {m, c.n});
        ref().matmul({x.view(), in.codes.view(), hb, want.view(), hq});
        double ymax = 0;
        for (int64_t i = 0; i < want.numel(); ++i) ymax = std::max(ymax, std::fabs(want.get(i)));
        DeviceTensor d_x(x), d_out(want);
        d_out.poison();
        gpu().matmul({d_x.view(), d_codes.view(), db, d_out.view(), dq});
        const HostTensor got = d_out.to_host();
        const std::string what = "N " + std::to_string(c.n) + " K " + std::to_string(c.k) + " G " +
                                 std::to_string(c.group) + " x " + std::string(dtype_name(act)) + " M " + std::to_string(m);
        if (act == DType::kF32) {
          // The GEMV sums exactly in int32 and scales in f32 (1e-5); the large-M path rounds (code - 8) * scale to
          // the activation dtype only for bf16/f16, so f32 stays within 1e-5 of max|y| there as well except for
          // the GEMM's own accumulation order (cuBLASLt f32: 1e-4).
          const double tol = (m <= 16 ? 1e-5 : 1e-4) * ymax;
          for (int64_t i = 0; i < got.numel(); ++i) ASSERT_NEAR(got.get(i), want.get(i), tol) << what << " element " << i;
        } else {
          EXPECT_TRUE(all_close(got, want)) << what;
        }
      }
  }
}

TEST(CudaW4A8Matmul, RowsDoNotDependOnMWithinAPath) {
  std::mt19937 rng(67);
  for (int64_t group : {128, 1024}) {
    const int64_t n = 512, k = 1024;
    const W4Inputs in = make_w4(n, k, group, rng);
    DeviceTensor d_codes(in.codes), d_scales(in.scales);
    const ops::WeightQuant dq = quant(d_scales.view(), group);
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
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), small.bytes.begin())) << "G " << group << " M " << m;
    }
    for (int64_t m : {17, 64, 200}) {
      const HostTensor got = run(m);
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), large.bytes.begin())) << "G " << group << " M " << m;
    }
  }
}

// Shapes the kernels do not take are refused by name, never run.
TEST(CudaW4A8Matmul, RefusesShapesItCannotRun) {
  std::mt19937 rng(71);
  const W4Inputs in = make_w4(64, 96, 48, rng);
  DeviceTensor d_codes(in.codes), d_scales(in.scales);
  HostTensor x = random_tensor(DType::kBF16, {2, 96}, rng);
  DeviceTensor d_x(x), d_out(HostTensor(DType::kBF16, {2, 64}));
  try {
    gpu().matmul({d_x.view(), d_codes.view(), TensorView(), d_out.view(), quant(d_scales.view(), 48)});
    ADD_FAILURE() << "group 48 ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace peregrine::cuda_test
