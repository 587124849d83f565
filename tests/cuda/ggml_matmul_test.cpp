// CUDA GGUF block kernels vs the ref backend (the scalar oracle of core/ggml_quant) on fresh random blocks, every
// output element: all eight block types, row lengths that are and are not multiples of 256, bf16 and f32
// activations, bias, M across the GEMV (M <= 8) and the dequantize + GEMM path; rows bit-identical for every M
// within each path; and the embedding gather bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <span>
#include <string>
#include <vector>
#include <cmath>

#include "backend/cuda/activation.cuh"
#include "core/status.h"
#include "cuda_test_util.h"
#include "ggml_test_blocks.h"

namespace peregrine::cuda_test {
namespace {

using test::kGgmlBlockTypes;
using test::random_ggml_rows;

HostTensor blocks_tensor(GgmlType t, int64_t rows, int64_t k, std::mt19937& rng) {
  HostTensor h(DType::kU8, {rows, static_cast<int64_t>(ggml_row_bytes(t, k))});
  h.bytes = random_ggml_rows(t, rows, k, rng);
  return h;
}

TEST(CudaGgmlMatmul, MatchesRefOnEveryElement) {
  std::mt19937 rng(1717);
  struct Shape { int64_t n, k; };
  const Shape shapes[] = {{384, 1024}, {130, 384}, {96, 2048}, {257, 256}};
  for (GgmlType t : kGgmlBlockTypes)
    for (const Shape& s : shapes) {
      if (s.k % ggml_block_info(t)->block_size != 0) continue;
      const HostTensor w = blocks_tensor(t, s.n, s.k, rng);
      DeviceTensor d_w(w);
      ops::WeightQuant q;
      q.ggml = t;
      HostTensor bias = random_tensor(DType::kBF16, {s.n}, rng);
      DeviceTensor d_bias(bias);
      for (DType act : {DType::kBF16, DType::kF32})
        for (int64_t m : {1, 3, 8, 9, 64}) {
          HostTensor x = random_tensor(act, {m, s.k}, rng);
          HostTensor want(act, {m, s.n});
          const bool with_bias = m % 2 == 1;
          ref().matmul({x.view(), w.view(), with_bias ? bias.view() : TensorView(), want.view(), q});
          DeviceTensor d_x(x), d_out(want);
          d_out.poison();
          gpu().matmul({d_x.view(), d_w.view(), with_bias ? d_bias.view() : TensorView(), d_out.view(), q});
          EXPECT_TRUE(all_close(d_out.to_host(), want, act == DType::kF32 ? 1e-4 : -1))
              << ggml_type_name(t) << " N " << s.n << " K " << s.k << " act " << dtype_name(act) << " M " << m;
        }
    }
}

TEST(CudaGgmlMatmul, RowsDoNotDependOnMWithinAPath) {
  std::mt19937 rng(1718);
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const int64_t n = 512, k = 1024;
    const HostTensor w = blocks_tensor(t, n, k, rng);
    DeviceTensor d_w(w);
    ops::WeightQuant q;
    q.ggml = t;
    HostTensor x = random_tensor(DType::kBF16, {128, k}, rng);
    DeviceTensor d_x(x);
    auto run = [&](int64_t m) {
      DeviceTensor d_out(HostTensor(DType::kBF16, {m, n}));
      gpu().matmul({d_x.view().slice_rows(0, m), d_w.view(), TensorView(), d_out.view(), q});
      return d_out.to_host();
    };
    const HostTensor small = run(8), large = run(128);
    for (int64_t m : {1, 2, 5}) {
      const HostTensor got = run(m);
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), small.bytes.begin())) << ggml_type_name(t) << " M " << m;
    }
    for (int64_t m : {9, 64}) {
      const HostTensor got = run(m);
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), large.bytes.begin())) << ggml_type_name(t) << " M " << m;
    }
  }
}

// ---- The packed layout and the int8 tensor-core kernel (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K at M <= 32) ----

constexpr GgmlType kPackedTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ5_0,
                                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

struct Packed {
  DeviceTensor blocks;
  DeviceBuffer buf;
  ops::WeightQuant q;
};

Packed pack(const HostTensor& w, GgmlType t) {
  Packed p{DeviceTensor(w), {}, {}};
  p.q.ggml = t;
  p.buf = gpu().pack_weight(p.blocks.view(), p.q);
  p.q.packed = p.buf.data();
  return p;
}

// The oracle of the int8 path: x rounded per row and block of 32 as the kernel's rule says (d = amax / 127, codes
// round-half-even of x * 127 / amax, clamped to +-127), times the weights as core/ggml_quant dequantizes them,
// summed in double. Also a magnitude per output (sum over blocks of d * sum |q| * max |w|) that bounds the
// kernel's f32 rounding.
void quantized_x_oracle(const HostTensor& x, const HostTensor& w, GgmlType t, const HostTensor* bias, int64_t n,
                        int64_t k, std::vector<double>& want, std::vector<double>& mag) {
  const int64_t m = x.shape[0];
  std::vector<float> wf(static_cast<size_t>(n * k));
  const size_t row_bytes = ggml_row_bytes(t, k);
  for (int64_t r = 0; r < n; ++r) ggml_dequantize_row(t, w.bytes.data() + r * row_bytes, wf.data() + r * k, k);
  want.assign(static_cast<size_t>(m * n), 0.0);
  mag.assign(static_cast<size_t>(m * n), 0.0);
  std::vector<float> d(static_cast<size_t>(k / 32));
  std::vector<int> q(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < k / 32; ++b) {
      float amax = 0.0f;
      for (int64_t e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(static_cast<float>(x.get(i * k + b * 32 + e))));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      d[b] = amax / 127.0f;
      for (int64_t e = 0; e < 32; ++e) {
        const float prod = static_cast<float>(x.get(i * k + b * 32 + e)) * inv;
        q[b * 32 + e] = std::clamp(static_cast<int>(std::nearbyint(prod)), -127, 127);
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      double s = 0, a = 0;
      for (int64_t b = 0; b < k / 32; ++b) {
        double part = 0, qa = 0, wmax = 0;
        for (int64_t e = 0; e < 32; ++e) {
          const double wv = wf[r * k + b * 32 + e];
          part += static_cast<double>(q[b * 32 + e]) * wv;
          qa += std::abs(q[b * 32 + e]);
          wmax = std::max(wmax, std::fabs(wv));
        }
        s += part * d[b];
        a += qa * wmax * d[b];  // bounds the block's terms, and Q4_K's d * sc * dot and dmin * m * sum q apart
      }
      if (bias) s += bias->get(r);
      want[i * n + r] = s;
      mag[i * n + r] = a;
    }
  }
}

TEST(CudaGgmlPacked, MatchesTheQuantizedXOracleOnEveryElement) {
  std::mt19937 rng(2202);
  struct Shape { int64_t n, k; };
  const Shape shapes[] = {{40, 256}, {384, 1024}, {130, 2048}};
  for (GgmlType t : kPackedTypes)
    for (const Shape& s : shapes) {
      const HostTensor w = blocks_tensor(t, s.n, s.k, rng);
      Packed pw = pack(w, t);
      ASSERT_NE(pw.q.packed, nullptr) << ggml_type_name(t) << " K " << s.k;
      HostTensor bias = random_tensor(DType::kBF16, {s.n}, rng);
      DeviceTensor d_bias(bias);
      for (DType act : {DType::kBF16, DType::kF32})
        for (int64_t m : {1, 3, 8, 9, 16, 17, 32}) {
          HostTensor x = random_tensor(act, {m, s.k}, rng);
          if (m == 3)
            for (int64_t e = 0; e < 32; ++e) x.set(e, 0.0);  // a block of zeros: amax 0
          const bool with_bias = m % 2 == 1;
          std::vector<double> want, mag;
          quantized_x_oracle(x, w, t, with_bias ? &bias : nullptr, s.n, s.k, want, mag);
          DeviceTensor d_x(x), d_out(HostTensor(DType::kF32, {m, s.n}));
          d_out.poison();
          gpu().matmul({d_x.view(), pw.blocks.view(), with_bias ? d_bias.view() : TensorView(), d_out.view(), pw.q});
          const HostTensor got = d_out.to_host();
          int bad = 0;
          double worst = 0;
          for (int64_t i = 0; i < m * s.n; ++i) {
            const double err = std::fabs(got.get(i) - want[static_cast<size_t>(i)]);
            // f32 rounding: a few per block (scales, the block's scaled sum), one per add of K / 32 blocks and
            // 8 warp partials.
            const double bound = static_cast<double>(s.k / 32 + 8) * 2.4e-7 * mag[static_cast<size_t>(i)] + 1e-6;
            if (!(err <= bound)) ++bad;
            worst = std::max(worst, err / bound);
          }
          EXPECT_EQ(bad, 0) << ggml_type_name(t) << " N " << s.n << " K " << s.k << " act " << dtype_name(act)
                            << " M " << m << " worst err/bound " << worst;
        }
    }
}

TEST(CudaGgmlPacked, RowsDoNotDependOnMAndLargeMEqualsTheUnpackedPath) {
  std::mt19937 rng(2203);
  const int64_t n = 272, k = 1024;
  for (GgmlType t : kPackedTypes) {
    const HostTensor w = blocks_tensor(t, n, k, rng);
    Packed pw = pack(w, t);
    ASSERT_NE(pw.q.packed, nullptr);
    ops::WeightQuant plain;
    plain.ggml = t;
    HostTensor x = random_tensor(DType::kBF16, {64, k}, rng);
    DeviceTensor d_x(x);
    auto run = [&](int64_t m, const ops::WeightQuant& q) {
      DeviceTensor d_out(HostTensor(DType::kBF16, {m, n}));
      gpu().matmul({d_x.view().slice_rows(0, m), pw.blocks.view(), TensorView(), d_out.view(), q});
      return d_out.to_host();
    };
    const HostTensor full = run(32, pw.q);
    for (int64_t m : {1, 2, 5, 8, 9, 16, 17, 31}) {
      const HostTensor got = run(m, pw.q);
      EXPECT_TRUE(std::equal(got.bytes.begin(), got.bytes.end(), full.bytes.begin())) << ggml_type_name(t) << " M " << m;
    }
    for (int64_t m : {33, 64}) {  // dequantized from the packed layout: the same weights as from the file's blocks
      const HostTensor got = run(m, pw.q), want = run(m, plain);
      EXPECT_TRUE(bitwise_equal(got, want)) << ggml_type_name(t) << " M " << m;
    }
  }
}

TEST(CudaGgmlPacked, GroupedMatmulsEqualSeparateOnes) {
  std::mt19937 rng(2204);
  const int64_t k = 512;
  for (GgmlType t : kPackedTypes) {
    const int64_t ns[] = {256, 64, 64};
    std::vector<Packed> ws;
    for (int64_t n : ns) ws.push_back(pack(blocks_tensor(t, n, k, rng), t));
    HostTensor bias = random_tensor(DType::kBF16, {64}, rng);
    DeviceTensor d_bias(bias);
    for (int64_t m : {1, 12, 32}) {
      DeviceTensor d_x(random_tensor(DType::kBF16, {m, k}, rng));
      std::vector<DeviceTensor> one, grouped;
      std::vector<ops::MatmulParams> ps;
      for (size_t i = 0; i < ws.size(); ++i) {
        one.emplace_back(HostTensor(DType::kBF16, {m, ns[i]}));
        grouped.emplace_back(HostTensor(DType::kBF16, {m, ns[i]}));
      }
      for (size_t i = 0; i < ws.size(); ++i) {
        const TensorView b = i == 2 ? d_bias.view() : TensorView();
        gpu().matmul({d_x.view(), ws[i].blocks.view(), b, one[i].view(), ws[i].q});
        ps.push_back({d_x.view(), ws[i].blocks.view(), b, grouped[i].view(), ws[i].q});
      }
      gpu().matmuls(ps);
      for (size_t i = 0; i < ws.size(); ++i)
        EXPECT_TRUE(bitwise_equal(grouped[i].to_host(), one[i].to_host())) << ggml_type_name(t) << " M " << m << " #" << i;
    }
  }
}

// q/k/v of a Q4_K_M layer (Q4_K q and k with a Q6_K v) and of a Q5_K_M-like one with a Q5_0 k: one x quantization
// and a launch per type.
TEST(CudaGgmlPacked, GroupedMatmulsOfMixedTypesEqualSeparateOnes) {
  std::mt19937 rng(2206);
  const int64_t k = 512;
  const int64_t ns[] = {256, 64, 64};
  for (const auto& types : {std::array{GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K},
                            std::array{GgmlType::kQ5_K, GgmlType::kQ5_0, GgmlType::kQ6_K}}) {
    std::vector<Packed> ws;
    for (int i = 0; i < 3; ++i) ws.push_back(pack(blocks_tensor(types[i], ns[i], k, rng), types[i]));
    for (int64_t m : {1, 7, 32}) {
      DeviceTensor d_x(random_tensor(DType::kBF16, {m, k}, rng));
      std::vector<DeviceTensor> one, grouped;
      std::vector<ops::MatmulParams> ps;
      for (int i = 0; i < 3; ++i) {
        one.emplace_back(HostTensor(DType::kBF16, {m, ns[i]}));
        grouped.emplace_back(HostTensor(DType::kBF16, {m, ns[i]}));
      }
      for (int i = 0; i < 3; ++i) {
        gpu().matmul({d_x.view(), ws[i].blocks.view(), TensorView(), one[i].view(), ws[i].q});
        ps.push_back({d_x.view(), ws[i].blocks.view(), TensorView(), grouped[i].view(), ws[i].q});
      }
      gpu().matmuls(ps);
      for (int i = 0; i < 3; ++i)
        EXPECT_TRUE(bitwise_equal(grouped[i].to_host(), one[i].to_host()))
            << ggml_type_name(types[0]) << " M " << m << " #" << i;
    }
  }
}

TEST(CudaGgmlPacked, OnlyTypesAndShapesWithALayoutArePacked) {
  std::mt19937 rng(2205);
  auto packs = [&](GgmlType t, int64_t k) {
    DeviceTensor d(blocks_tensor(t, 16, k, rng));
    ops::WeightQuant q;
    q.ggml = t;
    return gpu().pack_weight(d.view(), q).data() != nullptr;
  };
  EXPECT_TRUE(packs(GgmlType::kQ8_0, 128));
  EXPECT_TRUE(packs(GgmlType::kQ4_K, 256));
  EXPECT_FALSE(packs(GgmlType::kQ8_0, 96));  // K not a multiple of 128
  EXPECT_TRUE(packs(GgmlType::kQ6_K, 512));
  EXPECT_TRUE(packs(GgmlType::kQ5_0, 128));
  EXPECT_TRUE(packs(GgmlType::kQ5_K, 256));
  EXPECT_FALSE(packs(GgmlType::kQ5_0, 96));  // K not a multiple of 128 (K-quants' K is one of 256: their block)
  EXPECT_FALSE(packs(GgmlType::kQ4_1, 256));  // no packed layout: the GEMV reads the file's blocks
  EXPECT_FALSE(packs(GgmlType::kQ5_1, 256));
}

// A norm or SiLU·mul told of the packed GGUF matmuls that read its output next (ops.h RmsNormParams / SiluMulParams
// `next`) makes x's int8 blocks itself (ggml_xq.cuh) and leaves its output unwritten (poisoned here: a matmul that
// read it would give NaN): the matmuls' outputs and the residual stream are the bits of the unfused ops (the op, then
// the matmul quantizing x), for every packed type and a Q4_K_M-like q/k/v of two types, a norm with and without a
// residual, rows of one warp and of several, M 1 .. 32. A call other than the one the op was told of is refused.
TEST(CudaGgmlPacked, NormAndSiluMakeTheNextMatmulsBlocks) {
  std::mt19937 rng(2207);
  struct Case { int64_t k, f, m; };
  const Case cases[] = {{512, 1280, 1}, {1024, 2816, 5}, {4096, 14336, 1}, {4096, 14336, 32}};
  for (const auto& types : {std::array{GgmlType::kQ4_0, GgmlType::kQ4_0, GgmlType::kQ4_0},
                            std::array{GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ8_0},
                            std::array{GgmlType::kQ5_0, GgmlType::kQ5_0, GgmlType::kQ5_0},
                            std::array{GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K},
                            std::array{GgmlType::kQ5_K, GgmlType::kQ5_0, GgmlType::kQ6_K}})
    for (const auto [k, f, m] : cases)
      for (bool with_residual : {false, true}) {
        const std::string what = std::string(ggml_type_name(types[0])) + "/" + ggml_type_name(types[2]) + " K " +
                                 std::to_string(k) + " F " + std::to_string(f) + " M " + std::to_string(m) +
                                 (with_residual ? " with residual" : "");
        const int64_t ns[] = {256, 64, 64};
        std::vector<Packed> ws;
        for (int i = 0; i < 3; ++i) ws.push_back(pack(blocks_tensor(types[i], ns[i], k, rng), types[i]));
        const Packed down = pack(blocks_tensor(types[2], k, f, rng), types[2]);
        const HostTensor x = random_tensor(DType::kBF16, {m, k}, rng), res = random_tensor(DType::kBF16, {m, k}, rng);
        const HostTensor nw = random_tensor(DType::kBF16, {k}, rng, 0.5);
        HostTensor gate = random_tensor(DType::kBF16, {m, f}, rng, 2.0);
        for (int64_t e = 0; e < 32; ++e) gate.set(e, 0.0);  // a block of zeros: amax 0
        const HostTensor up = random_tensor(DType::kBF16, {m, f}, rng);
        DeviceTensor d_x(x), d_nw(nw), d_up(up);
        struct Run {
          DeviceTensor res, normed, gate;
          std::vector<DeviceTensor> outs;
          DeviceTensor y;
        };
        std::vector<Run> runs;
        for (bool next : {false, true}) {
          Run r{DeviceTensor(res), DeviceTensor(HostTensor(DType::kBF16, {m, k})), DeviceTensor(gate), {},
                DeviceTensor(HostTensor(DType::kBF16, {m, k}))};
          r.normed.poison();
          std::vector<ops::MatmulParams> qkv;
          for (int i = 0; i < 3; ++i) {
            r.outs.emplace_back(HostTensor(DType::kBF16, {m, ns[i]}));
            qkv.push_back({r.normed.view(), ws[i].blocks.view(), TensorView(), r.outs.back().view(), ws[i].q});
          }
          const std::span<const ops::MatmulParams> norm_next = next ? std::span(qkv) : std::span<const ops::MatmulParams>{};
          if (with_residual) gpu().rms_norm({d_x.view(), r.res.view(), d_nw.view(), r.normed.view(), 1e-5f, norm_next});
          else gpu().rms_norm({d_x.view(), {}, d_nw.view(), r.normed.view(), 1e-5f, norm_next});
          gpu().matmuls(qkv);
          const ops::MatmulParams dp(r.gate.view(), down.blocks.view(), {}, r.y.view(), down.q);
          gpu().silu_mul({r.gate.view(), d_up.view(), r.gate.view(), next ? std::span(&dp, 1) : std::span<const ops::MatmulParams>{}});
          gpu().matmul(dp);
          runs.push_back(std::move(r));
        }
        gpu().synchronize();
        for (int i = 0; i < 3; ++i)
          EXPECT_TRUE(bitwise_equal(runs[0].outs[i].to_host(), runs[1].outs[i].to_host())) << what << ": #" << i;
        EXPECT_TRUE(bitwise_equal(runs[0].y.to_host(), runs[1].y.to_host())) << what << ": down";
        EXPECT_TRUE(bitwise_equal(runs[0].res.to_host(), runs[1].res.to_host())) << what << ": residual";
        EXPECT_TRUE(std::isnan(runs[1].normed.to_host().get(0))) << what << ": normed written";
        EXPECT_TRUE(bitwise_equal(runs[1].gate.to_host(), gate)) << what << ": product written";
        // x's blocks depend on x alone, so another GGUF matmul after the op reads them as well (the bits of the
        // unfused ops); a matmul of another kind, which would read the unwritten output, is refused.
        const std::array told{ops::MatmulParams(runs[1].normed.view(), ws[0].blocks.view(), {}, runs[1].outs[0].view(),
                                                ws[0].q)};
        gpu().rms_norm({d_x.view(), {}, d_nw.view(), runs[1].normed.view(), 1e-5f, told});
        gpu().matmul(ops::MatmulParams(runs[1].normed.view(), ws[1].blocks.view(), {}, runs[1].outs[1].view(), ws[1].q));
        gpu().rms_norm({d_x.view(), {}, d_nw.view(), runs[0].normed.view(), 1e-5f});
        gpu().matmul(ops::MatmulParams(runs[0].normed.view(), ws[1].blocks.view(), {}, runs[0].outs[1].view(), ws[1].q));
        EXPECT_TRUE(bitwise_equal(runs[0].outs[1].to_host(), runs[1].outs[1].to_host())) << what << ": another weight";
        const HostTensor dense_w = random_tensor(DType::kBF16, {64, k}, rng);
        DeviceTensor d_dense(dense_w), dense_out(HostTensor(DType::kBF16, {m, 64}));
        gpu().rms_norm({d_x.view(), {}, d_nw.view(), runs[1].normed.view(), 1e-5f, told});
        EXPECT_THROW(gpu().matmul(ops::MatmulParams(runs[1].normed.view(), d_dense.view(), {}, dense_out.view())),
                     peregrine::Error)
            << what;
      }
}

// SiLU·mul's GGUF blocks from a grid over each row's pieces (silu_mul_ggml_grid_mode(1); off by default until
// measured) are the bits of a block a row's: the down matmul's outputs, M 1 .. 32, widths of 1 .. 7 pieces a thread.
TEST(CudaGgmlPacked, SiluGridFormGivesTheSameBlocks) {
  struct Restore {
    ~Restore() { cuda::silu_mul_ggml_grid_mode(-1); }
  } restore;
  std::mt19937 rng(2208);
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ6_K})
    for (int64_t f : {256, 1280, 14336})
      for (int64_t m : {1, 5, 32}) {
        const Packed down = pack(blocks_tensor(t, 128, f, rng), t);
        HostTensor gate = random_tensor(DType::kBF16, {m, f}, rng, 2.0);
        for (int64_t e = 0; e < 32; ++e) gate.set(e, 0.0);  // a block of zeros: amax 0
        const HostTensor up = random_tensor(DType::kBF16, {m, f}, rng);
        DeviceTensor d_up(up);
        std::vector<HostTensor> outs;
        for (int mode : {0, 1}) {
          cuda::silu_mul_ggml_grid_mode(mode);
          DeviceTensor g(gate), y(HostTensor(DType::kBF16, {m, 128}));
          const ops::MatmulParams dp(g.view(), down.blocks.view(), {}, y.view(), down.q);
          gpu().silu_mul({g.view(), d_up.view(), g.view(), std::span(&dp, 1)});
          gpu().matmul(dp);
          outs.push_back(y.to_host());
        }
        EXPECT_TRUE(bitwise_equal(outs[0], outs[1])) << ggml_type_name(t) << " F " << f << " M " << m;
      }
}

TEST(CudaGgmlEmbedding, GathersTheReferenceRowsBitForBit) {
  std::mt19937 rng(1719);
  const int64_t vocab = 300, tokens = 33;
  for (GgmlType t : kGgmlBlockTypes)
    for (int64_t hidden : {int64_t{256}, int64_t{2048}, int64_t{96}}) {
      if (hidden % ggml_block_info(t)->block_size != 0) continue;
      const HostTensor table = blocks_tensor(t, vocab, hidden, rng);
      std::vector<int32_t> ids(static_cast<size_t>(tokens));
      for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
      ids[0] = 0;
      ids[1] = static_cast<int32_t>(vocab - 1);
      const HostTensor idt = int_tensor(ids);
      DeviceTensor d_table(table), d_ids(idt);
      for (DType out_t : {DType::kF32, DType::kBF16}) {
        HostTensor want(out_t, {tokens, hidden});
        ops::EmbeddingParams p;
        p.token_ids = idt.view();
        p.table = table.view();
        p.table_ggml = t;
        p.out = want.view();
        ref().embedding(p);
        DeviceTensor d_out(want);
        d_out.poison();
        p.token_ids = d_ids.view();
        p.table = d_table.view();
        p.out = d_out.view();
        gpu().embedding(p);
        EXPECT_TRUE(bitwise_equal(d_out.to_host(), want)) << ggml_type_name(t) << " hidden " << hidden << " out "
                                                          << dtype_name(out_t);
      }
    }
}

}  // namespace
}  // namespace peregrine::cuda_test
