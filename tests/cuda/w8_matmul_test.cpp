// CUDA 8-bit matmuls vs the ref backend on fresh random inputs, every output element: int8 W8A8 per channel, FP8
// W8A8 per channel and in 128x128 blocks with per-token-group activations, weight-only int8 / fp8 codes, bias,
// bf16 and f32 activations, M from 1 to 64; rows bit-identical for every M within a path (FP8 per channel at
// M = 64 runs cuBLASLt's FP8 GEMM: f32 outputs within 1e-3 of max|y| there, tensor-core accumulation); per channel
// W8A8 at small M on the 8-bit tensor-core kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

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

// Random 8-bit codes [n, k] (no e4m3 NaN) and per-row f32 scales, on the host and the device.
struct W8Weight {
  HostTensor codes, scales;
  DeviceTensor d_codes, d_scales;
  ops::WeightQuant hq, dq;
};
W8Weight make_w8(DType codes_t, int64_t n, int64_t k, std::mt19937& rng) {
  HostTensor codes(codes_t, {n, k});
  for (auto& b : codes.bytes) {
    b = static_cast<uint8_t>(rng());
    if (codes_t == DType::kF8E4M3 && (b & 0x7f) == 0x7f) b ^= 1;
  }
  HostTensor scales(DType::kF32, {n, 1});
  std::uniform_real_distribution<double> u(0.2, 1.0);
  for (int64_t i = 0; i < n; ++i)
    scales.set(i, u(rng) / std::sqrt(static_cast<double>(k)) / (codes_t == DType::kI8 ? 64 : 200));
  W8Weight w{codes, scales, DeviceTensor(codes), DeviceTensor(scales), {}, {}};
  w.hq.scales = w.scales.view();
  w.hq.group_size = k;
  w.hq.act = codes_t == DType::kI8 ? ops::ActQuant::kInt8 : ops::ActQuant::kFp8;
  w.dq = w.hq;
  w.dq.scales = w.d_scales.view();
  return w;
}

// W8A8 per channel at small M takes the 8-bit tensor-core kernel (skinny_gemm.cuh): int8 rows are the warp
// kernel's (M = 40) bit for bit at every M up to 32; FP8 rows (M <= 32) are within 1e-3 of max|y| of the ref (the
// tensor cores sum 32 products at a time) and the same bits for every M <= 32; grouped launches (q/k/v) give the
// bits of separate ones.
TEST(CudaW8Matmul, SmallMTensorCoreKernel) {
  std::mt19937 rng(32);
  const int64_t k = 4096;
  const int64_t ns[] = {1040, 136, 200};  // 65 tiles of 16 rows; rows that do not fill a tile
  for (DType codes_t : {DType::kI8, DType::kF8E4M3}) {
    const bool fp8 = codes_t == DType::kF8E4M3;
    std::vector<W8Weight> ws;
    for (int64_t n : ns) ws.push_back(make_w8(codes_t, n, k, rng));
    HostTensor bias = random_tensor(DType::kBF16, {ns[2]}, rng);
    DeviceTensor d_bias(bias);
    for (DType act : {DType::kBF16, DType::kF32}) {
      const int64_t big = fp8 ? 32 : 40;  // int8: M = 40 is cuBLASLt's int8 GEMM (or the warp kernel), the same bits
      HostTensor x = random_tensor(act, {big, k}, rng);
      DeviceTensor d_x(x);
      const std::string what = std::string(dtype_name(codes_t)) + " x " + std::string(dtype_name(act));
      auto run = [&](int64_t m, size_t i) {
        DeviceTensor d_out(HostTensor(act, {m, ns[i]}));
        d_out.poison();
        gpu().matmul({d_x.view().slice_rows(0, m), ws[i].d_codes.view(), i == 2 ? d_bias.view() : TensorView(),
                      d_out.view(), ws[i].dq});
        return d_out.to_host();
      };
      std::vector<HostTensor> full;
      for (size_t i = 0; i < ws.size(); ++i) full.push_back(run(big, i));
      // Against the ref (FP8 at M = 32: the kernel itself; int8 at 40 is checked by the test below).
      if (fp8) {
        for (size_t i = 0; i < ws.size(); ++i) {
          HostTensor want(act, {big, ns[i]});
          ref().matmul({x.view(), ws[i].codes.view(), i == 2 ? bias.view() : TensorView(), want.view(), ws[i].hq});
          double ymax = 0;
          for (int64_t e = 0; e < want.numel(); ++e) ymax = std::max(ymax, std::fabs(want.get(e)));
          const double tol = (act == DType::kF32 ? 1e-3 : 1e-2) * ymax;
          int bad = 0;
          for (int64_t e = 0; e < want.numel(); ++e) bad += !(std::fabs(full[i].get(e) - want.get(e)) <= tol);
          EXPECT_EQ(bad, 0) << what << " #" << i;
        }
      }
      for (int64_t m : {1, 2, 7, 8, 9, 16, 17, 31, 32}) {
        if (m > big) continue;
        for (size_t i = 0; i < ws.size(); ++i) {
          const HostTensor got = run(m, i);
          EXPECT_EQ(std::memcmp(got.bytes.data(), full[i].bytes.data(), got.bytes.size()), 0)
              << what << " M " << m << " #" << i;
        }
      }
      for (int64_t m : {int64_t{1}, int64_t{12}, int64_t{32}}) {  // q/k/v as one launch
        std::vector<DeviceTensor> grouped;
        std::vector<ops::MatmulParams> ps;
        for (size_t i = 0; i < ws.size(); ++i) grouped.emplace_back(HostTensor(act, {m, ns[i]}));
        for (size_t i = 0; i < ws.size(); ++i)
          ps.push_back({d_x.view().slice_rows(0, m), ws[i].d_codes.view(), i == 2 ? d_bias.view() : TensorView(),
                        grouped[i].view(), ws[i].dq});
        gpu().matmuls(ps);
        for (size_t i = 0; i < ws.size(); ++i) {
          const HostTensor got = grouped[i].to_host();
          EXPECT_EQ(std::memcmp(got.bytes.data(), full[i].bytes.data(), got.bytes.size()), 0)
              << what << " grouped M " << m << " #" << i;
        }
      }
    }
  }
}

// int8 W8A8 per channel beyond the skinny kernel's M: cuBLASLt's int8 GEMM (N % 16 == 0) or the warp kernel (other
// N), then the warp kernel's epilogue: every element within the ref's tolerance, and every row the same bits as the
// same x row at M <= 32 (the skinny kernel) and as at any other M.
TEST(CudaW8Matmul, LargeMInt8RowsAreTheSmallMBits) {
  std::mt19937 rng(33);
  const int64_t k = 1024, m = 300;
  const int64_t ns[] = {1040, 200};
  HostTensor bias = random_tensor(DType::kBF16, {ns[0]}, rng);
  DeviceTensor d_bias(bias);
  for (DType act : {DType::kBF16, DType::kF32}) {
    HostTensor x = random_tensor(act, {m, k}, rng);
    DeviceTensor d_x(x);
    for (size_t i = 0; i < 2; ++i) {
      const W8Weight w = make_w8(DType::kI8, ns[i], k, rng);
      const int64_t n = ns[i];
      const std::string what = std::string(dtype_name(act)) + " N " + std::to_string(n);
      auto run = [&](int64_t r0, int64_t rows) {
        DeviceTensor d_out(HostTensor(act, {rows, n}));
        d_out.poison();
        gpu().matmul({d_x.view().slice_rows(r0, rows), w.d_codes.view(), i == 0 ? d_bias.view() : TensorView(),
                      d_out.view(), w.dq});
        return d_out.to_host();
      };
      const HostTensor full = run(0, m);
      HostTensor want(act, {m, n});
      ref().matmul({x.view(), w.codes.view(), i == 0 ? bias.view() : TensorView(), want.view(), w.hq});
      double ymax = 0;
      for (int64_t e = 0; e < want.numel(); ++e) ymax = std::max(ymax, std::fabs(want.get(e)));
      const double tol = (act == DType::kF32 ? 1e-4 : 1e-2) * ymax;
      int bad = 0;
      for (int64_t e = 0; e < want.numel(); ++e) bad += !(std::fabs(full.get(e) - want.get(e)) <= tol);
      EXPECT_EQ(bad, 0) << what;
      const size_t row_bytes = full.bytes.size() / static_cast<size_t>(m);
      struct Slice { int64_t r0, rows; };
      for (Slice sl : {Slice{0, 32}, Slice{268, 32}, Slice{5, 1}, Slice{100, 17}, Slice{1, 160}}) {
        const HostTensor got = run(sl.r0, sl.rows);
        EXPECT_EQ(std::memcmp(got.bytes.data(), full.bytes.data() + static_cast<size_t>(sl.r0) * row_bytes,
                              got.bytes.size()),
                  0)
            << what << " rows " << sl.r0 << "+" << sl.rows;
      }
    }
  }
}

}  // namespace
}  // namespace peregrine::cuda_test
