// CUDA vs ref paged attention: ragged batches mixing decodes, chunks over a cached prefix and whole
// prefills; block tables with holes (unused blocks and padding poisoned with NaN, -1 entries); GQA ratios
// 1, 3, 4, 8; head_dim 64/128/256; bf16, f16, f32 and mixed dtypes; sliding windows; contexts 1 to 32K;
// and determinism: a sequence's output is bitwise identical alone and inside any batch. int8 / fp8 e4m3 caches
// (codes and per-(slot, head) scales written by the ref backend's kv_write) take the same cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "backend/cuda/attention.cuh"
#include "cuda_test_util.h"

namespace peregrine::cuda_test {
namespace {

struct Seq {
  int q_len, seq_len;
};

struct AttnCase {
  std::vector<Seq> seqs;
  int hq = 8, hkv = 2, hd = 128, block_size = 16;
  DType act = DType::kBF16, cache = DType::kBF16;
  int window = 0;
  // Values: 0 normal(0, 1); 1 (8-bit caches) one element of every head row large (K ±1, V 100), the rest small
  // positive values whose e4m3 codes are subnormal, checked element by element (atol_scale).
  int values = 0;
  double atol_scale = -1;
};

// Host-side inputs of one attention call; tables use a shuffled block pool with unused (NaN) blocks.
struct AttnInputs {
  HostTensor q, k_cache, v_cache, qsl, lens, tables;
  HostTensor k_scales, v_scales;  // quantized caches only (else empty)
  int max_query_len = 0, max_seq_len = 0;
};

AttnInputs make_inputs(const AttnCase& c, std::mt19937& rng) {
  AttnInputs in;
  const int num_seqs = static_cast<int>(c.seqs.size());
  int total_blocks = 0, max_blocks = 1, tokens = 0;
  for (const Seq& s : c.seqs) {
    const int nb = (s.seq_len + c.block_size - 1) / c.block_size;
    total_blocks += nb;
    max_blocks = std::max(max_blocks, nb + 1);  // one padding entry per row at least
    tokens += s.q_len;
    in.max_query_len = std::max(in.max_query_len, s.q_len);
    in.max_seq_len = std::max(in.max_seq_len, s.seq_len);
  }
  const int pool = total_blocks + total_blocks / 4 + 3;  // holes: blocks no sequence owns
  std::vector<int32_t> perm(pool);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  in.q = random_tensor(c.act, {tokens, c.hq, c.hd}, rng);
  // Quantized caches: values go to f32 rows first and are quantized into the (poisoned) cache at the end.
  const bool quantized = c.cache == DType::kI8 || c.cache == DType::kF8E4M3;
  std::vector<int32_t> used_slots;
  std::vector<float> k_rows, v_rows;
  in.k_cache = HostTensor(c.cache, {pool, c.block_size, c.hkv, c.hd});
  in.v_cache = HostTensor(c.cache, {pool, c.block_size, c.hkv, c.hd});
  in.k_cache.poison();
  in.v_cache.poison();
  in.tables = HostTensor(DType::kI32, {num_seqs, max_blocks});
  std::vector<int32_t> qsl(num_seqs + 1, 0), lens(num_seqs);
  std::normal_distribution<double> dist(0.0, 1.0);
  const int64_t row = static_cast<int64_t>(c.hkv) * c.hd;
  int next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const Seq& sq = c.seqs[s];
    qsl[s + 1] = qsl[s] + sq.q_len;
    lens[s] = sq.seq_len;
    const int nb = (sq.seq_len + c.block_size - 1) / c.block_size;
    // With a window, blocks wholly before the first visible key may be freed: mark them -1.
    const int first_pos = sq.seq_len - sq.q_len;
    const int first_key = c.window > 0 ? std::max(0, first_pos - c.window + 1) : 0;
    for (int b = 0; b < max_blocks; ++b) {
      int32_t id = -1;
      if (b < nb && (b + 1) * c.block_size > first_key) id = perm[next];
      if (b < nb) ++next;
      in.tables.set(static_cast<int64_t>(s) * max_blocks + b, id);
      if (id < 0) continue;
      for (int off = 0; off < c.block_size; ++off) {
        if (b * c.block_size + off >= sq.seq_len) break;  // the tail of the last block stays NaN
        const int64_t base = (static_cast<int64_t>(id) * c.block_size + off) * row;
        if (quantized) used_slots.push_back(id * c.block_size + off);
        for (int64_t i = 0; i < row; ++i) {
          double kx = dist(rng), vx = dist(rng);
          if (c.values == 1) {  // e4m3 codes below 2^-6 are subnormal: |x| < amax / 448 / 64
            const bool big = i % c.hd == 0;
            kx = big ? (kx < 0 ? -1.0 : 1.0) : 2e-6 + 3e-5 * std::fabs(kx) / 3.0;
            vx = big ? 100.0 : 2e-4 + 3e-3 * std::fabs(vx) / 3.0;  // all positive: no cancellation
          }
          if (quantized) {
            k_rows.push_back(static_cast<float>(kx));
            v_rows.push_back(static_cast<float>(vx));
          } else {
            in.k_cache.set(base + i, kx);
            in.v_cache.set(base + i, vx);
          }
        }
      }
    }
  }
  in.qsl = int_tensor(qsl);
  in.lens = int_tensor(lens);
  if (quantized) {
    in.k_scales = HostTensor(DType::kF32, {pool, c.block_size, c.hkv});
    in.v_scales = HostTensor(DType::kF32, {pool, c.block_size, c.hkv});
    in.k_scales.poison();
    in.v_scales.poison();
    const int64_t n = static_cast<int64_t>(used_slots.size());
    HostTensor k(DType::kF32, {n, c.hkv, c.hd}), v(DType::kF32, {n, c.hkv, c.hd});
    std::memcpy(k.bytes.data(), k_rows.data(), k_rows.size() * 4);
    std::memcpy(v.bytes.data(), v_rows.data(), v_rows.size() * 4);
    HostTensor slots = int_tensor(used_slots);
    ref().kv_write({k.view(), v.view(), slots.view(), in.k_cache.view(), in.v_cache.view(), in.k_scales.view(),
                    in.v_scales.view()});
  }
  return in;
}

HostTensor run_ref(const AttnCase& c, const AttnInputs& in) {
  HostTensor out(c.act, in.q.shape);
  ops::AttentionParams p{in.q.view(), in.k_cache.view(), in.v_cache.view(), out.view(), in.qsl.view(),
                         in.lens.view(), in.tables.view(), 1.0f / std::sqrt(static_cast<float>(c.hd)), c.window,
                         in.max_query_len, in.max_seq_len, {}, {}, {}, {}, {}};
  p.k_scales = in.k_scales.view();
  p.v_scales = in.v_scales.view();
  ref().attention(p);
  return out;
}

HostTensor run_gpu(const AttnCase& c, const AttnInputs& in) {
  DeviceTensor q(in.q), kc(in.k_cache), vc(in.v_cache), qsl(in.qsl), lens(in.lens), tables(in.tables);
  DeviceTensor out(HostTensor(c.act, in.q.shape));
  out.poison();
  ops::AttentionParams p{q.view(), kc.view(), vc.view(), out.view(), qsl.view(), lens.view(), tables.view(),
                         1.0f / std::sqrt(static_cast<float>(c.hd)), c.window, in.max_query_len, in.max_seq_len, {},
                         {}, {}, {}, {}};
  std::optional<DeviceTensor> ks, vs;
  if (!in.k_scales.bytes.empty()) {
    ks.emplace(in.k_scales);
    vs.emplace(in.v_scales);
    p.k_scales = ks->view();
    p.v_scales = vs->view();
  }
  gpu().attention(p);
  return out.to_host();
}

void check_case(const AttnCase& c, uint32_t seed, const char* what) {
  std::mt19937 rng(seed);
  AttnInputs in = make_inputs(c, rng);
  HostTensor want = run_ref(c, in);
  HostTensor got = run_gpu(c, in);
  EXPECT_TRUE(all_close(got, want, -1, c.atol_scale)) << what << ": " << dtype_name(c.act) << "/" << dtype_name(c.cache) << " hq "
                                    << c.hq << " hkv " << c.hkv << " hd " << c.hd << " window " << c.window;
}

const std::vector<Seq> kMixed = {{1, 1},   {1, 37},   {1, 1000}, {5, 300}, {4, 4},
                                 {64, 64}, {100, 531}, {3, 2000}, {17, 17}, {1, 4097}};

TEST(CudaAttention, MixedBatchBf16Gqa4) {
  AttnCase c;
  c.seqs = kMixed;
  check_case(c, 21, "mixed");
}

TEST(CudaAttention, GqaRatiosAndHeadDims) {
  struct Shape { int hq, hkv, hd; };
  for (Shape s : {Shape{4, 4, 64}, Shape{16, 2, 128}, Shape{6, 2, 64}, Shape{4, 1, 256}, Shape{8, 8, 128},
                  Shape{32, 2, 64}}) {
    AttnCase c;
    c.seqs = kMixed;
    c.hq = s.hq;
    c.hkv = s.hkv;
    c.hd = s.hd;
    check_case(c, 22 + s.hq + s.hd, "gqa/head_dim");
  }
}

TEST(CudaAttention, OtherDtypesAndBlockSizes) {
  AttnCase c;
  c.seqs = kMixed;
  c.act = c.cache = DType::kF16;
  check_case(c, 31, "f16");
  c.act = c.cache = DType::kF32;
  check_case(c, 32, "f32 (generic)");
  c.act = DType::kBF16;
  c.cache = DType::kF32;
  check_case(c, 33, "bf16 act, f32 cache (generic)");
  c.act = c.cache = DType::kBF16;
  c.block_size = 32;
  check_case(c, 34, "block 32");
  c.block_size = 24;  // not a power of two: the division path of the paged loads
  check_case(c, 37, "block 24");
  c.block_size = 1;
  c.seqs = {{1, 70}, {20, 90}};
  check_case(c, 35, "block 1");
  c.block_size = 16;
  c.hd = 96;  // not a tensor-core head_dim: generic
  check_case(c, 36, "head_dim 96");
}

TEST(CudaAttention, SlidingWindow) {
  for (int window : {1, 64, 200}) {
    AttnCase c;
    c.seqs = {{1, 500}, {50, 300}, {200, 200}, {2, 70}, {1, 3000}, {4, 129}};
    c.window = window;
    check_case(c, 40 + window, "window");
  }
}

TEST(CudaAttention, LongContextsTo32K) {
  AttnCase c;  // few heads: the ref is O(context) per row and head
  c.hq = 4;
  c.hkv = 1;
  c.seqs = {{1, 32768}, {16, 32768}, {4, 32768}, {1, 8191}, {1, 16385}};
  check_case(c, 51, "32K");
  c.seqs.clear();
  for (int len = 1; len <= 32768; len *= 2) c.seqs.push_back({1, len});
  c.seqs.push_back({1, 12345});
  check_case(c, 52, "contexts 1..32K");
  c.hq = 8;  // GQA 8
  c.seqs = {{1, 20000}, {2, 9000}, {33, 5000}};
  check_case(c, 53, "GQA 8 long");
}

// Sequence s of a batch run alone on the GPU: its q, length and block-table row sliced out of the batch's inputs
// (the same caches). True when its output has the batch output's bits.
bool same_alone(const AttnCase& big, const AttnInputs& in, const HostTensor& batch_out, int s) {
  const int64_t row_bytes = static_cast<int64_t>(big.hq) * big.hd * 2;
  const int32_t* qsl = reinterpret_cast<const int32_t*>(in.qsl.bytes.data());
  const Seq& sq = big.seqs[static_cast<size_t>(s)];
  AttnCase one = big;
  one.seqs = {sq};
  AttnInputs alone = in;
  alone.q = HostTensor(big.act, {sq.q_len, big.hq, big.hd});
  std::memcpy(alone.q.bytes.data(), in.q.bytes.data() + qsl[s] * row_bytes, sq.q_len * row_bytes);
  alone.qsl = int_tensor({0, sq.q_len});
  alone.lens = int_tensor({sq.seq_len});
  const int64_t mb = in.tables.shape[1];
  alone.tables = HostTensor(DType::kI32, {1, mb});
  std::memcpy(alone.tables.bytes.data(), in.tables.bytes.data() + s * mb * 4, mb * 4);
  alone.max_query_len = sq.q_len;
  alone.max_seq_len = sq.seq_len;
  HostTensor one_out = run_gpu(one, alone);
  return std::memcmp(one_out.bytes.data(), batch_out.bytes.data() + qsl[s] * row_bytes, sq.q_len * row_bytes) == 0;
}

// The same sequences alone and inside bigger, differently ordered batches must give identical bits.
TEST(CudaAttention, ResultDoesNotDependOnBatch) {
  for (DType cache : {DType::kBF16, DType::kI8, DType::kF8E4M3})
  for (int hd : {128, 64}) {
    AttnCase target;
    target.hd = hd;
    target.cache = cache;
    target.seqs = {{1, 5000}, {70, 700}, {3, 900}};
    AttnCase big = target;
    big.seqs = {{9, 9}, {1, 30000}, {1, 5000}, {300, 4000}, {70, 700}, {2, 2}, {3, 900}};
    std::mt19937 rng(61);
    AttnInputs in = make_inputs(big, rng);
    HostTensor batch_out = run_gpu(big, in);
    for (int s : {2, 4, 6}) {
      const Seq& sq = big.seqs[static_cast<size_t>(s)];
      EXPECT_TRUE(same_alone(big, in, batch_out, s))
          << "sequence " << s << " (q_len " << sq.q_len << ", len " << sq.seq_len << ", hd " << hd << ", cache "
          << dtype_name(cache) << ") differs alone vs in batch";
    }
  }
}

// The decode split's wave rule (decode_splits.h): with 8 KV heads, decodes past ~12.5K keys would fill more than one
// wave of CTAs under the first rule (64 splits x 8 heads) and take fewer, longer splits; their results still match
// the reference and have the same bits alone and in a batch (the rule never sees the batch).
TEST(CudaAttention, LongDecodesTakeSplitsThatFillWaves) {
  for (DType cache : {DType::kBF16, DType::kF8E4M3}) {
    AttnCase c;
    c.hq = 32;
    c.hkv = 8;
    c.cache = cache;
    if (cache == DType::kF8E4M3) c.hkv = 16, c.hq = 64;  // its four CTAs an SM: 16 heads to pass one wave
    c.seqs = {{1, 20000}, {2, 13000}, {1, 300}, {1, 33000}};
    check_case(c, 71, "long decodes, wave rule");
    std::mt19937 rng(72);
    AttnInputs in = make_inputs(c, rng);
    HostTensor batch_out = run_gpu(c, in);
    for (int s : {0, 1, 3}) {
      EXPECT_TRUE(same_alone(c, in, batch_out, s))
          << "sequence " << s << " (len " << c.seqs[static_cast<size_t>(s)].seq_len << ", cache " << dtype_name(cache)
          << ") differs alone vs in batch";
    }
  }
}

// The split combine with four outputs a thread (decode_combine_vec_mode(1); off by default until measured) gives the
// bits of one output a thread: decodes short and long (one split to 64), verify-sized rows (q_len 4: 16 rows a KV
// head), head dims 64 / 128 / 256, b16 and 8-bit caches.
TEST(CudaAttention, TheFourOutputCombineGivesTheSameBits) {
  struct Restore {
    ~Restore() { cuda::decode_combine_vec_mode(-1); }
  } restore;
  for (DType cache : {DType::kBF16, DType::kF8E4M3})
    for (int hd : {64, 128, 256}) {
      if (cache != DType::kBF16 && hd == 256) continue;
      AttnCase c;
      c.hd = hd;
      c.cache = cache;
      c.seqs = {{1, 5000}, {4, 3000}, {1, 33000}, {1, 700}, {2, 257}, {1, 100}};
      std::mt19937 rng(83);
      AttnInputs in = make_inputs(c, rng);
      cuda::decode_combine_vec_mode(0);
      const HostTensor one = run_gpu(c, in);
      cuda::decode_combine_vec_mode(1);
      const HostTensor four = run_gpu(c, in);
      EXPECT_TRUE(one.bytes == four.bytes) << "hd " << hd << ", cache " << dtype_name(cache);
    }
}

// Row-exact verification (the engine's layout for speculative decoding). Rows cut into pieces (sequences of their
// own over the same block-table row, block_table_index) and token-tree rows whose path is their key tail must
// (1) match the reference (tree_parents form) and (2) be bit-identical to decoding each row alone over the same
// keys at consecutive positions, which is what makes speculative output equal plain decoding.
TEST(CudaAttention, RowExactPiecesAndKeyTailsEqualTheirOwnDecodes) {
  for (DType dt : {DType::kBF16, DType::kF32, DType::kI8, DType::kF8E4M3}) {
    AttnCase c;
    c.act = c.cache = dt;
    if (dt == DType::kI8 || dt == DType::kF8E4M3) c.act = DType::kBF16;  // 8-bit caches under bf16
    c.hq = 12;
    c.hkv = 4;  // group 3: pieces of at most 5 rows
    c.hd = 64;
    c.seqs = {{10, 310}, {7, 1007}, {1, 51}, {12, 70}};
    std::mt19937 rng(99 + static_cast<int>(dt));
    AttnInputs in = make_inputs(c, rng);
    const int num_seqs = static_cast<int>(c.seqs.size());
    // Sequences 0 and 1 are random trees, 2 a decode, 3 a chain of 12 (cut at the 64-key tile boundary at 64).
    std::vector<int32_t> parents;
    for (int s = 0; s < num_seqs; ++s)
      for (int i = 0; i < c.seqs[static_cast<size_t>(s)].q_len; ++i)
        parents.push_back(i == 0 ? -1 : (s <= 1 ? static_cast<int32_t>(rng() % i) : i - 1));
    // Pieces: trees one row each with their path as key tail; the chain in pieces of <= 5 rows within one tile.
    std::vector<int32_t> pqsl{0}, plens, pindex, pfrom, poff, tails;
    std::vector<std::vector<int32_t>> row_path;  // per token row: its path's slots (root first)
    int row0 = 0;
    for (int s = 0; s < num_seqs; ++s) {
      const int q = c.seqs[static_cast<size_t>(s)].q_len, len = c.seqs[static_cast<size_t>(s)].seq_len, ctx = len - q;
      for (int i = 0; i < q; ++i) {
        std::vector<int32_t> path;
        for (int r = i; r >= 0; r = parents[static_cast<size_t>(row0 + r)]) path.push_back(ctx + r);
        std::reverse(path.begin(), path.end());
        row_path.push_back(path);
      }
      if (s <= 1) {
        for (int i = 0; i < q; ++i) {
          const auto& path = row_path[static_cast<size_t>(row0 + i)];
          pqsl.push_back(pqsl.back() + 1);
          plens.push_back(ctx + static_cast<int32_t>(path.size()));
          pindex.push_back(s);
          pfrom.push_back(ctx);
          poff.push_back(static_cast<int32_t>(tails.size()));
          tails.insert(tails.end(), path.begin(), path.end());
        }
      } else {
        for (int j = 0; j < q;) {
          int e = j + 1;
          while (e < q && e - j < 5 && (ctx + e) / 64 == (ctx + j) / 64) ++e;
          pqsl.push_back(pqsl.back() + (e - j));
          plens.push_back(ctx + e);
          pindex.push_back(s);
          pfrom.push_back(ctx + e);  // none
          poff.push_back(0);
          j = e;
        }
      }
      row0 += q;
    }
    const int n = static_cast<int>(plens.size());
    const int tokens = static_cast<int>(in.q.shape[0]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));

    // (1) against the reference's tree attention.
    HostTensor want(c.act, in.q.shape), tree = int_tensor(parents);
    ops::AttentionParams pr{in.q.view(), in.k_cache.view(), in.v_cache.view(), want.view(), in.qsl.view(),
                            in.lens.view(), in.tables.view(), scale, 0, in.max_query_len, in.max_seq_len,
                            tree.view(), {}, {}, {}, {}};
    pr.k_scales = in.k_scales.view();
    pr.v_scales = in.v_scales.view();
    ref().attention(pr);
    DeviceTensor q(in.q), kc(in.k_cache), vc(in.v_cache), tables(in.tables), dq(int_tensor(pqsl)),
        dl(int_tensor(plens)), di(int_tensor(pindex)), df(int_tensor(pfrom)), dof(int_tensor(poff)),
        dt_(int_tensor(tails));
    DeviceTensor out(HostTensor(c.act, in.q.shape));
    out.poison();
    ops::AttentionParams pg{q.view(), kc.view(), vc.view(), out.view(), dq.view(), dl.view(), tables.view(),
                            scale, 0, 5, in.max_seq_len, {}, di.view(), df.view(), dof.view(), dt_.view()};
    const bool quantized = !in.k_scales.bytes.empty();
    std::optional<DeviceTensor> dks, dvs;
    if (quantized) {
      dks.emplace(in.k_scales);
      dvs.emplace(in.v_scales);
      pg.k_scales = dks->view();
      pg.v_scales = dvs->view();
    }
    gpu().attention(pg);
    const HostTensor got = out.to_host();
    EXPECT_TRUE(all_close(got, want)) << "pieces and key tails vs the reference's trees, " << dtype_name(dt);

    // (2) each row alone: a decode over its path's KV copied to consecutive slots of a fresh block table.
    const int64_t kv_row = static_cast<int64_t>(c.hkv) * c.hd;
    const size_t slot_bytes = dtype_bytes(c.cache, static_cast<size_t>(kv_row));
    const size_t scale_bytes = static_cast<size_t>(c.hkv) * 4;  // quantized caches: a slot's K or V scales
    const size_t row_bytes = dtype_bytes(c.act, static_cast<size_t>(c.hq) * c.hd);
    const int max_blocks = static_cast<int>(in.tables.shape[1]);
    int mismatches = 0;
    row0 = 0;
    for (int s = 0; s < num_seqs; ++s) {
      const int q_len = c.seqs[static_cast<size_t>(s)].q_len;
      const int ctx = c.seqs[static_cast<size_t>(s)].seq_len - q_len;
      for (int i = 0; i < q_len; ++i) {
        const auto& path = row_path[static_cast<size_t>(row0 + i)];
        HostTensor k1 = in.k_cache, v1 = in.v_cache, ks1 = in.k_scales, vs1 = in.v_scales;
        auto slot_of = [&](int64_t j) {
          return static_cast<int64_t>(in.tables.get(static_cast<int64_t>(s) * max_blocks + j / c.block_size)) * c.block_size +
                 j % c.block_size;
        };
        for (size_t m = 0; m < path.size(); ++m) {  // the path moved to consecutive positions
          const int64_t from = slot_of(path[m]), to = slot_of(ctx + static_cast<int64_t>(m));
          std::memcpy(k1.bytes.data() + to * slot_bytes, in.k_cache.bytes.data() + from * slot_bytes, slot_bytes);
          std::memcpy(v1.bytes.data() + to * slot_bytes, in.v_cache.bytes.data() + from * slot_bytes, slot_bytes);
          if (quantized) {
            std::memcpy(ks1.bytes.data() + to * scale_bytes, in.k_scales.bytes.data() + from * scale_bytes, scale_bytes);
            std::memcpy(vs1.bytes.data() + to * scale_bytes, in.v_scales.bytes.data() + from * scale_bytes, scale_bytes);
          }
        }
        HostTensor q1(c.act, {1, c.hq, c.hd});
        std::memcpy(q1.bytes.data(), in.q.bytes.data() + static_cast<size_t>(row0 + i) * row_bytes, row_bytes);
        HostTensor t1(DType::kI32, {1, max_blocks});
        for (int b = 0; b < max_blocks; ++b) t1.set(b, in.tables.get(static_cast<int64_t>(s) * max_blocks + b));
        DeviceTensor dq1(q1), dk1(k1), dv1(v1), dt1(t1), dqsl(int_tensor({0, 1})),
            dlen(int_tensor({ctx + static_cast<int32_t>(path.size())}));
        DeviceTensor o1(HostTensor(c.act, {1, c.hq, c.hd}));
        ops::AttentionParams p1{dq1.view(), dk1.view(), dv1.view(), o1.view(), dqsl.view(), dlen.view(), dt1.view(),
                                scale, 0, 1, ctx + static_cast<int>(path.size()), {}, {}, {}, {}, {}};
        std::optional<DeviceTensor> dks1, dvs1;
        if (quantized) {
          dks1.emplace(ks1);
          dvs1.emplace(vs1);
          p1.k_scales = dks1->view();
          p1.v_scales = dvs1->view();
        }
        gpu().attention(p1);
        const HostTensor alone = o1.to_host();
        if (std::memcmp(alone.bytes.data(), got.bytes.data() + static_cast<size_t>(row0 + i) * row_bytes, row_bytes) != 0) {
          ++mismatches;
          ADD_FAILURE() << dtype_name(dt) << " sequence " << s << " row " << i << " (depth " << path.size() - 1
                        << ") differs from its own decode";
        }
      }
      row0 += q_len;
    }
    EXPECT_EQ(mismatches, 0) << "of " << tokens << " rows (" << n << " pieces)";
  }
}

// 8-bit caches on the tensor-core kernels (bf16 and f16 activations) and on the generic one (f32 activations):
// the reference dequantizes each code times its (slot, head) scale in f32.
TEST(CudaAttention, QuantizedCaches) {
  for (DType cache : {DType::kI8, DType::kF8E4M3}) {
    AttnCase c;
    c.seqs = kMixed;
    c.cache = cache;
    for (DType act : {DType::kBF16, DType::kF16, DType::kF32}) {
      c.act = act;
      check_case(c, 70 + static_cast<int>(act), "8-bit cache, mixed batch");
    }
    c.act = DType::kBF16;
    struct Shape { int hq, hkv, hd; };
    for (Shape s : {Shape{6, 2, 64}, Shape{4, 1, 256}, Shape{32, 4, 128}, Shape{8, 8, 128}}) {
      c.hq = s.hq;
      c.hkv = s.hkv;
      c.hd = s.hd;
      check_case(c, 80 + s.hq + s.hd, "8-bit cache, gqa/head_dim");
    }
    c.hq = 8;
    c.hkv = 2;
    c.hd = 128;
    c.block_size = 24;
    check_case(c, 90, "8-bit cache, block 24");
    c.block_size = 16;
    c.seqs = {{1, 500}, {50, 300}, {200, 200}, {2, 70}, {1, 3000}, {4, 129}};
    c.window = 64;
    check_case(c, 91, "8-bit cache, window 64");
    c.window = 0;
    c.hq = 4;
    c.hkv = 1;
    c.seqs = {{1, 32768}, {16, 32768}, {1, 8191}, {1, 12345}};
    check_case(c, 92, "8-bit cache, 32K");
    c.seqs = {{1, 300}, {40, 200}, {3, 1000}};
    c.values = 1;  // tiny codes (subnormal in e4m3) must keep their values: every element within rtol of its own
    c.atol_scale = 1e-7;
    for (DType act : {DType::kBF16, DType::kF16}) {
      c.act = act;
      check_case(c, 93, "8-bit cache, tiny values");
    }
  }
}

}  // namespace
}  // namespace peregrine::cuda_test
