// The CPU backend's dense ops (embedding, matmul, rms_norm, rope, silu_mul, kv_write, gather_rows) against the
// reference backend on random inputs, for every kernel set this CPU runs; plus matmul determinism across M and
// thread counts, and the errors the backend raises.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/status.h"
#include "unit/backend/op_test_util.h"

namespace peregrine::test {
namespace {

using ops::CpuIsa;

class CpuOps : public CpuIsaTest {};

TEST_P(CpuOps, EmbeddingAllTableDtypes) {
  auto cpu = make(2);
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(11);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t vocab = 301, hidden = 75;
    Buffer table = random_buffer(t, vocab * hidden, rng, -3, 3);
    Buffer ids = int_buffer({5, 0, 300, 17, 17, 299, 123});
    Buffer got = poisoned(DType::kF32, 7 * hidden), want = poisoned(DType::kF32, 7 * hidden);
    cpu->embedding({ids.view({7}), table.view({vocab, hidden}), got.view({7, hidden})});
    ref->embedding({ids.view({7}), table.view({vocab, hidden}), want.view({7, hidden})});
    EXPECT_TRUE(bits_equal(got, want)) << dtype_name(t);
  }
}

TEST_P(CpuOps, MatmulShapesAndDtypes) {
  auto cpu = make(3);
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(22);
  struct Shape {
    int64_t m, k, n;
  };
  for (Shape s : {Shape{1, 67, 33}, Shape{1, 256, 130}, Shape{2, 13, 5}, Shape{3, 130, 17}, Shape{7, 257, 45},
                  Shape{17, 96, 203}, Shape{64, 33, 7}, Shape{5, 1, 9}}) {
    for (DType wt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {
        Buffer x = random_buffer(DType::kF32, s.m * s.k, rng);
        Buffer w = random_buffer(wt, s.n * s.k, rng);
        Buffer bias = bias_kind == 0 ? Buffer() : random_buffer(bias_kind == 1 ? DType::kF32 : DType::kBF16, s.n, rng);
        TensorView bias_view = bias_kind == 0 ? TensorView() : bias.view({s.n});
        Buffer got = poisoned(DType::kF32, s.m * s.n), want = poisoned(DType::kF32, s.m * s.n);
        cpu->matmul({x.view({s.m, s.k}), w.view({s.n, s.k}), bias_view, got.view({s.m, s.n})});
        ref->matmul({x.view({s.m, s.k}), w.view({s.n, s.k}), bias_view, want.view({s.m, s.n})});
        expect_close(got, want, 1e-5f,
                     "matmul M" + std::to_string(s.m) + " K" + std::to_string(s.k) + " N" + std::to_string(s.n) + " " +
                         std::string(dtype_name(wt)) + " bias" + std::to_string(bias_kind));
      }
    }
  }
}

// A row's result is bit-identical whatever M, its place in the batch and the thread count (no split over K,
// one reduction order in the GEMV and the tiled GEMM, whose tile for a few rows against short weight rows differs
// from the prefill tile: M = 64 takes the latter, M <= 16 the former).
TEST_P(CpuOps, MatmulRowsIndependentOfBatchAndThreads) {
  std::mt19937 rng(33);
  for (DType wt : {DType::kBF16, DType::kF32}) {
    const int64_t m = 64, k = 300, n = 77;
    Buffer x = random_buffer(DType::kF32, m * k, rng);
    Buffer w = random_buffer(wt, n * k, rng);
    Buffer bias = random_buffer(DType::kF32, n, rng);
    Buffer full = poisoned(DType::kF32, m * n);
    make(2)->matmul({x.view({m, k}), w.view({n, k}), bias.view({n}), full.view({m, n})});
    for (int threads : {1, 3}) {
      auto cpu = make(threads);
      for (int64_t begin : {int64_t{0}, int64_t{3}, int64_t{61}}) {
        for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{9}, int64_t{16}}) {
          if (begin + rows > m) continue;
          Buffer part = poisoned(DType::kF32, rows * n);
          cpu->matmul({x.view({m, k}).slice_rows(begin, rows), w.view({n, k}), bias.view({n}), part.view({rows, n})});
          EXPECT_EQ(std::memcmp(part.data(), full.f32() + begin * n, static_cast<size_t>(rows * n) * 4), 0)
              << dtype_name(wt) << " rows " << begin << "+" << rows << " threads " << threads;
        }
      }
    }
  }
}

TEST_P(CpuOps, RmsNormWithAndWithoutResidual) {
  auto cpu = make(2);
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(44);
  for (int64_t h : {int64_t{67}, int64_t{2048}, int64_t{5}}) {
    for (DType wt : {DType::kF32, DType::kBF16}) {
      const int64_t rows = 19;
      Buffer x = random_buffer(DType::kF32, rows * h, rng, -4, 4);
      Buffer weight = random_buffer(wt, h, rng, 0.5f, 1.5f);
      // Without residual, out aliasing x.
      Buffer got = x, want = x;
      cpu->rms_norm({got.view({rows, h}), {}, weight.view({h}), got.view({rows, h}), 1e-5f});
      ref->rms_norm({want.view({rows, h}), {}, weight.view({h}), want.view({rows, h}), 1e-5f});
      expect_close(got, want, 1e-5f, "rms_norm h" + std::to_string(h));
      // With residual.
      Buffer res = random_buffer(DType::kF32, rows * h, rng, -4, 4);
      Buffer got_res = res, want_res = res;
      Buffer got_out = poisoned(DType::kF32, rows * h), want_out = poisoned(DType::kF32, rows * h);
      cpu->rms_norm({x.view({rows, h}), got_res.view({rows, h}), weight.view({h}), got_out.view({rows, h}), 1e-6f});
      ref->rms_norm({x.view({rows, h}), want_res.view({rows, h}), weight.view({h}), want_out.view({rows, h}), 1e-6f});
      EXPECT_TRUE(bits_equal(got_res, want_res)) << "residual sum h" << h;
      expect_close(got_out, want_out, 1e-5f, "rms_norm+residual h" + std::to_string(h));
    }
  }
}

TEST_P(CpuOps, RopePartialRotaryAndScaling) {
  auto cpu = make(2);
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(55);
  struct Case {
    int64_t hd;
    int rotary;
    float scaling;
  };
  for (Case c : {Case{64, 64, 1.0f}, Case{48, 48, 1.0f}, Case{128, 64, 1.2f}, Case{64, 18, 0.9f}}) {
    const int64_t tokens = 9, hq = 6, hkv = 2;
    Buffer q = random_buffer(DType::kF32, tokens * hq * c.hd, rng, -2, 2);
    Buffer k = random_buffer(DType::kF32, tokens * hkv * c.hd, rng, -2, 2);
    Buffer pos = int_buffer({0, 1, 2, 7, 100, 1000, 4095, 8191, 31});
    Buffer inv_freq(DType::kF32, c.rotary / 2);
    for (int i = 0; i < c.rotary / 2; ++i) inv_freq.set(i, std::pow(10000.0f, -2.0f * i / c.rotary));
    Buffer q2 = q, k2 = k;
    ops::RopeParams pc{q.view({tokens, hq, c.hd}),
                       k.view({tokens, hkv, c.hd}),
                       pos.view({tokens}),
                       inv_freq.view({c.rotary / 2}),
                       c.scaling,
                       c.rotary};
    ops::RopeParams pr = pc;
    pr.q = q2.view({tokens, hq, c.hd});
    pr.k = k2.view({tokens, hkv, c.hd});
    cpu->rope(pc);
    ref->rope(pr);
    expect_close(q, q2, 2e-6f, "rope q hd" + std::to_string(c.hd));
    expect_close(k, k2, 2e-6f, "rope k hd" + std::to_string(c.hd));
  }
}

TEST_P(CpuOps, SiluMulInPlaceAndLarge) {
  auto cpu = make(2);
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(66);
  for (int64_t f : {int64_t{13}, int64_t{8192}}) {
    const int64_t t = 5;
    Buffer gate = random_buffer(DType::kF32, t * f, rng, -20, 20);
    Buffer up = random_buffer(DType::kF32, t * f, rng, -3, 3);
    Buffer got = gate, want = poisoned(DType::kF32, t * f);
    cpu->silu_mul({got.view({t, f}), up.view({t, f}), got.view({t, f})});  // out aliases gate
    ref->silu_mul({gate.view({t, f}), up.view({t, f}), want.view({t, f})});
    expect_close(got, want, 1e-5f, "silu_mul F" + std::to_string(f));
  }
}

TEST_P(CpuOps, KvWriteAllCacheDtypesSkipsNegativeSlots) {
  auto cpu = make(2);
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(77);
  for (DType ct : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t blocks = 6, bs = 16, hkv = 3, hd = 40, tokens = 7;
    Buffer k = random_buffer(DType::kF32, tokens * hkv * hd, rng, -5, 5);
    Buffer v = random_buffer(DType::kF32, tokens * hkv * hd, rng, -5, 5);
    Buffer slots = int_buffer({17, 0, -1, 95, 40, 41, 3});
    Buffer kc = random_buffer(ct, blocks * bs * hkv * hd, rng), vc = random_buffer(ct, blocks * bs * hkv * hd, rng);
    Buffer kc2 = kc, vc2 = vc;
    cpu->kv_write({k.view({tokens, hkv, hd}), v.view({tokens, hkv, hd}), slots.view({tokens}),
                   kc.view({blocks, bs, hkv, hd}), vc.view({blocks, bs, hkv, hd})});
    ref->kv_write({k.view({tokens, hkv, hd}), v.view({tokens, hkv, hd}), slots.view({tokens}),
                   kc2.view({blocks, bs, hkv, hd}), vc2.view({blocks, bs, hkv, hd})});
    EXPECT_TRUE(bits_equal(kc, kc2)) << dtype_name(ct);
    EXPECT_TRUE(bits_equal(vc, vc2)) << dtype_name(ct);
  }
}

TEST_P(CpuOps, GatherRows) {
  auto cpu = make(2);
  std::mt19937 rng(88);
  Buffer x = random_buffer(DType::kF32, 10 * 33, rng);
  Buffer idx = int_buffer({9, 0, 4, 4});
  Buffer out = poisoned(DType::kF32, 4 * 33);
  cpu->gather_rows({x.view({10, 33}), idx.view({4}), out.view({4, 33})});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(std::memcmp(out.f32() + r * 33, x.f32() + idx.i32()[r] * 33, 33 * 4), 0) << r;
}

TEST_P(CpuOps, RejectsBadInputs) {
  auto cpu = make(2);
  std::mt19937 rng(99);
  Buffer table = random_buffer(DType::kF32, 4 * 8, rng);
  Buffer ids = int_buffer({1, 4});
  Buffer out = poisoned(DType::kF32, 2 * 8);
  EXPECT_THROW(cpu->embedding({ids.view({2}), table.view({4, 8}), out.view({2, 8})}), Error);
  Buffer x16 = random_buffer(DType::kBF16, 2 * 8, rng), w = random_buffer(DType::kF32, 3 * 8, rng);
  Buffer o16 = poisoned(DType::kBF16, 2 * 3);
  try {
    cpu->matmul({x16.view({2, 8}), w.view({3, 8}), {}, o16.view({2, 3})});
    ADD_FAILURE() << "bf16 activations accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
  EXPECT_FALSE(cpu->supports_activation(DType::kBF16));
  EXPECT_TRUE(cpu->supports_activation(DType::kF32));
}

PEREGRINE_INSTANTIATE_ISA_TESTS(CpuOps);

TEST(CpuBackend, AutoPicksAnAvailableIsaAndNamesIt) {
  auto cpu = ops::make_cpu_backend(0);
  EXPECT_EQ(cpu->kind(), ops::DeviceKind::kCpu);
  EXPECT_NE(cpu->name().find("cpu ("), std::string::npos) << cpu->name();
  EXPECT_TRUE(ops::cpu_isa_available(CpuIsa::kScalar));
}

}  // namespace
}  // namespace peregrine::test
