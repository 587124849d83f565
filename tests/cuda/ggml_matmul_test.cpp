// CUDA GGUF block kernels vs the ref backend (the scalar oracle of core/ggml_quant) on fresh random blocks, every
// output element: all eight block types, row lengths that are and are not multiples of 256, bf16 and f32
// activations, bias, M across the GEMV (M <= 8) and the dequantize + GEMM path; rows bit-identical for every M
// within each path; and the embedding gather bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

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
