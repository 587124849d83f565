// CUDA 8-bit matmuls vs the ref backend on fresh random inputs, every output element: int8 W8A8 per channel, FP8
// W8A8 per channel and in 128x128 blocks with per-token-group activations, weight-only int8 / fp8 codes, bias,
// bf16 and f32 activations, M from 1 to 64; rows bit-identical for every M within a path (FP8 per channel and in
// blocks at M = 64 run cuBLASLt's FP8 GEMMs: f32 outputs within 1e-3 of max|y| there, tensor-core accumulation;
// the block-scaled GEMM's scale layouts checked against a host reference on their own); per channel
// W8A8 at small M on the 8-bit tensor-core kernel, its in-block quantizer and its fusions bit for bit the unfused
// ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/fp8_gemm_lt.h"
#include "backend/cuda/w8_matmul.cuh"
#include "core/status.h"
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
                        {DType::kF8E4M3, A::kFp8, 208, 384, 128, 128, 128},
                        {DType::kF8E4M3, A::kNone, 96, 256, 128, 128, 0},   {DType::kF8E4M3, A::kFp8, 1040, 4096, 128, 128, 128}};
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
      // FP8 in 128 x 128 blocks: the 8-bit tensor-core kernel at M <= 32, beyond it cuBLASLt's block-scaled GEMM
      // (the warp kernel with PEREGRINE_FP8_BLOCK_LT=0, or where it does not take the shape: N 200).
      const bool block_path = c.codes == DType::kF8E4M3 && c.act == A::kFp8 && c.block_rows == 128 && c.group == 128;
      auto near_ref = [&](const HostTensor& g, double tol, const std::string& where) {  // g: want's first rows
        if (act == DType::kF32) {
          for (int64_t i = 0; i < g.numel(); ++i) ASSERT_NEAR(g.get(i), want.get(i), tol * ymax) << where << " element " << i;
        } else {
          HostTensor rows(act, {g.view().dim(0), c.n});
          std::memcpy(rows.bytes.data(), want.bytes.data(), rows.bytes.size());
          EXPECT_TRUE(all_close(g, rows)) << where;
        }
      };
      near_ref(got, lt_path || block_path ? 1e-3 : 1e-5, what);
      if (block_path) {  // M 37: cuBLASLt runs it as 40 rows (the backend pads M to a multiple of 4)
        HostTensor x37(act, {37, c.k});
        std::memcpy(x37.bytes.data(), x.bytes.data(), x37.bytes.size());
        DeviceTensor d_x37(x37), d_o37(HostTensor(act, {37, c.n}));
        d_o37.poison();
        gpu().matmul({d_x37.view(), d_codes.view(), d_bias.view(), d_o37.view(), dq});
        near_ref(d_o37.to_host(), 1e-3, what + " M 37");
      }
      // Rows alone give the same bits as inside the batch (within the small-M path; and at 64 off cuBLASLt).
      HostTensor five;
      for (int64_t m : {5, 1}) {
        HostTensor xm(act, {m, c.k});
        std::memcpy(xm.bytes.data(), x.bytes.data(), xm.bytes.size());
        DeviceTensor d_xm(xm), d_om(HostTensor(act, {m, c.n}));
        gpu().matmul({d_xm.view(), d_codes.view(), d_bias.view(), d_om.view(), dq});
        const HostTensor om = d_om.to_host();
        if (m == 5) {
          five = om;
          if (block_path) near_ref(five, 1e-3, what + " M 5");  // the tensor cores sum 32 products at a time
        }
        const HostTensor& base = lt_path || block_path ? five : got;
        EXPECT_EQ(std::memcmp(om.bytes.data(), base.bytes.data(), om.bytes.size()), 0) << what << " M " << m;
      }
    }
  }
}

// launch_act_quant's two kernels give the same codes and scales: x 16-byte aligned takes the vector kernel (each
// thread's pieces held in registers), the same values one element off 16 bytes the scalar one; int8 and FP8, bf16
// and f16, per row and per 128-value group, K from 136 to 16384 (the vector kernel's most) and past it (scalar
// both); a zero row, an outlier, a tiny value.
TEST(CudaW8Matmul, VectorQuantizerMakesTheScalarQuantizersBits) {
  std::mt19937 rng(38);
  const auto stream = static_cast<cudaStream_t>(gpu_services().stream_handle());
  for (DType act : {DType::kBF16, DType::kF16})
    for (int a : {1, 2})
      for (int64_t k : {int64_t{136}, int64_t{4096}, int64_t{14336}, int64_t{16384}, int64_t{16392}})
        for (bool per_group : {false, true}) {
          if (per_group && k % 128 != 0) continue;
          const int64_t m = 5, group = per_group ? 128 : k;
          HostTensor x = random_tensor(act, {m, k}, rng);
          for (int64_t i = 0; i < k; ++i) x.set(k + i, 0.0);  // row 1: zeros
          x.set(3, 300.0);
          x.set(2 * k + 9, -1e-4);
          HostTensor off(act, {m * k + 1});  // the same values one element on
          std::memcpy(off.bytes.data() + 2, x.bytes.data(), x.bytes.size());
          DeviceTensor d_x(x), d_off(off);
          std::vector<HostTensor> codes, scales;
          for (const void* xp : {static_cast<const void*>(d_x.view().data),
                                 static_cast<const void*>(static_cast<const char*>(d_off.view().data) + 2)}) {
            DeviceTensor d_q(HostTensor(DType::kI8, {m, k})), d_s(HostTensor(DType::kF32, {m, k / group}));
            d_s.poison();
            cuda::W8MatmulLaunch l{};
            l.x = xp;
            l.x_dtype = act;
            l.act = a;
            l.act_group = group;
            l.m = m;
            l.n = 1;
            l.k = k;
            cuda::launch_act_quant(l, static_cast<uint8_t*>(d_q.view().data), static_cast<float*>(d_s.view().data),
                                   stream);
            gpu().synchronize();
            codes.push_back(d_q.to_host());
            scales.push_back(d_s.to_host());
          }
          const std::string what = std::string(dtype_name(act)) + (a == 1 ? " int8" : " fp8") + " K " +
                                   std::to_string(k) + " group " + std::to_string(group);
          EXPECT_TRUE(codes[0].bytes == codes[1].bytes) << what << ": codes";
          EXPECT_TRUE(scales[0].bytes == scales[1].bytes) << what << ": scales";
        }
}

// A group over one x (q/k/v, gate/up: Backend::matmuls) past the small-M kernels quantizes x once for all its
// matmuls: every output the same bits as the matmuls run one by one, for int8 and FP8 per channel and FP8 in blocks
// (which quantizes x into its own layout each time), and with a group whose weights mix the two kinds.
TEST(CudaW8Matmul, GroupQuantizesXOnceWithTheSameBits) {
  std::mt19937 rng(37);
  using A = ops::ActQuant;
  struct Kind { DType codes; A act; int64_t group, block_rows, act_group; };
  const Kind per_channel_i8{DType::kI8, A::kInt8, 512, 1, 0}, per_channel_f8{DType::kF8E4M3, A::kFp8, 512, 1, 0},
      blocks_f8{DType::kF8E4M3, A::kFp8, 128, 128, 128};
  const std::vector<std::vector<Kind>> groups = {{per_channel_i8, per_channel_i8, per_channel_i8},
                                                 {per_channel_f8, per_channel_f8, per_channel_f8},
                                                 {blocks_f8, blocks_f8},
                                                 {per_channel_f8, blocks_f8, per_channel_f8}};
  const int64_t k = 512, ns[] = {256, 128, 384};
  for (const auto& group : groups)
    for (int64_t m : {48, 64}) {
      HostTensor x = random_tensor(DType::kBF16, {m, k}, rng);
      DeviceTensor d_x(x);
      std::vector<DeviceTensor> codes, scales, together, alone;
      std::vector<ops::WeightQuant> qs;
      for (size_t i = 0; i < group.size(); ++i) {
        const Kind& c = group[i];
        const int64_t n = ns[i];
        HostTensor w(c.codes, {n, k});
        for (auto& b : w.bytes) {
          b = static_cast<uint8_t>(rng());
          if (c.codes == DType::kF8E4M3 && (b & 0x7f) == 0x7f) b ^= 1;
        }
        HostTensor s(DType::kF32, {(n + c.block_rows - 1) / c.block_rows, k / c.group});
        for (int64_t j = 0; j < s.numel(); ++j) s.set(j, (0.2 + 0.8 * (rng() % 1000) / 1000.0) / 400.0);
        codes.emplace_back(w);
        scales.emplace_back(s);
        ops::WeightQuant q;
        q.group_size = c.group;
        q.block_rows = c.block_rows;
        q.act = c.act;
        q.act_group = c.act_group;
        qs.push_back(q);
        together.emplace_back(HostTensor(DType::kBF16, {m, n}));
        alone.emplace_back(HostTensor(DType::kBF16, {m, n}));
      }
      std::vector<ops::MatmulParams> ps, one_by_one;
      for (size_t i = 0; i < group.size(); ++i) {
        qs[i].scales = scales[i].view();
        ps.push_back({d_x.view(), codes[i].view(), {}, together[i].view(), qs[i]});
        one_by_one.push_back({d_x.view(), codes[i].view(), {}, alone[i].view(), qs[i]});
        together[i].poison();
      }
      gpu().matmuls(ps);
      for (const ops::MatmulParams& p : one_by_one) gpu().matmul(p);
      for (size_t i = 0; i < group.size(); ++i) {
        const HostTensor a = together[i].to_host(), b = alone[i].to_host();
        EXPECT_TRUE(a.bytes == b.bytes) << "group of " << group.size() << ", matmul " << i << ", M " << m;
      }
    }
}

// cuBLASLt's block-scaled FP8 GEMM (fp8_gemm_lt.h) against a host reference in double, for every scale layout
// Fp8BlockLayout can describe: the backend's layout (fp8_block_layout()) must match; the matching layouts are
// printed ("fp8 block layouts matching: ...") so a library that reads another one is seen at once. Shapes with
// K / 128 a multiple of 4 and not (W's padding), N a partial 128-row block. A layout matches within 2e-3 of max|y|
// (the tensor cores' sums inside a 128-deep chunk are not exact f32); a wrong one is off by about max|y|.
TEST(CudaW8Matmul, Fp8BlockLayoutProbe) {
  std::mt19937 rng(33);
  struct Shape { int64_t m, n, k; };
  // cuBLASLt takes M multiples of 4 only (the backend pads other M), so x's padding cannot be probed here.
  const Shape shapes[] = {{64, 256, 512}, {36, 208, 384}, {300, 1040, 1024}, {40, 384, 640}};
  std::vector<int> matching;
  for (int bits = 0; bits < 8; ++bits) matching.push_back(bits);
  bool usable = true;
  for (const Shape& s : shapes) {
    const int64_t kb = s.k / 128, nb = (s.n + 127) / 128;
    HostTensor w(DType::kF8E4M3, {s.n, s.k}), x(DType::kF8E4M3, {s.m, s.k});
    for (HostTensor* t : {&w, &x})
      for (auto& b : t->bytes) {
        b = static_cast<uint8_t>(rng());
        if ((b & 0x7f) == 0x7f) b ^= 1;
      }
    std::uniform_real_distribution<double> u(0.25, 4.0);
    std::vector<float> wsc(static_cast<size_t>(nb * kb)), xsc(static_cast<size_t>(s.m * kb));
    for (float& v : wsc) v = static_cast<float>(u(rng) / 64);
    for (float& v : xsc) v = static_cast<float>(u(rng) / 64);
    std::vector<double> want(static_cast<size_t>(s.m * s.n));
    double ymax = 0;
    for (int64_t r = 0; r < s.m; ++r)
      for (int64_t n = 0; n < s.n; ++n) {
        double acc = 0;
        for (int64_t b = 0; b < kb; ++b) {
          double part = 0;
          for (int64_t c = b * 128; c < b * 128 + 128; ++c)
            part += static_cast<double>(fp8_e4m3_to_f32(w.bytes[static_cast<size_t>(n * s.k + c)])) *
                    fp8_e4m3_to_f32(x.bytes[static_cast<size_t>(r * s.k + c)]);
          acc += part * wsc[static_cast<size_t>((n / 128) * kb + b)] * xsc[static_cast<size_t>(r * kb + b)];
        }
        want[static_cast<size_t>(r * s.n + n)] = acc;
        ymax = std::max(ymax, std::fabs(acc));
      }
    DeviceTensor d_w(w), d_x(x);
    for (int bits = 0; bits < 8; ++bits) {
      const cuda::Fp8BlockLayout lay = cuda::Fp8BlockLayout::from_bits(bits);
      // Room for any layout's reads (zeros beyond this one's).
      HostTensor ws(DType::kF32, {4 * (nb + 4) * (kb + 4)}), xs(DType::kF32, {4 * s.m * kb});
      const int64_t wld = lay.w_ld(nb, kb), xld = lay.x_ld(s.m, kb);
      for (int64_t i = 0; i < nb; ++i)
        for (int64_t b = 0; b < kb; ++b) ws.set(lay.w_k_major ? i * wld + b : b * wld + i, wsc[static_cast<size_t>(i * kb + b)]);
      for (int64_t r = 0; r < s.m; ++r)
        for (int64_t b = 0; b < kb; ++b) xs.set(lay.x_m_major ? b * xld + r : r * xld + b, xsc[static_cast<size_t>(r * kb + b)]);
      DeviceTensor d_ws(ws), d_xs(xs), d_out(HostTensor(DType::kF32, {s.m, s.n}));
      d_out.poison();
      DeviceTensor d_work(HostTensor(DType::kU8, {int64_t{8} << 20}));
      static cuda::Fp8LtGemm lt;
      const cuda::Fp8BlockGemmLaunch g{static_cast<const uint8_t*>(d_w.buffer.data()),
                                       static_cast<const uint8_t*>(d_x.buffer.data()),
                                       static_cast<const float*>(d_ws.buffer.data()),
                                       static_cast<const float*>(d_xs.buffer.data()), d_out.buffer.data(), DType::kF32,
                                       s.m, s.n, s.k};
      if (!lt.run_blocks(g, d_work.buffer.data(), size_t{8} << 20, static_cast<cudaStream_t>(gpu_services().stream_handle()))) {
        usable = false;
        break;
      }
      const HostTensor got = d_out.to_host();
      double err = 0;
      for (int64_t i = 0; i < s.m * s.n; ++i) {
        const double d = std::fabs(got.get(i) - want[static_cast<size_t>(i)]);
        err = std::isnan(d) ? 1e30 : std::max(err, d);
      }
      if (!(err <= 2e-3 * ymax)) std::erase(matching, bits);
      if (bits == cuda::fp8_block_layout().bits()) {
        EXPECT_LE(err, 2e-3 * ymax) << "the backend's layout " << bits << " at M " << s.m << " N " << s.n << " K " << s.k;
      }
    }
    if (!usable) break;
  }
  if (!usable) GTEST_SKIP() << "cuBLASLt has no block-scaled FP8 GEMM here (the warp kernel runs instead)";
  std::string list;
  for (int b : matching) list += " " + std::to_string(b);
  std::printf("fp8 block layouts matching:%s (the backend's: %d)\n", list.c_str(), cuda::fp8_block_layout().bits());
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
  const int64_t ns[] = {1040, 136, 200};  // 65 tiles of 16 rows; rows that do not fill a tile
  // K 1152: nine 128-wide chunks, two for warp 0 and one for each other warp.
  for (const auto& [codes_t, k] : {std::pair{DType::kI8, int64_t{4096}}, std::pair{DType::kF8E4M3, int64_t{4096}},
                                   std::pair{DType::kI8, int64_t{1152}}, std::pair{DType::kF8E4M3, int64_t{1152}}}) {
    const bool fp8 = codes_t == DType::kF8E4M3;
    std::vector<W8Weight> ws;
    for (int64_t n : ns) ws.push_back(make_w8(codes_t, n, k, rng));
    HostTensor bias = random_tensor(DType::kBF16, {ns[2]}, rng);
    DeviceTensor d_bias(bias);
    for (DType act : {DType::kBF16, DType::kF32}) {
      const int64_t big = fp8 ? 32 : 40;  // int8: M = 40 is cuBLASLt's int8 GEMM (or the warp kernel), the same bits
      HostTensor x = random_tensor(act, {big, k}, rng);
      DeviceTensor d_x(x);
      const std::string what =
          std::string(dtype_name(codes_t)) + " x " + std::string(dtype_name(act)) + " K " + std::to_string(k);
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

// The 8-bit skinny kernel quantizing x in its blocks (M <= 8 where M * (K + 16) <= 40 KiB, checked through the norm
// fusion, which needs it) gives the bits of launch_act_quant + the kernel reading its codes (M = 32): every element, for int8 and FP8 codes, bf16 / f16 / f32 x,
// K of 4096 and 14336 (in the block up to M = 2, by the quantizer beyond), rows of zeros, an outlier that sets a
// row's scale with the rest far below it (codes 0 and subnormal e4m3), a tiny value among ordinary ones.
TEST(CudaW8Matmul, InBlockQuantizerMakesTheQuantizersBits) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(34);
  const int64_t n = 200, big = 32;  // 12.5 tiles of 16 rows; M = 32 quantizes x with launch_act_quant
  for (DType codes_t : {DType::kI8, DType::kF8E4M3}) {
    for (int64_t k : {int64_t{4096}, int64_t{14336}}) {
      const W8Weight w = make_w8(codes_t, n, k, rng);
      for (DType act : {DType::kBF16, DType::kF16, DType::kF32}) {
        HostTensor x = random_tensor(act, {big, k}, rng);
        for (int64_t i = 0; i < k; ++i) x.set(k + i, 0.0);  // row 1: all zeros
        x.set(5, 300.0);                                    // row 0: one outlier, the rest far below it
        x.set(2 * k + 7, -1e-4);                            // row 2: a tiny value among ordinary ones
        DeviceTensor d_x(x);
        auto run = [&](int64_t m) {
          DeviceTensor d_out(HostTensor(act, {m, n}));
          d_out.poison();
          gpu().matmul({d_x.view().slice_rows(0, m), w.d_codes.view(), TensorView(), d_out.view(), w.dq});
          return d_out.to_host();
        };
        const HostTensor full = run(big);
        const std::string what = std::string(dtype_name(codes_t)) + " x " + std::string(dtype_name(act)) + " K " +
                                 std::to_string(k);
        for (int64_t e = 0; e < full.numel(); ++e) ASSERT_TRUE(std::isfinite(full.get(e))) << what << " element " << e;
        DeviceTensor d_gamma(random_tensor(act, {k}, rng));
        for (int64_t m : {1, 2, 3, 4, 8}) {
          // The rows below come from the in-block quantizer exactly where the norm fusion (which needs it) is offered.
          if (act != DType::kF32) {
            ops::MatmulFusion norm;
            norm.norm_weight = d_gamma.view();
            DeviceTensor d_o(HostTensor(act, {m, n}));
            const ops::MatmulParams mp{d_x.view().slice_rows(0, m), w.d_codes.view(), TensorView(), d_o.view(), w.dq};
            EXPECT_EQ(gpu().fuses_matmuls({&mp, 1}, norm), m * (k + 16) <= 40 * 1024) << what << " M " << m;
          }
          const HostTensor got = run(m);
          for (int64_t e = 0; e < got.numel(); ++e)
            ASSERT_EQ(got.get(e), full.get(e)) << what << " M " << m << " element " << e;
          EXPECT_EQ(std::memcmp(got.bytes.data(), full.bytes.data(), got.bytes.size()), 0) << what << " M " << m;
        }
      }
    }
  }
}

// The 8-bit skinny kernel's fusions give the bits of the unfused ops the model runs without them: the norm group
// (rms_norm, then q/k/v-like matmuls on its output), the residual add (the product, then the next rms_norm's add into
// the residual stream) and the gate/up pair (rms_norm, the two matmuls, silu_mul); int8 and FP8 codes, bf16 and f16,
// every M the norm's in-block quantizer takes, K of 4096 (norm groups, pairs) and 14336 (residual: quantized in the
// block up to M = 2, by launch_act_quant beyond), bias on some segments, every output element.
TEST(CudaW8Matmul, FusionsAreTheUnfusedOpsBits) {
  gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM);
  std::mt19937 rng(35);
  const float eps = 1e-5f;
  auto same = [](const HostTensor& a, const HostTensor& b) {
    return a.bytes.size() == b.bytes.size() && std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
  };
  for (DType codes_t : {DType::kI8, DType::kF8E4M3}) {
    const int64_t h = 4096, inter = 14336;
    const int64_t nq = 1040, nk = 264;
    const W8Weight wq = make_w8(codes_t, nq, h, rng), wk = make_w8(codes_t, nk, h, rng);
    const W8Weight wg = make_w8(codes_t, 1000, h, rng), wu = make_w8(codes_t, 1000, h, rng);
    const W8Weight wd = make_w8(codes_t, h, inter, rng);
    for (DType act : {DType::kBF16, DType::kF16}) {
      DeviceTensor d_gamma(random_tensor(act, {h}, rng)), d_bias(random_tensor(DType::kF32, {1000}, rng));
      for (int64_t m : {1, 2, 3, 5, 8}) {
        const std::string what = std::string(dtype_name(codes_t)) + " x " + std::string(dtype_name(act)) + " M " +
                                 std::to_string(m);
        const HostTensor x = random_tensor(act, {m, h}, rng, 3.0);  // a residual stream away from unit scale
        DeviceTensor d_x(x), d_normed(HostTensor(act, {m, h}));
        auto out = [&](int64_t n) {
          DeviceTensor d(HostTensor(act, {m, n}));
          d.poison();
          return d;
        };
        ops::MatmulFusion norm;
        norm.norm_weight = d_gamma.view();
        norm.eps = eps;
        // The norm group, unfused: rms_norm, then the matmuls on its output.
        gpu().rms_norm({d_x.view(), TensorView(), d_gamma.view(), d_normed.view(), eps});
        DeviceTensor uq = out(nq), uk = out(nk), fq = out(nq), fk = out(nk);
        gpu().matmuls(std::array{ops::MatmulParams{d_normed.view(), wq.d_codes.view(), TensorView(), uq.view(), wq.dq},
                                 ops::MatmulParams{d_normed.view(), wk.d_codes.view(), TensorView(), uk.view(), wk.dq}});
        const std::array fused_qk{ops::MatmulParams{d_x.view(), wq.d_codes.view(), TensorView(), fq.view(), wq.dq},
                                  ops::MatmulParams{d_x.view(), wk.d_codes.view(), TensorView(), fk.view(), wk.dq}};
        ASSERT_TRUE(gpu().fuses_matmuls(fused_qk, norm)) << what;
        gpu().matmuls_fused(fused_qk, norm);
        EXPECT_TRUE(same(fq.to_host(), uq.to_host())) << what << " norm group q";
        EXPECT_TRUE(same(fk.to_host(), uk.to_host())) << what << " norm group k";
        // The pair, unfused: the two matmuls on the norm's output (gate with bias), then silu_mul.
        DeviceTensor ug = out(1000), uu = out(1000), fg = out(1000), fu = out(1000);
        gpu().matmuls(std::array{ops::MatmulParams{d_normed.view(), wg.d_codes.view(), d_bias.view(), ug.view(), wg.dq},
                                 ops::MatmulParams{d_normed.view(), wu.d_codes.view(), TensorView(), uu.view(), wu.dq}});
        gpu().silu_mul({ug.view(), uu.view(), ug.view()});
        ops::MatmulFusion pair = norm;
        pair.silu_mul = true;
        const std::array fused_gu{ops::MatmulParams{d_x.view(), wg.d_codes.view(), d_bias.view(), fg.view(), wg.dq},
                                  ops::MatmulParams{d_x.view(), wu.d_codes.view(), TensorView(), fu.view(), wu.dq}};
        ASSERT_TRUE(gpu().fuses_matmuls(fused_gu, pair)) << what;
        gpu().matmuls_fused(fused_gu, pair);
        EXPECT_TRUE(same(fg.to_host(), ug.to_host())) << what << " silu pair";
        // The residual add, unfused: down_proj's product, then the next rms_norm adds it into the residual stream.
        const HostTensor a = random_tensor(act, {m, inter}, rng);
        const HostTensor res = random_tensor(act, {m, h}, rng, 3.0);
        DeviceTensor d_a(a), u_res(res), f_res(res), prod = out(h), normed2(HostTensor(act, {m, h}));
        gpu().matmul({d_a.view(), wd.d_codes.view(), TensorView(), prod.view(), wd.dq});
        gpu().rms_norm({prod.view(), u_res.view(), d_gamma.view(), normed2.view(), eps});
        ops::MatmulFusion add;
        add.residual = f_res.view();
        const ops::MatmulParams fused_down{d_a.view(), wd.d_codes.view(), TensorView(), f_res.view(), wd.dq};
        ASSERT_TRUE(gpu().fuses_matmuls({&fused_down, 1}, add)) << what;
        gpu().matmuls_fused({&fused_down, 1}, add);
        EXPECT_TRUE(same(f_res.to_host(), u_res.to_host())) << what << " residual add";
      }
    }
  }
  // Beyond the in-block quantizer (M = 9 with the norm), and f32 x, no fusion is offered.
  const W8Weight w = make_w8(DType::kF8E4M3, 64, 4096, rng);
  DeviceTensor d_gamma(random_tensor(DType::kBF16, {4096}, rng));
  ops::MatmulFusion norm;
  norm.norm_weight = d_gamma.view();
  DeviceTensor x9(random_tensor(DType::kBF16, {9, 4096}, rng)), o9(HostTensor(DType::kBF16, {9, 64}));
  const ops::MatmulParams nine{x9.view(), w.d_codes.view(), TensorView(), o9.view(), w.dq};
  EXPECT_FALSE(gpu().fuses_matmuls({&nine, 1}, norm));
  EXPECT_THROW(gpu().matmuls_fused({&nine, 1}, norm), peregrine::Error);
  DeviceTensor x32(random_tensor(DType::kF32, {1, 4096}, rng)), o32(HostTensor(DType::kF32, {1, 64}));
  const ops::MatmulParams f32x{x32.view(), w.d_codes.view(), TensorView(), o32.view(), w.dq};
  ops::MatmulFusion add;
  add.residual = o32.view();
  EXPECT_FALSE(gpu().fuses_matmuls({&f32x, 1}, add));
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

// A producer op told the matmuls that read its output next (ops.h RmsNormParams / SiluMulParams `next`) makes their
// W8A8 x codes itself past the 8-bit skinny kernel's M (prequant): the matmuls' outputs and the residual stream are
// the bits of the unfused ops (rms_norm or silu_mul, then the matmul quantizing x), for int8 and FP8 per channel, a
// norm with and without a residual, a group (q/k) and one matmul (down). The producer's own output is left unwritten
// there (poisoned here: a matmul that read it would give NaN); at small M the skinny kernel quantizes x and the
// output is written as usual. A group that differs from the call after it is refused loudly, never read stale.
TEST(CudaW8Matmul, NormAndSiluMakeTheNextMatmulsCodes) {
  std::mt19937 rng(39);
  // (hidden, the SiLU width = down's K, M): a norm row of one warp and of four (the 8B shape: the block's reduction),
  // SiLU rows of 2 and 7 pieces a thread.
  struct Case { int64_t k, f, m; };
  const Case cases[] = {{1024, 2816, 20}, {1024, 2816, 48}, {1024, 2816, 130}, {4096, 14336, 40}, {4096, 14336, 130}};
  for (DType codes_t : {DType::kI8, DType::kF8E4M3})
    for (const auto [k, f, m] : cases)
      for (bool with_residual : {false, true}) {
        const std::string what = std::string(codes_t == DType::kI8 ? "int8" : "fp8") + " K " + std::to_string(k) +
                                 " M " + std::to_string(m) + (with_residual ? " with residual" : "");
        W8Weight wq = make_w8(codes_t, 384, k, rng), wk = make_w8(codes_t, 128, k, rng), down = make_w8(codes_t, k, f, rng);
        const HostTensor x = random_tensor(DType::kBF16, {m, k}, rng), res = random_tensor(DType::kBF16, {m, k}, rng);
        const HostTensor nw = random_tensor(DType::kBF16, {k}, rng, 0.5);
        const HostTensor gate = random_tensor(DType::kBF16, {m, f}, rng, 2.0), up = random_tensor(DType::kBF16, {m, f}, rng);
        DeviceTensor d_x(x), d_nw(nw), d_up(up);
        struct Run {
          DeviceTensor res, normed, q, kk, gate, y;
        };
        std::vector<Run> runs;
        for (bool next : {false, true}) {
          Run r{DeviceTensor(res), DeviceTensor(HostTensor(DType::kBF16, {m, k})),
                DeviceTensor(HostTensor(DType::kBF16, {m, 384})), DeviceTensor(HostTensor(DType::kBF16, {m, 128})),
                DeviceTensor(gate), DeviceTensor(HostTensor(DType::kBF16, {m, k}))};
          r.normed.poison();
          const std::array qk{ops::MatmulParams(r.normed.view(), wq.d_codes.view(), {}, r.q.view(), wq.dq),
                              ops::MatmulParams(r.normed.view(), wk.d_codes.view(), {}, r.kk.view(), wk.dq)};
          const std::span<const ops::MatmulParams> norm_next = next ? std::span(qk) : std::span<const ops::MatmulParams>{};
          if (with_residual) gpu().rms_norm({d_x.view(), r.res.view(), d_nw.view(), r.normed.view(), 1e-5f, norm_next});
          else gpu().rms_norm({d_x.view(), {}, d_nw.view(), r.normed.view(), 1e-5f, norm_next});
          gpu().matmuls(qk);
          const ops::MatmulParams dp(r.gate.view(), down.d_codes.view(), {}, r.y.view(), down.dq);
          gpu().silu_mul({r.gate.view(), d_up.view(), r.gate.view(), next ? std::span(&dp, 1) : std::span<const ops::MatmulParams>{}});
          gpu().matmul(dp);
          runs.push_back(std::move(r));
        }
        gpu().synchronize();
        EXPECT_TRUE(runs[0].q.to_host().bytes == runs[1].q.to_host().bytes) << what << ": q";
        EXPECT_TRUE(runs[0].kk.to_host().bytes == runs[1].kk.to_host().bytes) << what << ": k";
        EXPECT_TRUE(runs[0].y.to_host().bytes == runs[1].y.to_host().bytes) << what << ": down";
        EXPECT_TRUE(runs[0].res.to_host().bytes == runs[1].res.to_host().bytes) << what << ": residual";
        const bool made = m > 32;  // past the skinny kernel's M: the codes only
        const HostTensor normed = runs[1].normed.to_host(), gated = runs[1].gate.to_host();
        EXPECT_EQ(std::isnan(normed.get(0)), made) << what << ": normed written?";
        EXPECT_EQ(std::isnan(gated.get(0)) || gated.bytes != runs[0].gate.to_host().bytes, made) << what << ": product written?";
        if (!made) {
          EXPECT_TRUE(normed.bytes == runs[0].normed.to_host().bytes) << what << ": normed";
        } else {
          // The call after the producer must be the one it was told of: another group over the same x is refused.
          DeviceTensor other(HostTensor(DType::kBF16, {m, 384}));
          const std::array told{ops::MatmulParams(runs[1].normed.view(), wq.d_codes.view(), {}, runs[1].q.view(), wq.dq)};
          W8Weight wo = make_w8(codes_t == DType::kI8 ? DType::kF8E4M3 : DType::kI8, 384, k, rng);
          gpu().rms_norm({d_x.view(), {}, d_nw.view(), runs[1].normed.view(), 1e-5f, told});
          EXPECT_THROW(gpu().matmul(ops::MatmulParams(runs[1].normed.view(), wo.d_codes.view(), {}, other.view(), wo.dq)),
                       Error)
              << what;
        }
      }
}

}  // namespace
}  // namespace peregrine::cuda_test
