// CUDA vs ref: embedding, rms_norm (fused residual, aliasing, per-head), rope (scaled inv_freq, partial
// rotary), rope_kv_write (one launch; many tokens a launch against one at a time), silu_mul, kv_write (every cache dtype, skipped slots), gather_rows, and device
// error reporting.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

const DType kActs[] = {DType::kBF16, DType::kF32, DType::kF16};

TEST(CudaEmbedding, MatchesRefEveryDtypePair) {
  std::mt19937 rng(1);
  for (DType table_t : kActs)
    for (DType out_t : kActs) {
      const int64_t vocab = 1000, hidden = 136, tokens = 37;
      HostTensor table = random_tensor(table_t, {vocab, hidden}, rng);
      std::vector<int32_t> ids(tokens);
      for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
      ids[0] = 0;
      ids[1] = static_cast<int32_t>(vocab - 1);
      HostTensor h_ids = int_tensor(ids), want(out_t, {tokens, hidden});
      ref().embedding({h_ids.view(), table.view(), want.view()});
      DeviceTensor d_table(table), d_ids(h_ids), d_out(want);
      d_out.poison();
      gpu().embedding({d_ids.view(), d_table.view(), d_out.view()});
      EXPECT_TRUE(all_close(d_out.to_host(), want)) << dtype_name(table_t) << " -> " << dtype_name(out_t);
    }
}

TEST(CudaEmbedding, OutOfRangeIdIsReportedAtSynchronize) {
  std::mt19937 rng(2);
  HostTensor table = random_tensor(DType::kBF16, {10, 16}, rng);
  HostTensor ids = int_tensor({3, 10});
  DeviceTensor d_table(table), d_ids(ids), d_out(HostTensor(DType::kBF16, {2, 16}));
  gpu().embedding({d_ids.view(), d_table.view(), d_out.view()});
  try {
    gpu().synchronize();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("embedding"), std::string::npos) << e.message();
  }
  EXPECT_NO_THROW(gpu().synchronize());  // the flag was cleared
}

struct NormCase {
  int64_t rows, hidden;
  bool residual, alias;
};

TEST(CudaRmsNorm, MatchesRef) {
  std::mt19937 rng(3);
  const NormCase cases[] = {{1, 4096, true, false}, {7, 4096, false, false}, {33, 384, true, true},
                            {300, 64, false, true},  {5, 100, true, false},  {2, 8192, true, false},
                            {64 * 6, 64, false, false}};
  for (DType act : kActs)
    for (DType wt : {DType::kBF16, DType::kF32}) {
      for (const NormCase& c : cases) {
        HostTensor x = random_tensor(act, {c.rows, c.hidden}, rng, 2.0);
        HostTensor res = random_tensor(act, {c.rows, c.hidden}, rng, 2.0);
        HostTensor w = random_tensor(wt, {c.hidden}, rng);
        DeviceTensor d_x(x), d_res(res), d_w(w), d_out(x);
        HostTensor want(act, {c.rows, c.hidden});
        HostTensor res_ref = res;
        ops::RmsNormParams rp{x.view(), c.residual ? res_ref.view() : TensorView(), w.view(), want.view(), 1e-5f};
        ref().rms_norm(rp);
        if (!c.alias) d_out.poison();
        ops::RmsNormParams gp{d_x.view(), c.residual ? d_res.view() : TensorView(), d_w.view(),
                              c.alias ? d_x.view() : d_out.view(), 1e-5f};
        gpu().rms_norm(gp);
        HostTensor got = c.alias ? d_x.to_host() : d_out.to_host();
        EXPECT_TRUE(all_close(got, want)) << dtype_name(act) << " rows " << c.rows << " hidden " << c.hidden;
        if (c.residual) {
          EXPECT_TRUE(all_close(d_res.to_host(), res_ref, 1e-6, 1e-6)) << "residual sum " << dtype_name(act);
        }
      }
    }
}

// Query / KV heads, head dim and rotary dims of a RoPE case, its label, and Llama's frequency table for it.
struct Heads {
  int64_t hq, hkv, hd;
  int rotary_dim;
};
std::string rope_label(DType act, const Heads& h) {
  return std::string(dtype_name(act)) + " heads " + std::to_string(h.hq) + "/" + std::to_string(h.hkv) + " d " +
         std::to_string(h.hd) + " rotary " + std::to_string(h.rotary_dim);
}
HostTensor rope_inv_freq(int rotary_dim) {
  HostTensor inv_freq(DType::kF32, {rotary_dim / 2});
  for (int i = 0; i < rotary_dim / 2; ++i) inv_freq.set(i, std::pow(500000.0, -2.0 * i / rotary_dim));
  return inv_freq;
}

TEST(CudaRope, MatchesRefWithScaledFrequencies) {
  std::mt19937 rng(4);
  // Heads in groups of 8 per block with a partial last group; Llama-3's 32 + 8; a pair count past 256 threads.
  const Heads cases[] = {{8, 2, 128, 128}, {8, 2, 128, 64}, {32, 8, 128, 128}, {3, 1, 1024, 1024}};
  for (DType act : kActs)
    for (const auto [hq, hkv, hd, rotary_dim] : cases) {
      const int64_t tokens = 19;
      HostTensor q = random_tensor(act, {tokens, hq, hd}, rng), k = random_tensor(act, {tokens, hkv, hd}, rng);
      std::vector<int32_t> pos(tokens);
      for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(t < 4 ? t : rng() % 131072);
      HostTensor h_pos = int_tensor(pos);
      HostTensor inv_freq(DType::kF32, {rotary_dim / 2});
      for (int i = 0; i < rotary_dim / 2; ++i) {  // a llama3-like warped spectrum
        double f = std::pow(500000.0, -2.0 * i / rotary_dim);
        inv_freq.set(i, i > rotary_dim / 4 ? f / 8.0 : f);
      }
      DeviceTensor d_q(q), d_k(k), d_pos(h_pos), d_if(inv_freq);
      HostTensor q_ref = q, k_ref = k;
      ops::RopeParams rp{q_ref.view(), k_ref.view(), h_pos.view(), inv_freq.view(), 1.2f, rotary_dim};
      ref().rope(rp);
      ops::RopeParams gp{d_q.view(), d_k.view(), d_pos.view(), d_if.view(), 1.2f, rotary_dim};
      gpu().rope(gp);
      // Angles reach 1.3e5 rad: f32 sincos of the same f32 angle is exact to ~1 ulp, so f32 bounds hold.
      const double tol = act == DType::kF32 ? 2e-5 : default_rtol(act);
      EXPECT_TRUE(all_close(d_q.to_host(), q_ref, tol, tol)) << dtype_name(act) << " rotary " << rotary_dim;
      EXPECT_TRUE(all_close(d_k.to_host(), k_ref, tol, tol)) << dtype_name(act) << " rotary " << rotary_dim;
    }
}

// rope_kv_write (one launch): q, k and both caches against the ref's rope then kv_write on every element, and
// bitwise equal to the CUDA backend's own two ops; skipped slots and the cache rows nobody writes stay as they were.
TEST(CudaRopeKvWrite, MatchesRefAndTheTwoOps) {
  std::mt19937 rng(41);
  const Heads cases[] = {{32, 8, 128, 128}, {8, 2, 128, 64}, {3, 1, 1024, 1024}, {4, 4, 64, 64}};
  for (DType act : kActs)
    for (const auto [hq, hkv, hd, rotary_dim] : cases) {
      const int64_t tokens = 9, blocks = 6, bs = 16;
      HostTensor q = random_tensor(act, {tokens, hq, hd}, rng), k = random_tensor(act, {tokens, hkv, hd}, rng);
      HostTensor v = random_tensor(act, {tokens, hkv, hd}, rng);
      HostTensor kc = random_tensor(act, {blocks, bs, hkv, hd}, rng), vc = random_tensor(act, {blocks, bs, hkv, hd}, rng);
      std::vector<int32_t> pos(tokens);
      for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(t < 3 ? t : rng() % 131072);
      HostTensor h_pos = int_tensor(pos), slots = int_tensor({5, -1, 17, 95, 0, 33, -1, 64, 80});
      const HostTensor inv_freq = rope_inv_freq(rotary_dim);
      // The ref's definition: rope, then kv_write.
      HostTensor q_ref = q, k_ref = k, kc_ref = kc, vc_ref = vc;
      ref().rope_kv_write({q_ref.view(), k_ref.view(), h_pos.view(), inv_freq.view(), 1.1f, rotary_dim},
                          {k_ref.view(), v.view(), slots.view(), kc_ref.view(), vc_ref.view()});
      DeviceTensor d_pos(h_pos), d_if(inv_freq), d_slots(slots), d_v(v);
      // The CUDA backend's two ops, then its one launch.
      DeviceTensor q2(q), k2(k), kc2(kc), vc2(vc);
      gpu().rope({q2.view(), k2.view(), d_pos.view(), d_if.view(), 1.1f, rotary_dim});
      gpu().kv_write({k2.view(), d_v.view(), d_slots.view(), kc2.view(), vc2.view()});
      DeviceTensor q1(q), k1(k), kc1(kc), vc1(vc);
      gpu().rope_kv_write({q1.view(), k1.view(), d_pos.view(), d_if.view(), 1.1f, rotary_dim},
                          {k1.view(), d_v.view(), d_slots.view(), kc1.view(), vc1.view()});
      const double tol = act == DType::kF32 ? 2e-5 : default_rtol(act);
      const std::string what = rope_label(act, {hq, hkv, hd, rotary_dim});
      EXPECT_TRUE(all_close(q1.to_host(), q_ref, tol, tol)) << what;
      EXPECT_TRUE(all_close(k1.to_host(), k_ref, tol, tol)) << what;
      EXPECT_TRUE(all_close(kc1.to_host(), kc_ref, tol, tol)) << what;
      EXPECT_TRUE(all_close(vc1.to_host(), vc_ref, 0, 0)) << what;
      for (auto [one, two] : {std::pair{&q1, &q2}, std::pair{&k1, &k2}, std::pair{&kc1, &kc2}, std::pair{&vc1, &vc2}}) {
        const HostTensor a = one->to_host(), b = two->to_host();
        EXPECT_TRUE(a.bytes == b.bytes) << what << ": one launch differs from rope + kv_write";
      }
    }
}

// Launches of many tokens take the 16-byte rows kernel, launches of a few the per-(token, heads) kernel: a token's
// q, k and cache rows must be the same bits either way (a request alone and inside a prefill chunk), and both match
// the ref. Also rope alone, and a head dim whose halves are not whole 16-byte pieces (the fallback).
TEST(CudaRopeKvWrite, ManyTokensMatchOneAtATime) {
  std::mt19937 rng(42);
  const Heads cases[] = {{32, 8, 128, 128}, {8, 2, 128, 64}, {3, 1, 1024, 1024}, {4, 4, 64, 64}, {2, 1, 24, 24}};
  for (DType act : kActs)
    for (const auto [hq, hkv, hd, rotary_dim] : cases) {
      const int64_t tokens = 70, blocks = 8, bs = 16;  // 17 blocks of four tokens and one of two
      HostTensor q = random_tensor(act, {tokens, hq, hd}, rng), k = random_tensor(act, {tokens, hkv, hd}, rng);
      HostTensor v = random_tensor(act, {tokens, hkv, hd}, rng);
      HostTensor kc = random_tensor(act, {blocks, bs, hkv, hd}, rng), vc = random_tensor(act, {blocks, bs, hkv, hd}, rng);
      std::vector<int32_t> pos(tokens), slot(tokens);
      for (int64_t t = 0; t < tokens; ++t) {
        pos[t] = static_cast<int32_t>(t < 5 ? t : rng() % 131072);
        slot[t] = t % 9 == 4 ? -1 : static_cast<int32_t>((t * 37) % (blocks * bs));  // distinct, some skipped
      }
      HostTensor h_pos = int_tensor(pos), slots = int_tensor(slot);
      const HostTensor inv_freq = rope_inv_freq(rotary_dim);
      HostTensor q_ref = q, k_ref = k, kc_ref = kc, vc_ref = vc;
      ref().rope_kv_write({q_ref.view(), k_ref.view(), h_pos.view(), inv_freq.view(), 1.1f, rotary_dim},
                          {k_ref.view(), v.view(), slots.view(), kc_ref.view(), vc_ref.view()});
      DeviceTensor d_pos(h_pos), d_if(inv_freq), d_slots(slots), d_v(v);
      DeviceTensor q1(q), k1(k), kc1(kc), vc1(vc);  // all tokens in one launch
      gpu().rope_kv_write({q1.view(), k1.view(), d_pos.view(), d_if.view(), 1.1f, rotary_dim},
                          {k1.view(), d_v.view(), d_slots.view(), kc1.view(), vc1.view()});
      DeviceTensor q2(q), k2(k), kc2(kc), vc2(vc);  // one token a launch
      DeviceTensor q3(q), k3(k);                    // rope alone, all tokens
      gpu().rope({q3.view(), k3.view(), d_pos.view(), d_if.view(), 1.1f, rotary_dim});
      for (int64_t t = 0; t < tokens; ++t) {
        const TensorView qt = q2.view().slice_rows(t, 1), kt = k2.view().slice_rows(t, 1);
        gpu().rope_kv_write({qt, kt, d_pos.view().slice_rows(t, 1), d_if.view(), 1.1f, rotary_dim},
                            {kt, d_v.view().slice_rows(t, 1), d_slots.view().slice_rows(t, 1), kc2.view(), vc2.view()});
      }
      const double tol = act == DType::kF32 ? 2e-5 : default_rtol(act);
      const std::string what = rope_label(act, {hq, hkv, hd, rotary_dim});
      EXPECT_TRUE(all_close(q1.to_host(), q_ref, tol, tol)) << what;
      EXPECT_TRUE(all_close(k1.to_host(), k_ref, tol, tol)) << what;
      EXPECT_TRUE(all_close(kc1.to_host(), kc_ref, tol, tol)) << what;
      EXPECT_TRUE(all_close(vc1.to_host(), vc_ref, 0, 0)) << what;
      for (auto [one, two] : {std::pair{&q1, &q2}, std::pair{&k1, &k2}, std::pair{&kc1, &kc2}, std::pair{&vc1, &vc2},
                              std::pair{&q1, &q3}, std::pair{&k1, &k3}}) {
        const HostTensor a = one->to_host(), b = two->to_host();
        EXPECT_TRUE(a.bytes == b.bytes) << what << ": all tokens in one launch differ from one token a launch";
      }
    }
}

TEST(CudaSiluMul, MatchesRefIncludingAliasAndOddSizes) {
  std::mt19937 rng(5);
  for (DType act : kActs)
    for (int64_t f : {14336, 1001}) {
      const int64_t t = 5;
      HostTensor gate = random_tensor(act, {t, f}, rng, 3.0), up = random_tensor(act, {t, f}, rng);
      HostTensor want(act, {t, f});
      ref().silu_mul({gate.view(), up.view(), want.view()});
      DeviceTensor d_gate(gate), d_up(up), d_out(want);
      d_out.poison();
      gpu().silu_mul({d_gate.view(), d_up.view(), d_out.view()});
      EXPECT_TRUE(all_close(d_out.to_host(), want)) << dtype_name(act) << " f " << f;
      gpu().silu_mul({d_gate.view(), d_up.view(), d_gate.view()});  // out aliases gate
      EXPECT_TRUE(all_close(d_gate.to_host(), want)) << "aliased " << dtype_name(act);
    }
}

TEST(CudaKvWrite, EveryCacheDtypeAndSkippedSlots) {
  std::mt19937 rng(6);
  for (DType act : kActs)
    for (DType cache_t : kActs) {
      const int64_t tokens = 9, hkv = 2, hd = 64, blocks = 6, bs = 16;
      HostTensor k = random_tensor(act, {tokens, hkv, hd}, rng), v = random_tensor(act, {tokens, hkv, hd}, rng);
      HostTensor kc = random_tensor(cache_t, {blocks, bs, hkv, hd}, rng);
      HostTensor vc = random_tensor(cache_t, {blocks, bs, hkv, hd}, rng);
      HostTensor slots = int_tensor({5, -1, 17, 95, 0, 33, -1, 64, 80});
      DeviceTensor d_k(k), d_v(v), d_kc(kc), d_vc(vc), d_slots(slots);
      ref().kv_write({k.view(), v.view(), slots.view(), kc.view(), vc.view()});
      gpu().kv_write({d_k.view(), d_v.view(), d_slots.view(), d_kc.view(), d_vc.view()});
      EXPECT_TRUE(all_close(d_kc.to_host(), kc, 0, 0)) << dtype_name(act) << " -> " << dtype_name(cache_t);
      EXPECT_TRUE(all_close(d_vc.to_host(), vc, 0, 0)) << dtype_name(act) << " -> " << dtype_name(cache_t);
    }
}

TEST(CudaGatherRows, MatchesRef) {
  std::mt19937 rng(7);
  for (DType act : kActs)
    for (int64_t h : {4096, 7}) {
      HostTensor x = random_tensor(act, {50, h}, rng);
      HostTensor idx = int_tensor({49, 0, 7, 7, 13});
      HostTensor want(act, {5, h});
      ref().gather_rows({x.view(), idx.view(), want.view()});
      DeviceTensor d_x(x), d_idx(idx), d_out(want);
      d_out.poison();
      gpu().gather_rows({d_x.view(), d_idx.view(), d_out.view()});
      EXPECT_TRUE(bitwise_equal(d_out.to_host(), want)) << dtype_name(act) << " h " << h;
    }
}

TEST(CudaBackendBasics, MemoryAndErrors) {
  EXPECT_GT(gpu().free_memory(), size_t{1} << 30);
  EXPECT_TRUE(gpu().supports_activation(DType::kBF16));
  EXPECT_TRUE(gpu().supports_activation(DType::kF32));
  try {
    gpu().allocate(size_t{1} << 50);
    FAIL() << "expected kResourceExhausted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.message();
  }
  // Shape errors come from the shared checks, before any launch.
  HostTensor x(DType::kBF16, {2, 8}), w(DType::kBF16, {4, 9}), out(DType::kBF16, {2, 4});
  DeviceTensor d_x(x), d_w(w), d_out(out);
  EXPECT_THROW(gpu().matmul({d_x.view(), d_w.view(), TensorView(), d_out.view()}), Error);
}

}  // namespace
}  // namespace peregrine::cuda_test
