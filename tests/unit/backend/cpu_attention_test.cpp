// CPU paged attention against the reference backend: ragged batches mixing prefill chunks over cached
// prefixes with decodes, GQA ratios 1/3/4/8, head_dim 48/64/128, f32/bf16/f16 caches, shuffled block tables
// with holes (unused slots hold NaN, so reading one fails the test), sliding windows; and determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "peregrine/error.h"
#include "unit/backend/op_test_util.h"

namespace peregrine::test {
namespace {

struct SeqSpec {
  int64_t prefix;  // tokens already cached before this step
  int64_t q_len;   // query rows this step
};

struct AttnCase {
  int64_t hq, hkv, hd, block_size;
  int window;
  DType cache_dtype;
  std::vector<SeqSpec> seqs;
};

// A paged batch: caches with random K/V at every used slot (NaN elsewhere), shuffled block tables.
struct PagedBatch {
  AttnCase c;
  int64_t tokens = 0, num_blocks = 0, max_blocks = 0;
  Buffer q, k_cache, v_cache, qsl, lens, tables;

  PagedBatch(const AttnCase& cs, std::mt19937& rng) : c(cs) {
    std::vector<int32_t> qsl_v{0}, lens_v;
    for (const SeqSpec& s : c.seqs) {
      qsl_v.push_back(qsl_v.back() + static_cast<int32_t>(s.q_len));
      lens_v.push_back(static_cast<int32_t>(s.prefix + s.q_len));
      max_blocks = std::max(max_blocks, (s.prefix + s.q_len + c.block_size - 1) / c.block_size + 1);
    }
    tokens = qsl_v.back();
    const int64_t num_seqs = static_cast<int64_t>(c.seqs.size());
    num_blocks = num_seqs * max_blocks * 2 + 3;  // holes: about half the pool is never used
    std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> table_v(static_cast<size_t>(num_seqs * max_blocks), -1);
    size_t next = 0;
    for (int64_t s = 0; s < num_seqs; ++s)
      for (int64_t b = 0; b < (lens_v[s] + c.block_size - 1) / c.block_size; ++b)
        table_v[s * max_blocks + b] = pool[next++];
    qsl = int_buffer(qsl_v);
    lens = int_buffer(lens_v);
    tables = int_buffer(table_v);
    const int64_t row = c.hkv * c.hd;
    k_cache = poisoned(c.cache_dtype, num_blocks * c.block_size * row);
    v_cache = poisoned(c.cache_dtype, num_blocks * c.block_size * row);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t s = 0; s < num_seqs; ++s)
      for (int64_t j = 0; j < lens_v[s]; ++j) {
        const int64_t slot = table_v[s * max_blocks + j / c.block_size] * c.block_size + j % c.block_size;
        for (int64_t e = 0; e < row; ++e) {
          k_cache.set(slot * row + e, dist(rng));
          v_cache.set(slot * row + e, 2.0f * dist(rng));
        }
      }
    q = random_buffer(DType::kF32, tokens * c.hq * c.hd, rng, -3, 3);
  }

  ops::AttentionParams params(Buffer& out) {
    ops::AttentionParams p;
    const int64_t num_seqs = static_cast<int64_t>(c.seqs.size());
    p.q = q.view({tokens, c.hq, c.hd});
    p.k_cache = k_cache.view({num_blocks, c.block_size, c.hkv, c.hd});
    p.v_cache = v_cache.view({num_blocks, c.block_size, c.hkv, c.hd});
    p.out = out.view({tokens, c.hq, c.hd});
    p.query_start_loc = qsl.view({num_seqs + 1});
    p.seq_lens = lens.view({num_seqs});
    p.block_tables = tables.view({num_seqs, max_blocks});
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    p.sliding_window = c.window;
    for (const SeqSpec& s : c.seqs) {
      p.max_query_len = std::max<int>(p.max_query_len, static_cast<int>(s.q_len));
      p.max_seq_len = std::max<int>(p.max_seq_len, static_cast<int>(s.prefix + s.q_len));
    }
    return p;
  }
};

class CpuAttention : public CpuIsaTest {};

const std::vector<SeqSpec> kRagged = {{0, 37}, {50, 13}, {100, 1}, {17, 1}, {0, 1}, {31, 16}};

TEST_P(CpuAttention, MatchesReferenceOnRaggedPagedBatches) {
  auto cpu = make(3);
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(123);
  std::vector<AttnCase> cases = {
      {8, 8, 64, 16, 0, DType::kF32, kRagged},     // MHA (ratio 1)
      {12, 4, 48, 16, 0, DType::kF32, kRagged},    // ratio 3, head_dim 48
      {32, 8, 64, 16, 0, DType::kBF16, kRagged},   // Llama-3.2-1B layout, bf16 cache
      {16, 2, 128, 16, 0, DType::kF16, kRagged},   // ratio 8, head_dim 128, f16 cache
      {8, 2, 64, 7, 0, DType::kF32, kRagged},      // odd block size
      {12, 4, 48, 16, 20, DType::kBF16, kRagged},  // sliding window
      {8, 1, 72, 5, 9, DType::kF32, kRagged},      // MQA, head_dim not a lane multiple, window < block
  };
  for (const AttnCase& c : cases) {
    PagedBatch batch(c, rng);
    Buffer got = poisoned(DType::kF32, batch.tokens * c.hq * c.hd);
    Buffer want = poisoned(DType::kF32, batch.tokens * c.hq * c.hd);
    cpu->attention(batch.params(got));
    ref->attention(batch.params(want));
    expect_close(got, want, 2e-5f,
                 "attention hq" + std::to_string(c.hq) + " hkv" + std::to_string(c.hkv) + " hd" + std::to_string(c.hd) +
                     " bs" + std::to_string(c.block_size) + " window" + std::to_string(c.window) + " " +
                     std::string(dtype_name(c.cache_dtype)));
  }
}

TEST_P(CpuAttention, LongDecodeContext) {
  auto cpu = make(2);
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(321);
  PagedBatch batch({32, 8, 64, 16, 0, DType::kBF16, {{1500, 1}, {700, 1}}}, rng);
  Buffer got = poisoned(DType::kF32, batch.tokens * 32 * 64), want = poisoned(DType::kF32, batch.tokens * 32 * 64);
  cpu->attention(batch.params(got));
  ref->attention(batch.params(want));
  expect_close(got, want, 2e-5f, "long decode");
}

// A query's bits depend neither on the other sequences of the batch, nor on how many rows its own sequence has
// this step (one prefill chunk vs one decode per row), nor on the thread count, nor on whether its keys were
// split over threads by segment (a lone long decode is; a chunk in a big batch is not).
TEST_P(CpuAttention, QueryResultIndependentOfBatchAndChunking) {
  std::mt19937 rng(77);
  for (int window : {0, 300}) {
    const int64_t hq = 12, hkv = 4, hd = 64, prefix = 600, chunk = 24;  // 600+ keys: three segments
    AttnCase c{hq, hkv, hd, 16, window, DType::kBF16, {{7, 30}, {prefix, chunk}, {90, 1}}};
    PagedBatch batch(c, rng);
    const int64_t row = hq * hd, first_row = 30;  // sequence 1's rows start after sequence 0's 30
    Buffer mixed = poisoned(DType::kF32, batch.tokens * row);
    make(2)->attention(batch.params(mixed));

    // Rows [begin, begin + count) of sequence 1, each as its own decode sequence (seq_len = prefix + i + 1)
    // sharing sequence 1's block table.
    auto as_decodes = [&](int64_t begin, int64_t count) {
      PagedBatch d = batch;
      d.c.seqs.clear();
      std::vector<int32_t> qsl{0}, lens, tables;
      for (int64_t i = begin; i < begin + count; ++i) {
        d.c.seqs.push_back({prefix + i, 1});
        qsl.push_back(static_cast<int32_t>(i - begin + 1));
        lens.push_back(static_cast<int32_t>(prefix + i + 1));
        tables.insert(tables.end(), batch.tables.i32() + batch.max_blocks, batch.tables.i32() + 2 * batch.max_blocks);
      }
      d.tokens = count;
      d.qsl = int_buffer(qsl);
      d.lens = int_buffer(lens);
      d.tables = int_buffer(tables);
      d.q = Buffer(DType::kF32, count * row);
      std::memcpy(d.q.data(), batch.q.f32() + (first_row + begin) * row, static_cast<size_t>(count * row) * 4);
      return d;
    };
    for (int threads : {1, 3}) {
      PagedBatch decodes = as_decodes(0, chunk);
      Buffer all = poisoned(DType::kF32, chunk * row);
      make(threads)->attention(decodes.params(all));
      EXPECT_EQ(std::memcmp(all.data(), mixed.f32() + first_row * row, static_cast<size_t>(chunk * row) * 4), 0)
          << "window " << window << " threads " << threads;
      for (int64_t i : {int64_t{0}, int64_t{13}, chunk - 1}) {  // alone: split over threads by segment
        PagedBatch one = as_decodes(i, 1);
        Buffer out = poisoned(DType::kF32, row);
        make(threads)->attention(one.params(out));
        EXPECT_EQ(std::memcmp(out.data(), mixed.f32() + (first_row + i) * row, static_cast<size_t>(row) * 4), 0)
            << "lone decode of row " << i << ", window " << window << " threads " << threads;
      }
    }
  }
}

// Token trees (speculative verification): each row attends to the context and its own path, matching the
// reference; and a tree row's bits equal those of a decode of exactly its path laid out as a chain (what the
// engine gets after accepting the path and moving its KV), over short and long (several segments) contexts.
TEST_P(CpuAttention, TreeRowsMatchReferenceAndTheirPathDecodedAsAChain) {
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(4242);
  for (DType cache : {DType::kF32, DType::kBF16}) {
    AttnCase c{12, 4, 64, 16, 0, cache, {{100, 9}, {0, 5}, {600, 12}, {3, 1}}};
    PagedBatch batch(c, rng);
    std::vector<int32_t> parents;
    for (const SeqSpec& sp : c.seqs) {
      for (int64_t i = 0; i < sp.q_len; ++i) {
        // The second sequence is a chain (a prefill chunk); the others random trees.
        parents.push_back(i == 0 ? -1 : (&sp == &c.seqs[1] ? static_cast<int32_t>(i - 1) : static_cast<int32_t>(rng() % i)));
      }
    }
    Buffer tree = int_buffer(parents);
    const int64_t row = c.hq * c.hd;
    Buffer got = poisoned(DType::kF32, batch.tokens * row), want = poisoned(DType::kF32, batch.tokens * row);
    ops::AttentionParams pg = batch.params(got), pw = batch.params(want);
    pg.tree_parents = tree.view({batch.tokens});
    pw.tree_parents = tree.view({batch.tokens});
    make(3)->attention(pg);
    ref->attention(pw);
    expect_close(got, want, 2e-5f, std::string("tree attention ") + std::string(dtype_name(cache)));

    // Rows of the third sequence as chain decodes of their paths.
    const int64_t first_row = 9 + 5, ctx = 600, kv_row = c.hkv * c.hd;
    const size_t slot_bytes = dtype_bytes(cache, static_cast<size_t>(kv_row));
    for (int64_t i = 0; i < 12; ++i) {
      std::vector<int64_t> path;
      for (int64_t r = i; r >= 0; r = parents[static_cast<size_t>(first_row + r)]) path.push_back(r);
      std::reverse(path.begin(), path.end());
      PagedBatch d = batch;
      const int32_t* table = batch.tables.i32() + 2 * batch.max_blocks;
      auto slot_of = [&](int64_t j) { return static_cast<int64_t>(table[j / c.block_size]) * c.block_size + j % c.block_size; };
      for (size_t m = 0; m < path.size(); ++m) {  // the path's KV moved to consecutive positions
        const int64_t from = slot_of(ctx + path[m]), to = slot_of(ctx + static_cast<int64_t>(m));
        std::memcpy(static_cast<char*>(d.k_cache.data()) + to * slot_bytes, static_cast<char*>(batch.k_cache.data()) + from * slot_bytes, slot_bytes);
        std::memcpy(static_cast<char*>(d.v_cache.data()) + to * slot_bytes, static_cast<char*>(batch.v_cache.data()) + from * slot_bytes, slot_bytes);
      }
      const int64_t len = ctx + static_cast<int64_t>(path.size());
      d.c.seqs = {{len - 1, 1}};
      d.tokens = 1;
      d.qsl = int_buffer({0, 1});
      d.lens = int_buffer({static_cast<int32_t>(len)});
      d.tables = int_buffer(std::vector<int32_t>(table, table + batch.max_blocks));
      d.q = Buffer(DType::kF32, row);
      std::memcpy(d.q.data(), batch.q.f32() + (first_row + i) * row, static_cast<size_t>(row) * 4);
      for (int threads : {1, 3}) {
        Buffer out = poisoned(DType::kF32, row);
        make(threads)->attention(d.params(out));
        EXPECT_EQ(std::memcmp(out.data(), got.f32() + (first_row + i) * row, static_cast<size_t>(row) * 4), 0)
            << "tree row " << i << " (depth " << path.size() - 1 << ") vs its path as a chain, threads " << threads;
      }
    }
  }
}

// Trees for backends without tree_parents: each row a sequence of its own (block_table_index: its sequence's
// block-table row) whose keys past the context are remapped to its path (key tails). Bit-identical to the
// tree_parents form on the CPU, and equal to it on the reference.
TEST_P(CpuAttention, TreeRowsAsKeyTailPiecesMatchTreeParents) {
  auto ref = ops::make_ref_backend();
  std::mt19937 rng(777);
  for (DType cache : {DType::kF32, DType::kBF16}) {
    AttnCase c{8, 2, 64, 16, 0, cache, {{70, 7}, {0, 4}, {300, 10}}};
    PagedBatch batch(c, rng);
    std::vector<int32_t> parents;
    for (const SeqSpec& sp : c.seqs)
      for (int64_t i = 0; i < sp.q_len; ++i)
        parents.push_back(i == 0 ? -1 : (&sp == &c.seqs[1] ? static_cast<int32_t>(i - 1) : static_cast<int32_t>(rng() % i)));
    // Pieces: one per row; tail from the context's end over the whole path (root first).
    std::vector<int32_t> pqsl{0}, plens, pindex, pfrom, poff, tails;
    int32_t row0 = 0;
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const int32_t ctx = static_cast<int32_t>(c.seqs[s].prefix), q = static_cast<int32_t>(c.seqs[s].q_len);
      for (int32_t i = 0; i < q; ++i) {
        std::vector<int32_t> path;
        for (int32_t r = i; r >= 0; r = parents[static_cast<size_t>(row0 + r)]) path.push_back(ctx + r);
        std::reverse(path.begin(), path.end());
        pqsl.push_back(pqsl.back() + 1);
        plens.push_back(ctx + static_cast<int32_t>(path.size()));
        pindex.push_back(static_cast<int32_t>(s));
        pfrom.push_back(ctx);
        poff.push_back(static_cast<int32_t>(tails.size()));
        tails.insert(tails.end(), path.begin(), path.end());
      }
      row0 += q;
    }
    const int64_t n = static_cast<int64_t>(plens.size());
    Buffer tree = int_buffer(parents), bq = int_buffer(pqsl), bl = int_buffer(plens), bi = int_buffer(pindex),
           bf = int_buffer(pfrom), bo = int_buffer(poff), bt = int_buffer(tails);
    const int64_t row = c.hq * c.hd;
    for (bool on_ref : {false, true}) {
      Buffer want = poisoned(DType::kF32, batch.tokens * row), got = poisoned(DType::kF32, batch.tokens * row);
      ops::AttentionParams pw = batch.params(want), pg = batch.params(got);
      pw.tree_parents = tree.view({batch.tokens});
      pg.query_start_loc = bq.view({n + 1});
      pg.seq_lens = bl.view({n});
      pg.block_table_index = bi.view({n});
      pg.key_tail_from = bf.view({n});
      pg.key_tail_offset = bo.view({n});
      pg.key_tail = bt.view({static_cast<int64_t>(tails.size())});
      pg.max_query_len = 1;
      auto backend = on_ref ? ops::make_ref_backend() : make(3);
      backend->attention(pw);
      backend->attention(pg);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(batch.tokens * row) * 4), 0)
          << (on_ref ? "ref " : "cpu ") << dtype_name(cache);
    }
  }
}

// Bad key tails and table indices are refused with the op's message, never read.
TEST_P(CpuAttention, BadKeyTailsAreRefused) {
  std::mt19937 rng(5);
  AttnCase c{4, 2, 64, 16, 0, DType::kF32, {{20, 1}, {5, 2}}};
  PagedBatch batch(c, rng);
  Buffer out = poisoned(DType::kF32, batch.tokens * c.hq * c.hd);
  auto expect_refused = [&](const ops::AttentionParams& p, const char* what) {
    try {
      make(1)->attention(p);
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
    }
  };
  Buffer from = int_buffer({10, 6}), off = int_buffer({0, 0}), tail = int_buffer(std::vector<int32_t>(11, 3));
  ops::AttentionParams p = batch.params(out);
  p.key_tail_from = from.view({2});
  p.key_tail_offset = off.view({2});
  p.key_tail = tail.view({11});
  expect_refused(p, "a tail on a sequence of two rows");
  Buffer from1 = int_buffer({10, 7000}), tail_short = int_buffer({1, 2});
  p.key_tail_from = from1.view({2});
  p.key_tail = tail_short.view({2});
  expect_refused(p, "a tail running past key_tail");
  Buffer index = int_buffer({0, 5});
  ops::AttentionParams q = batch.params(out);
  q.block_table_index = index.view({2});
  expect_refused(q, "a block-table row out of range");
}

PEREGRINE_INSTANTIATE_ISA_TESTS(CpuAttention);

}  // namespace
}  // namespace peregrine::test
