// CUDA quantized KV caches (int8 / fp8 e4m3, one scale per token and KV head) vs the ref backend: kv_write gives
// the same codes and scales bit for bit (bf16 and f32 activations), and attention over those caches (bf16: the
// tensor-core kernels; f32: the generic one) matches the ref backend on every output element for ragged batches.
// attention_test.cpp takes 8-bit caches through every attention case.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

TEST(CudaKvQuant, WritesTheRefCodesAndAttendsLikeTheRef) {
  std::mt19937 rng(51);
  struct Case { int hq, hkv, hd, bs; std::vector<std::pair<int, int>> seqs; };  // (prefix, q_len)
  const Case cases[] = {{8, 2, 128, 16, {{0, 37}, {50, 13}, {300, 1}, {17, 1}}}, {12, 4, 64, 16, {{0, 21}, {1000, 1}}}};
  for (DType kv : {DType::kI8, DType::kF8E4M3})
    for (DType act : {DType::kBF16, DType::kF32})
      for (const Case& c : cases) {
        std::vector<int32_t> qsl{0}, lens, slots;
        int max_blocks = 0;
        for (auto [prefix, q] : c.seqs) {
          qsl.push_back(qsl.back() + q);
          lens.push_back(prefix + q);
          max_blocks = std::max(max_blocks, (prefix + q + c.bs - 1) / c.bs);
        }
        const int ns = static_cast<int>(c.seqs.size()), nb = ns * max_blocks + 3;
        std::vector<int32_t> pool(static_cast<size_t>(nb)), tables(static_cast<size_t>(ns * max_blocks));
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        for (size_t i = 0; i < tables.size(); ++i) tables[i] = pool[i];
        for (int s = 0; s < ns; ++s)
          for (int j = 0; j < lens[s]; ++j) slots.push_back(tables[s * max_blocks + j / c.bs] * c.bs + j % c.bs);
        const int64_t ctx = static_cast<int64_t>(slots.size()), tokens = qsl.back();
        HostTensor k = random_tensor(act, {ctx, c.hkv, c.hd}, rng), v = random_tensor(act, {ctx, c.hkv, c.hd}, rng);
        HostTensor q = random_tensor(act, {tokens, c.hq, c.hd}, rng);
        HostTensor slot_t = int_tensor(slots), qsl_t = int_tensor(qsl), lens_t = int_tensor(lens), tab_t = int_tensor(tables);
        tab_t.shape = {ns, max_blocks};
        HostTensor kc(kv, {nb, c.bs, c.hkv, c.hd}), vc(kv, {nb, c.bs, c.hkv, c.hd});
        HostTensor ks(DType::kF32, {nb, c.bs, c.hkv}), vs(DType::kF32, {nb, c.bs, c.hkv});
        ref().kv_write({k.view(), v.view(), slot_t.view(), kc.view(), vc.view(), ks.view(), vs.view()});
        DeviceTensor dk(k), dv(v), dq(q), dslot(slot_t), dqsl(qsl_t), dlens(lens_t), dtab(tab_t);
        DeviceTensor dkc(HostTensor(kv, {nb, c.bs, c.hkv, c.hd})), dvc(HostTensor(kv, {nb, c.bs, c.hkv, c.hd}));
        DeviceTensor dks(HostTensor(DType::kF32, {nb, c.bs, c.hkv})), dvs(HostTensor(DType::kF32, {nb, c.bs, c.hkv}));
        gpu().kv_write({dk.view(), dv.view(), dslot.view(), dkc.view(), dvc.view(), dks.view(), dvs.view()});
        const std::string what = std::string(dtype_name(kv)) + " act " + std::string(dtype_name(act)) + " hd " + std::to_string(c.hd);
        EXPECT_TRUE(bitwise_equal(dkc.to_host(), kc)) << what;
        EXPECT_TRUE(bitwise_equal(dvc.to_host(), vc)) << what;
        EXPECT_TRUE(bitwise_equal(dks.to_host(), ks)) << what;
        EXPECT_TRUE(bitwise_equal(dvs.to_host(), vs)) << what;
        auto params = [&](const TensorView& qv, const TensorView& kcv, const TensorView& vcv, const TensorView& ksv,
                          const TensorView& vsv, const TensorView& out, const TensorView& qslv, const TensorView& lensv,
                          const TensorView& tabv) {
          ops::AttentionParams p;
          p.q = qv;
          p.k_cache = kcv;
          p.v_cache = vcv;
          p.k_scales = ksv;
          p.v_scales = vsv;
          p.out = out;
          p.query_start_loc = qslv;
          p.seq_lens = lensv;
          p.block_tables = tabv;
          p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
          p.max_query_len = 37;
          p.max_seq_len = 1001;
          return p;
        };
        HostTensor want(act, {tokens, c.hq, c.hd});
        ref().attention(params(q.view(), kc.view(), vc.view(), ks.view(), vs.view(), want.view(), qsl_t.view(), lens_t.view(),
                               tab_t.view()));
        DeviceTensor dout(want);
        dout.poison();
        gpu().attention(params(dq.view(), dkc.view(), dvc.view(), dks.view(), dvs.view(), dout.view(), dqsl.view(),
                               dlens.view(), dtab.view()));
        EXPECT_TRUE(all_close(dout.to_host(), want, act == DType::kF32 ? 1e-4 : -1)) << what;
      }
}

}  // namespace
}  // namespace peregrine::cuda_test
