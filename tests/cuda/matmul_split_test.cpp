// Batch invariance of the split-K matmul policy (kBatchInvariantSplitK: the default past M = 16, and every M under
// VLLM_BATCH_INVARIANT=1) on the Llama-3-8B bf16 shapes: rows of M = 1..1000 (and 8192, in row chunks) bitwise equal to the same rows of M = 1000, for the rule's split
// counts and for pinned ones; and split-K results (every dtype, bias) against the ref backend.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

struct Shape {
  int64_t n, k;
};
const Shape kLlamaShapes[] = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
const int64_t kMs[] = {1, 2, 3, 8, 17, 32, 64, 256};
constexpr int64_t kFullM = 1000;
constexpr int64_t kMaxX = 8192 * 14336;  // x elements: M = 8192 at K = 14336

// Uniform bf16 in [-scale, scale) from xorshift64: the 1 GB lm_head weight in about a second.
void fill_uniform_bf16(std::vector<uint8_t>& bytes, uint64_t seed, float scale) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  uint16_t* out = reinterpret_cast<uint16_t*>(bytes.data());
  const size_t n = bytes.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float u = static_cast<float>(s >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    out[i] = f32_to_bf16(u * scale);
  }
}

// One weight and one activation buffer for every shape: [n, k] views of their first elements.
struct Buffers {
  HostTensor w_host, x_host;
  DeviceTensor w, x;
  Buffers() {
    w_host = HostTensor(DType::kBF16, {128256 * 4096});
    x_host = HostTensor(DType::kBF16, {kMaxX});
    fill_uniform_bf16(w_host.bytes, 1, 0.03f);
    fill_uniform_bf16(x_host.bytes, 2, 1.0f);
    w = DeviceTensor(w_host);
    x = DeviceTensor(x_host);
  }
  TensorView weight(const Shape& s) const { return TensorView(w.buffer.data(), DType::kBF16, {s.n, s.k}); }
  TensorView rows(const Shape& s, int64_t first, int64_t count) const {
    return TensorView(static_cast<uint8_t*>(x.buffer.data()) + first * s.k * 2, DType::kBF16, {count, s.k});
  }
};

Buffers& buffers() {
  static Buffers b;
  return b;
}

std::vector<uint8_t> row_bytes(const DeviceTensor& out, int64_t row, int64_t n) {
  std::vector<uint8_t> r(static_cast<size_t>(n) * 2);
  gpu().copy_to_host(r.data(), static_cast<const uint8_t*>(out.buffer.data()) + row * n * 2, r.size());
  return r;
}

// out = x[first, first + m) * w^T under the current policy; returns the plan description.
std::string run_rows(const Shape& s, int64_t first, int64_t m, DeviceTensor& out) {
  out = DeviceTensor(HostTensor(DType::kBF16, {m, s.n}));
  gpu().matmul({buffers().rows(s, first, m), buffers().weight(s), TensorView(), out.view()});
  return gpu_services().describe_last_matmul();
}

// Rows {0, m/2, m-1} of every M in kMs, and rows taken at other offsets (M = 1 at row 999, M = 3 at 500), must
// equal bitwise the same rows of M = kFullM. Returns the number of mismatching rows; prints the plans.
int count_mismatches(const Shape& s, const std::string& label) {
  DeviceTensor full, out;
  const std::string full_plan = run_rows(s, 0, kFullM, full);
  std::string plans, bad;
  int mismatches = 0;
  auto check = [&](int64_t first, int64_t m, int64_t row) {
    if (row_bytes(out, row, s.n) != row_bytes(full, first + row, s.n)) {
      ++mismatches;
      bad += " M=" + std::to_string(m) + "@" + std::to_string(first) + "[" + std::to_string(row) + "]";
    }
  };
  for (int64_t m : kMs) {
    const std::string plan = run_rows(s, 0, m, out);
    if (m == 1 || m == 17) plans += "\n      M=" + std::to_string(m) + ": " + plan;
    for (int64_t row : {int64_t{0}, m / 2, m - 1}) check(0, m, row);
  }
  run_rows(s, kFullM - 1, 1, out);
  check(kFullM - 1, 1, 0);
  run_rows(s, 500, 3, out);
  for (int64_t row : {0, 1, 2}) check(500, 3, row);
  std::printf("  [%ld x %ld] %s: %s%s\n      M=%ld: %s\n", static_cast<long>(s.n), static_cast<long>(s.k),
              label.c_str(), mismatches ? ("rows differing:" + bad).c_str() : "all rows identical", plans.c_str(),
              static_cast<long>(kFullM), full_plan.c_str());
  return mismatches;
}

// The split-K policy alone (the default policy's path past M = 16, and all of VLLM_BATCH_INVARIANT=1's).
class CudaMatmulSplitK : public ::testing::Test {
 protected:
  void SetUp() override { gpu_services().set_matmul_policy(ops::MatmulPolicy::kBatchInvariantSplitK); }
  void TearDown() override { gpu_services().set_matmul_policy(ops::MatmulPolicy::kSkinnySmallM); }
};

TEST_F(CudaMatmulSplitK, RuleSplitCountsRowsDoNotDependOnM) {
  for (const Shape& s : kLlamaShapes) EXPECT_EQ(count_mismatches(s, "default split rule"), 0);
}

TEST_F(CudaMatmulSplitK, PinnedSplitCountsRowsDoNotDependOnM) {
  struct Pinned {
    Shape shape;
    std::vector<int> splits;
  };
  const Pinned cases[] = {{{4096, 4096}, {1, 2, 4, 8, 16}},
                          {{4096, 14336}, {2, 4, 7, 8, 14}},
                          {{1024, 4096}, {4, 8, 16}},
                          {{6144, 4096}, {2, 4}}};
  for (const Pinned& c : cases) {
    for (int splits : c.splits) {
      gpu_services().set_matmul_splits(c.shape.n, c.shape.k, splits);
      EXPECT_EQ(count_mismatches(c.shape, "pinned splits " + std::to_string(splits)), 0);
    }
    gpu_services().set_matmul_splits(c.shape.n, c.shape.k, 0);
  }
  // Informative: split points off the 256 grid (K / 3, K / 6) may fall differently for different tiles.
  for (int splits : {3, 6}) {
    gpu_services().set_matmul_splits(4096, 4096, splits);
    count_mismatches({4096, 4096}, "informative, pinned splits " + std::to_string(splits));
  }
  gpu_services().set_matmul_splits(4096, 4096, 0);
}

// M = 8192 at K = 14336 runs as row chunks (the f32 partials are capped); rows match M = 1 runs of themselves.
TEST_F(CudaMatmulSplitK, ChunkedLargeMMatchesSingleRows) {
  const Shape s{4096, 14336};
  DeviceTensor big, one;
  const std::string plan = run_rows(s, 0, 8192, big);
  int mismatches = 0;
  for (int64_t row : {0, 4095, 4096, 8191}) {
    run_rows(s, row, 1, one);
    if (row_bytes(one, 0, s.n) != row_bytes(big, row, s.n)) ++mismatches;
  }
  std::printf("  [4096 x 14336] M=8192 (%s): %d of 4 rows differ from M=1\n", plan.c_str(), mismatches);
  EXPECT_EQ(mismatches, 0);
}

TEST_F(CudaMatmulSplitK, SplitResultsMatchReference) {
  const Shape shapes[] = {{4096, 14336}, {1024, 4096}, {4096, 4096}};
  for (const Shape& s : shapes) {
    const int64_t m = 3;
    HostTensor x(DType::kBF16, {m, s.k}), w(DType::kBF16, {s.n, s.k}), want(DType::kBF16, {m, s.n});
    std::copy_n(buffers().x_host.bytes.begin(), x.bytes.size(), x.bytes.begin());
    std::copy_n(buffers().w_host.bytes.begin(), w.bytes.size(), w.bytes.begin());
    ref().matmul({x.view(), w.view(), TensorView(), want.view()});
    for (int splits : {0, 8}) {
      gpu_services().set_matmul_splits(s.n, s.k, splits);
      DeviceTensor out;
      const std::string plan = run_rows(s, 0, m, out);
      EXPECT_TRUE(all_close(out.to_host(), want)) << s.n << "x" << s.k << " " << plan;
    }
    gpu_services().set_matmul_splits(s.n, s.k, 0);
  }
}

// Split-K (the rule gives [256 x 4096] 4 splits) in every cuBLASLt dtype, with fused and separate bias.
TEST_F(CudaMatmulSplitK, DtypesAndBiasMatchReference) {
  std::mt19937 rng(21);
  const int64_t m = 5, n = 256, k = 4096;
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (DType bias_t : {DType::kF32, t}) {
      HostTensor x = random_tensor(t, {m, k}, rng), w = random_tensor(t, {n, k}, rng, 1.0 / 64);
      HostTensor bias = random_tensor(bias_t, {n}, rng), want(t, {m, n});
      ref().matmul({x.view(), w.view(), bias.view(), want.view()});
      DeviceTensor d_x(x), d_w(w), d_bias(bias), d_out(want);
      d_out.poison();
      gpu().matmul({d_x.view(), d_w.view(), d_bias.view(), d_out.view()});
      EXPECT_TRUE(all_close(d_out.to_host(), want))
          << dtype_name(t) << " bias " << dtype_name(bias_t) << ": " << gpu_services().describe_last_matmul();
    }
  }
}

}  // namespace
}  // namespace peregrine::cuda_test
