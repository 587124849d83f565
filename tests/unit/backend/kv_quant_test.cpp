// Quantized KV caches (int8, fp8 e4m3 with one scale per token and KV head, ops.h KvWriteParams): the ref
// backend's write equals the W8A8 activation quantizer per head and its attention equals attention over a float
// cache holding code * scale; the CPU backend writes the same codes and scales bit for bit and its attention
// matches the ref backend on ragged paged batches (prefill chunks over cached prefixes, decodes, GQA, head_dim
// 48 / 64 / 128, a long split decode, sliding windows) on every kernel set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/ref/ref_backend.h"
#include "core/dtype.h"
#include "op_test_util.h"
#include "ops/act_quant.h"

namespace peregrine::test {
namespace {

struct Seq {
  int64_t prefix, q_len;
};

struct KvCase {
  int64_t hq, hkv, hd, block_size;
  int window;
  std::vector<Seq> seqs;
};

// A paged batch whose cache is filled through kv_write (so the codes are the backend's own), then attention.
struct QuantBatch {
  KvCase c;
  DType dtype;
  int64_t tokens = 0, ctx_tokens = 0, num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> qsl, lens, tables, slots;
  std::vector<float> q, k, v;  // k, v: every context token's rows, [ctx_tokens, hkv, hd]

  QuantBatch(const KvCase& cs, DType t, std::mt19937& rng) : c(cs), dtype(t) {
    qsl.push_back(0);
    for (const Seq& s : c.seqs) {
      qsl.push_back(qsl.back() + static_cast<int32_t>(s.q_len));
      lens.push_back(static_cast<int32_t>(s.prefix + s.q_len));
      max_blocks = std::max(max_blocks, (s.prefix + s.q_len + c.block_size - 1) / c.block_size);
    }
    tokens = qsl.back();
    const int64_t ns = static_cast<int64_t>(c.seqs.size());
    num_blocks = ns * max_blocks + 5;
    std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    tables.assign(static_cast<size_t>(ns * max_blocks), 0);
    size_t next = 0;
    for (int64_t s = 0; s < ns; ++s)
      for (int64_t b = 0; b < max_blocks; ++b) tables[s * max_blocks + b] = pool[next++];
    for (int64_t s = 0; s < ns; ++s)
      for (int64_t j = 0; j < lens[s]; ++j) slots.push_back(tables[s * max_blocks + j / c.block_size] * c.block_size + j % c.block_size);
    ctx_tokens = static_cast<int64_t>(slots.size());
    std::normal_distribution<float> nd(0.0f, 1.0f);
    k.resize(static_cast<size_t>(ctx_tokens * c.hkv * c.hd));
    v.resize(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = nd(rng) * (1.0f + 4.0f * (i % 97 == 0));  // some outliers
      v[i] = nd(rng);
    }
    q.resize(static_cast<size_t>(tokens * c.hq * c.hd));
    for (float& x : q) x = nd(rng);
  }

  struct Cache {
    std::vector<uint8_t> k, v;
    std::vector<float> ks, vs;
  };

  Cache write(ops::Backend& b) const {
    const int64_t row = c.hkv * c.hd, nslots = num_blocks * c.block_size;
    Cache out{std::vector<uint8_t>(static_cast<size_t>(nslots * row), 0x7f), std::vector<uint8_t>(static_cast<size_t>(nslots * row), 0x7f),
              std::vector<float>(static_cast<size_t>(nslots * c.hkv), NAN), std::vector<float>(static_cast<size_t>(nslots * c.hkv), NAN)};
    ops::KvWriteParams p;
    p.k = TensorView(const_cast<float*>(k.data()), DType::kF32, {ctx_tokens, c.hkv, c.hd});
    p.v = TensorView(const_cast<float*>(v.data()), DType::kF32, {ctx_tokens, c.hkv, c.hd});
    p.slot_mapping = TensorView(const_cast<int32_t*>(slots.data()), DType::kI32, {ctx_tokens});
    p.k_cache = TensorView(out.k.data(), dtype, {num_blocks, c.block_size, c.hkv, c.hd});
    p.v_cache = TensorView(out.v.data(), dtype, {num_blocks, c.block_size, c.hkv, c.hd});
    p.k_scales = TensorView(out.ks.data(), DType::kF32, {num_blocks, c.block_size, c.hkv});
    p.v_scales = TensorView(out.vs.data(), DType::kF32, {num_blocks, c.block_size, c.hkv});
    b.kv_write(p);
    return out;
  }

  // as_float: the cache holds f32 values (no scales).
  std::vector<float> attend(ops::Backend& b, Cache& cache, bool as_float = false) const {
    const DType t = as_float ? DType::kF32 : dtype;
    std::vector<float> out(q.size(), NAN);
    const int64_t ns = static_cast<int64_t>(c.seqs.size());
    ops::AttentionParams p;
    p.q = TensorView(const_cast<float*>(q.data()), DType::kF32, {tokens, c.hq, c.hd});
    p.k_cache = TensorView(cache.k.data(), t, {num_blocks, c.block_size, c.hkv, c.hd});
    p.v_cache = TensorView(cache.v.data(), t, {num_blocks, c.block_size, c.hkv, c.hd});
    if (t == dtype) {
      p.k_scales = TensorView(cache.ks.data(), DType::kF32, {num_blocks, c.block_size, c.hkv});
      p.v_scales = TensorView(cache.vs.data(), DType::kF32, {num_blocks, c.block_size, c.hkv});
    }
    p.out = TensorView(out.data(), DType::kF32, {tokens, c.hq, c.hd});
    p.query_start_loc = TensorView(const_cast<int32_t*>(qsl.data()), DType::kI32, {ns + 1});
    p.seq_lens = TensorView(const_cast<int32_t*>(lens.data()), DType::kI32, {ns});
    p.block_tables = TensorView(const_cast<int32_t*>(tables.data()), DType::kI32, {ns, max_blocks});
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    p.sliding_window = c.window;
    for (const Seq& s : c.seqs) {
      p.max_query_len = std::max<int>(p.max_query_len, static_cast<int>(s.q_len));
      p.max_seq_len = std::max<int>(p.max_seq_len, static_cast<int>(s.prefix + s.q_len));
    }
    b.attention(p);
    return out;
  }
};

const std::vector<KvCase>& cases() {
  static const std::vector<KvCase> c = {
      {8, 2, 64, 16, 0, {{0, 37}, {50, 13}, {100, 1}, {17, 1}}},
      {12, 4, 48, 16, 20, {{0, 21}, {31, 16}, {64, 1}}},
      {16, 2, 128, 16, 0, {{700, 1}, {0, 5}}},  // a long decode (split over threads by segment)
      {4, 4, 64, 7, 0, {{10, 9}, {3, 1}}},
  };
  return c;
}

TEST(RefKvQuant, WritesPerHeadCodesAndReadsCodeTimesScale) {
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(41);
  for (DType t : {DType::kI8, DType::kF8E4M3}) {
    for (const KvCase& c : cases()) {
      QuantBatch b(c, t, rng);
      QuantBatch::Cache cache = b.write(*ref);
      // Codes and scales: the activation quantizer on each (token, head) vector.
      for (int64_t i = 0; i < b.ctx_tokens; ++i)
        for (int64_t h = 0; h < c.hkv; ++h) {
          std::vector<uint8_t> codes(static_cast<size_t>(c.hd));
          const float* src = b.k.data() + (i * c.hkv + h) * c.hd;
          const float s = t == DType::kI8 ? ops::quantize_act_int8(src, c.hd, reinterpret_cast<int8_t*>(codes.data()))
                                          : ops::quantize_act_fp8(src, c.hd, codes.data());
          const int64_t slot = b.slots[static_cast<size_t>(i)];
          ASSERT_EQ(cache.ks[static_cast<size_t>(slot * c.hkv + h)], s);
          ASSERT_EQ(std::memcmp(codes.data(), cache.k.data() + (slot * c.hkv + h) * c.hd, codes.size()), 0);
        }
      // Attention over the codes = attention over a float cache of code * scale.
      QuantBatch::Cache f{std::vector<uint8_t>(cache.k.size() * 4), std::vector<uint8_t>(cache.v.size() * 4), {}, {}};
      for (size_t i = 0; i < cache.k.size(); ++i) {
        const size_t head = i / static_cast<size_t>(c.hd);
        auto val = [&](const std::vector<uint8_t>& codes, const std::vector<float>& sc) {
          const float code = t == DType::kI8 ? static_cast<float>(static_cast<int8_t>(codes[i])) : fp8_e4m3_to_f32(codes[i]);
          return std::isnan(sc[head]) ? 0.0f : code * sc[head];
        };
        const float kv = val(cache.k, cache.ks), vv = val(cache.v, cache.vs);
        std::memcpy(f.k.data() + 4 * i, &kv, 4);
        std::memcpy(f.v.data() + 4 * i, &vv, 4);
      }
      const std::vector<float> got = b.attend(*ref, cache), want = b.attend(*ref, f, true);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6) << dtype_name(t) << " element " << i;
    }
  }
}

class CpuKvQuant : public CpuIsaTest {};

TEST_P(CpuKvQuant, WritesTheRefCodesAndAttendsLikeTheRef) {
  auto ref = ops::make_ref_backend();
  auto cpu = make(2);
  std::mt19937 rng(43);
  for (DType t : {DType::kI8, DType::kF8E4M3}) {
    for (const KvCase& c : cases()) {
      QuantBatch b(c, t, rng);
      QuantBatch::Cache rc = b.write(*ref), cc = b.write(*cpu);
      ASSERT_EQ(rc.k, cc.k) << dtype_name(t);
      ASSERT_EQ(rc.v, cc.v) << dtype_name(t);
      ASSERT_EQ(std::memcmp(rc.ks.data(), cc.ks.data(), 4 * rc.ks.size()), 0);
      ASSERT_EQ(std::memcmp(rc.vs.data(), cc.vs.data(), 4 * rc.vs.size()), 0);
      const std::vector<float> want = b.attend(*ref, rc), got = b.attend(*cpu, cc);
      double ss = 0;
      for (float w : want) ss += static_cast<double>(w) * w;
      const double rms = std::sqrt(ss / static_cast<double>(want.size()));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-5 * (std::fabs(want[i]) + rms))
            << dtype_name(t) << " hd " << c.hd << " element " << i;
    }
  }
}

PEREGRINE_INSTANTIATE_ISA_TESTS(CpuKvQuant);

}  // namespace
}  // namespace peregrine::test
