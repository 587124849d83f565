// GGUF block weights (llama.cpp's Q4_0 ... Q6_K) on the CPU backend against the ref backend (which dequantizes
// with the scalar oracle of core/ggml_quant) on fresh random blocks, every output element, every ISA: matmul at
// M = 1, 3, 17, 64 with row lengths that are and are not multiples of 256, with and without bias; the row rule
// (a row's bits do not depend on M or the thread count), for the file's blocks and for the backend's packed copy
// (Backend::pack_weight: every block type on AVX-512 VNNI and on AVX2); and the embedding gather.
//
// Tolerance: the kernels quantize each row of x to int8 per block of 32 (32-value types) or 256 (K-quants) with
// scale amax/127, as llama.cpp's CPU matmuls do, so against the f32 reference an output may move by at most
// sum_k |w[j,k]| * |x[i,k] - xq[i,k]| <= sum over blocks of (amax_b / 254) * sum_{k in b} |w[j,k]| (rounding to
// nearest), which the test computes per element from the dequantized weights; f32 summation adds a small relative
// term on top.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "ggml_test_blocks.h"
#include "op_test_util.h"
#include "peregrine/error.h"

namespace peregrine::test {
namespace {

int64_t act_block(GgmlType t) {
  return ggml_block_info(t)->block_size;  // 32, or 256 for the K-quants
}

// Per element of out [m, n]: the largest move activation rounding can cause (see the header note).
std::vector<double> activation_bounds(GgmlType t, const std::vector<uint8_t>& w, const float* x, int64_t m, int64_t k,
                                      int64_t n) {
  const int64_t qb = act_block(t);
  const size_t rb = ggml_row_bytes(t, k);
  std::vector<float> row(static_cast<size_t>(k));
  std::vector<double> absw(static_cast<size_t>(n * (k / qb)));
  for (int64_t j = 0; j < n; ++j) {
    ggml_dequantize_row(t, w.data() + j * rb, row.data(), k);
    for (int64_t b = 0; b < k / qb; ++b) {
      double s = 0;
      for (int64_t kk = b * qb; kk < (b + 1) * qb; ++kk) s += std::fabs(row[static_cast<size_t>(kk)]);
      absw[static_cast<size_t>(j * (k / qb) + b)] = s;
    }
  }
  std::vector<double> bound(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < k / qb; ++b) {
      double amax = 0;
      for (int64_t kk = b * qb; kk < (b + 1) * qb; ++kk) amax = std::max(amax, std::fabs(double(x[i * k + kk])));
      const double half_step = amax / 127.0 / 2.0 * 1.0001;
      for (int64_t j = 0; j < n; ++j)
        bound[static_cast<size_t>(i * n + j)] += half_step * absw[static_cast<size_t>(j * (k / qb) + b)];
    }
  return bound;
}

// The exact result for x rounded as the kernels round it (int8 per block, scale amax / 127, codes rounded to
// nearest even, the same f32 operations), from the oracle's dequantized weights in double: the kernels must
// match it up to f32 summation.
std::vector<double> quantized_x_oracle(GgmlType t, const std::vector<uint8_t>& w, const float* x, const float* bias,
                                       int64_t m, int64_t k, int64_t n) {
  const std::vector<double> xq = rounded_x_blocks(x, m, k, act_block(t));
  const size_t rb = ggml_row_bytes(t, k);
  std::vector<float> row(static_cast<size_t>(k));
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t j = 0; j < n; ++j) {
    ggml_dequantize_row(t, w.data() + j * rb, row.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += xq[static_cast<size_t>(i * k + kk)] * row[static_cast<size_t>(kk)];
      out[static_cast<size_t>(i * n + j)] = s + (bias ? bias[j] : 0.0f);
    }
  }
  return out;
}

class CpuGgml : public CpuIsaTest {};

TEST_P(CpuGgml, MatmulMatchesRefOnEveryElementAndKeepsRowsIndependent) {
  auto ref = ops::make_ref_backend();
  auto cpu = make(2);
  auto cpu1 = make(1);
  std::mt19937 rng(1707);
  struct Shape { int64_t m, k, n; bool bias; };
  // K = 384 and 1056 are multiples of 32 but not of 256 (32-value types only).
  const Shape shapes[] = {{1, 2048, 1024, false}, {3, 384, 1024, true}, {3, 1024, 384, false}, {17, 1056, 96, true},
                          {17, 1024, 160, false}, {64, 2048, 64, true}, {64, 384, 40, false}, {1, 256, 7, true}};
  int packed_cases = 0;
  for (GgmlType t : kGgmlBlockTypes) {
    for (const Shape& s : shapes) {
      if (s.k % act_block(t) != 0) continue;
      const std::string what0 = ggml_type_name(t) + " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) +
                               " N=" + std::to_string(s.n) + (s.bias ? " bias" : "");
      const std::vector<uint8_t> w = random_ggml_rows(t, s.n, s.k, rng);
      const TensorView wv(const_cast<uint8_t*>(w.data()), DType::kU8,
                          {s.n, static_cast<int64_t>(ggml_row_bytes(t, s.k))});
      Buffer x = random_buffer(DType::kF32, s.m * s.k, rng);
      Buffer bias = random_buffer(DType::kF32, s.n, rng);
      ops::WeightQuant q;
      q.ggml = t;
      const TensorView bv = s.bias ? bias.view({s.n}) : TensorView();
      Buffer want = poisoned(DType::kF32, s.m * s.n);
      ref->matmul({x.view({s.m, s.k}), wv, bv, want.view({s.m, s.n}), q});
      // The plain blocks, then the backend's packed copy where it makes one (Backend::pack_weight): both held to
      // the same bounds and the same row rule.
      ops::DeviceBuffer packed = cpu->pack_weight(wv, q);
      packed_cases += packed.data() != nullptr;
      for (int use_packed = 0; use_packed < 2; ++use_packed) {
        if (use_packed && !packed.data()) continue;
        q.packed = use_packed ? packed.data() : nullptr;
        const std::string what = what0 + (use_packed ? " packed" : "");
        Buffer got = poisoned(DType::kF32, s.m * s.n);
        cpu->matmul({x.view({s.m, s.k}), wv, bv, got.view({s.m, s.n}), q});
        const std::vector<double> act = activation_bounds(t, w, x.f32(), s.m, s.k, s.n);
        double ss = 0;
        for (int64_t i = 0; i < want.n; ++i) ss += double(want.get(i)) * want.get(i);
        const double rms = std::sqrt(ss / static_cast<double>(want.n));
        int64_t bad = 0;
        for (int64_t i = 0; i < want.n; ++i) {
          const double g = got.get(i), wv_ = want.get(i);
          const double tol = act[static_cast<size_t>(i)] + 1e-4 * (std::fabs(wv_) + rms);
          if (!(std::fabs(g - wv_) <= tol) && bad++ < 5)
            ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << wv_ << " tol " << tol;
        }
        ASSERT_EQ(bad, 0) << what << ": " << bad << " of " << want.n << " elements out of bounds";
        const std::vector<double> exact =
            quantized_x_oracle(t, w, x.f32(), s.bias ? bias.f32() : nullptr, s.m, s.k, s.n);
        for (int64_t i = 0; i < want.n; ++i) {
          const double e = exact[static_cast<size_t>(i)];
          if (!(std::fabs(got.get(i) - e) <= 3e-6 * (std::fabs(e) + rms)) && bad++ < 5)
            ADD_FAILURE() << what << ": element " << i << " got " << got.get(i) << " want (x rounded) " << e;
        }
        ASSERT_EQ(bad, 0) << what << ": " << bad << " of " << want.n << " elements off the rounded-x oracle";
        // Row rule: each row alone (and on one thread) gives the bits it had inside the batch.
        for (int64_t r = 0; r < s.m; r += (s.m > 8 ? 7 : 1)) {
          Buffer one = poisoned(DType::kF32, s.n);
          TensorView xr(x.bytes.data() + r * s.k * 4, DType::kF32, {1, s.k});
          (r % 2 ? cpu1 : cpu)->matmul({xr, wv, bv, one.view({1, s.n}), q});
          for (int64_t j = 0; j < s.n; ++j)
            ASSERT_EQ(std::memcmp(&one.bytes[j * 4], &got.bytes[(r * s.n + j) * 4], 4), 0)
                << what << " row " << r << " col " << j;
        }
      }
    }
  }
  std::cout << cpu->name() << ": " << packed_cases << " shapes also checked in the packed layout\n";
}

// Several matmuls of one x (q/k/v, gate/up) through Backend::matmuls give each output the bits matmul() gives it,
// packed or not (the packed M = 1 case runs them in one parallel region), of one type or mixed as a Q4_K_M file
// mixes them (Q4_K q/k with a Q6_K v; Q8_0 beside Q5_0: one x block size; Q4_K beside Q8_0: two).
TEST_P(CpuGgml, MatmulsOfOneXMatchSingleMatmulsBitForBit) {
  auto cpu = make(2);
  std::mt19937 rng(1709);
  std::vector<std::array<GgmlType, 3>> mixes;
  for (GgmlType t : kGgmlBlockTypes) mixes.push_back({t, t, t});
  mixes.push_back({GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K});
  mixes.push_back({GgmlType::kQ5_0, GgmlType::kQ8_0, GgmlType::kQ4_1});
  mixes.push_back({GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kQ5_K});
  for (const auto& types : mixes) {
    const int64_t k = 512, ns[] = {96, 16, 40};
    for (int64_t m : {int64_t{1}, int64_t{5}}) {
      Buffer x = random_buffer(DType::kF32, m * k, rng);
      std::vector<std::vector<uint8_t>> w;
      std::vector<ops::DeviceBuffer> packed;
      std::vector<Buffer> one, many;
      std::vector<ops::MatmulParams> ps;
      for (size_t mi = 0; mi < 3; ++mi) {
        const int64_t n = ns[mi];
        const GgmlType t = types[mi];
        w.push_back(random_ggml_rows(t, n, k, rng));
        const TensorView wv(w.back().data(), DType::kU8, {n, static_cast<int64_t>(ggml_row_bytes(t, k))});
        ops::WeightQuant q;
        q.ggml = t;
        packed.push_back(cpu->pack_weight(wv, q));
        q.packed = packed.back().data();
        one.push_back(poisoned(DType::kF32, m * n));
        many.push_back(poisoned(DType::kF32, m * n));
        cpu->matmul({x.view({m, k}), wv, {}, one.back().view({m, n}), q});
        ps.push_back({x.view({m, k}), wv, {}, many.back().view({m, n}), q});
      }
      cpu->matmuls(ps);
      for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_TRUE(bits_equal(one[i], many[i])) << ggml_type_name(types[i]) << " M=" << m << " matmul " << i;
    }
  }
}

TEST_P(CpuGgml, EmbeddingGathersExactlyTheReferenceRows) {
  auto ref = ops::make_ref_backend();
  auto cpu = make(2);
  std::mt19937 rng(1708);
  const int64_t vocab = 300, tokens = 37;
  for (GgmlType t : kGgmlBlockTypes) {
    for (int64_t hidden : {int64_t{256}, int64_t{2048}, int64_t{96}}) {
      if (hidden % act_block(t) != 0) continue;
      const std::vector<uint8_t> table = random_ggml_rows(t, vocab, hidden, rng);
      std::vector<int32_t> ids(static_cast<size_t>(tokens));
      for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
      ids[0] = 0;
      ids[1] = static_cast<int32_t>(vocab - 1);
      Buffer idb = int_buffer(ids);
      Buffer want = poisoned(DType::kF32, tokens * hidden), got = poisoned(DType::kF32, tokens * hidden);
      ops::EmbeddingParams p;
      p.token_ids = idb.view({tokens});
      p.table = TensorView(const_cast<uint8_t*>(table.data()), DType::kU8,
                           {vocab, static_cast<int64_t>(ggml_row_bytes(t, hidden))});
      p.table_ggml = t;
      p.out = want.view({tokens, hidden});
      ref->embedding(p);
      p.out = got.view({tokens, hidden});
      cpu->embedding(p);
      EXPECT_TRUE(bits_equal(got, want)) << ggml_type_name(t) << " hidden " << hidden;
    }
  }
  // An id out of range is an error, not a read past the table.
  const std::vector<uint8_t> table = random_ggml_rows(GgmlType::kQ8_0, 4, 32, rng);
  Buffer idb = int_buffer({1, 4});
  Buffer out(DType::kF32, 64);
  ops::EmbeddingParams p;
  p.token_ids = idb.view({2});
  p.table = TensorView(const_cast<uint8_t*>(table.data()), DType::kU8, {4, 34});
  p.table_ggml = GgmlType::kQ8_0;
  p.out = out.view({2, 32});
  EXPECT_THROW(cpu->embedding(p), Error);
}

PEREGRINE_INSTANTIATE_ISA_TESTS(CpuGgml);

}  // namespace
}  // namespace peregrine::test
