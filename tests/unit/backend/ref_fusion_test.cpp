// The fused matmul contract (ops.h MatmulFusion) on the ref backend, which defines it for the CUDA kernels'
// tests: in f32 it equals the unfused ops (rms_norm, matmul, the residual add, silu_mul) to rounding; malformed
// groups are refused by op_checks; host backends run no fused kernels (fuses_matmuls says no).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/status.h"

namespace peregrine::ops {
namespace {

std::vector<float> random_values(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5 * (1.0 + std::fabs(want[i]))) << what << " element " << i;
}

TEST(RefMatmulFusion, EqualsTheUnfusedOps) {
  auto ref = make_ref_backend();
  std::mt19937 rng(17);
  const int64_t m = 3, k = 32, n = 24;
  std::vector<float> x = random_values(m * k, rng, 3.0f), h = random_values(m * k, rng);
  std::vector<float> gamma = random_values(k, rng), bias = random_values(n, rng);
  std::vector<float> wg = random_values(n * k, rng, 0.2f), wu = random_values(n * k, rng, 0.2f);
  auto view = [](std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return TensorView(v.data(), DType::kF32, shape);
  };
  // Norm group + silu pair, against rms_norm, two matmuls, silu_mul.
  std::vector<float> normed(m * k), g(m * n), u(m * n), want(m * n), got(m * n), unused(m * n);
  ref->rms_norm({view(x, {m, k}), {}, view(gamma, {k}), view(normed, {m, k}), 1e-5f});
  ref->matmul({view(normed, {m, k}), view(wg, {n, k}), view(bias, {n}), view(g, {m, n})});
  ref->matmul({view(normed, {m, k}), view(wu, {n, k}), {}, view(u, {m, n})});
  ref->silu_mul({view(g, {m, n}), view(u, {m, n}), view(want, {m, n})});
  const std::array<MatmulParams, 2> pair = {MatmulParams{view(x, {m, k}), view(wg, {n, k}), view(bias, {n}), view(got, {m, n})},
                                            MatmulParams{view(x, {m, k}), view(wu, {n, k}), {}, view(unused, {m, n})}};
  MatmulFusion f;
  f.norm_weight = view(gamma, {k});
  f.eps = 1e-5f;
  f.silu_mul = true;
  ref->matmuls_fused(pair, f);
  expect_near(got, want, "silu pair");
  // Residual add in place, against matmul + the residual add of rms_norm.
  std::vector<float> wo = random_values(k * k, rng, 0.2f), res = h, res2 = h, o(m * k), scratch(m * k);
  ref->matmul({view(x, {m, k}), view(wo, {k, k}), {}, view(o, {m, k})});
  ref->rms_norm({view(o, {m, k}), view(res, {m, k}), view(gamma, {k}), view(scratch, {m, k}), 1e-5f});
  MatmulFusion r;
  r.residual = view(res2, {m, k});
  const MatmulParams op{view(x, {m, k}), view(wo, {k, k}), {}, view(res2, {m, k})};
  ref->matmuls_fused({&op, 1}, r);
  expect_near(res2, res, "residual");
}

TEST(RefMatmulFusion, MalformedGroupsAreRefusedAndHostBackendsDoNotFuse) {
  auto ref = make_ref_backend();
  auto cpu = make_cpu_backend(1);
  std::vector<float> x(2 * 8, 1.0f), w(4 * 8, 1.0f), out(2 * 4), gamma(7, 1.0f);
  const MatmulParams p{TensorView(x.data(), DType::kF32, {2, 8}), TensorView(w.data(), DType::kF32, {4, 8}), {},
                       TensorView(out.data(), DType::kF32, {2, 4})};
  MatmulFusion bad_norm;
  bad_norm.norm_weight = TensorView(gamma.data(), DType::kF32, {7});  // K is 8
  EXPECT_THROW(ref->matmuls_fused({&p, 1}, bad_norm), Error);
  MatmulFusion silu_one;
  silu_one.silu_mul = true;  // needs gate and up
  EXPECT_THROW(ref->matmuls_fused({&p, 1}, silu_one), Error);
  MatmulFusion plain;
  EXPECT_FALSE(ref->fuses_matmuls({&p, 1}, plain));
  EXPECT_FALSE(cpu->fuses_matmuls({&p, 1}, plain));
  EXPECT_THROW(cpu->matmuls_fused({&p, 1}, plain), Error);
}

}  // namespace
}  // namespace peregrine::ops
