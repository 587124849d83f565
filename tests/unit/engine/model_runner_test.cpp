// The step builder and the model runner: logits rows per sequence (prompt rows, the last k+1 rows that verify
// drafted tokens), batch validation, warm-up, and truncating a sequence's KV tail. On pycoder-tiny (CPU): rows
// asked for several positions at once equal, bit for bit, the rows of the same positions computed one step at a
// time (CPU kernels keep rows independent of the batch). And the model's epilogue fusions on a backend that fuses
// only those (as CUDA does for codes) against the unfused ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/device_setup.h"
#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/step_builder.h"
#include "io/gguf_config.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "test_fixtures.h"

namespace peregrine::engine {
namespace {

Sequence make_seq(int num_tokens, int num_prompt, int computed, int block_size, int first_block) {
  Sequence s;
  for (int i = 0; i < num_tokens; ++i) s.token_ids.push_back(100 + i);
  s.num_prompt_tokens = num_prompt;
  s.num_computed_tokens = computed;
  for (int b = 0; b < (num_tokens + block_size - 1) / block_size; ++b) s.block_table.push_back(first_block + b);
  return s;
}

TEST(StepBuilder, LogitsRowsForPromptAndSampling) {
  const int bs = 4;
  // a: prefill of 6 prompt tokens, prompt rows and one sampling row (shared with the last prompt row).
  // b: decode verifying 3 drafted tokens (4 new tokens, 4 sampling rows).
  // c: a prompt chunk that does not sample, with prompt rows.
  // d: prompt rows asked while decoding past the prompt: none exist, the sampling row alone.
  Sequence a = make_seq(6, 6, 0, bs, 0), b = make_seq(10, 5, 6, bs, 2), c = make_seq(9, 9, 2, bs, 5),
           d = make_seq(8, 3, 7, bs, 8);
  SchedulerOutput out;
  out.seqs = {{&a, 6, true}, {&b, 4, true}, {&c, 3, false}, {&d, 1, true}};
  const LogitsRequest req[] = {{true, 1}, {false, 4}, {true, 1}, {true, 1}};
  ForwardBatch batch;
  LogitsRows rows;
  build_forward_batch(out, req, bs, batch, rows);
  EXPECT_EQ(batch.num_tokens(), 14);
  EXPECT_EQ(batch.query_start_loc, (std::vector<int32_t>{0, 6, 10, 13, 14}));
  EXPECT_EQ(batch.seq_lens, (std::vector<int32_t>{6, 10, 5, 8}));
  EXPECT_EQ(batch.max_blocks_per_seq, 3);
  // Rows: a's 6 prompt positions; b's last 4; c's 3 prompt positions; d's one.
  EXPECT_EQ(batch.logits_indices, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(rows.prompt_row_begin, (std::vector<int>{0, -1, 10, -1}));
  EXPECT_EQ(rows.prompt_row_count, (std::vector<int>{6, 0, 3, 0}));
  EXPECT_EQ(rows.sample_row, (std::vector<int>{5, 6, -1, 13}));
  EXPECT_EQ(rows.sample_row_count, (std::vector<int>{1, 4, 0, 1}));
  // Slots follow the block tables: b's position 6 is in its block 1 (block id 3), offset 2.
  EXPECT_EQ(batch.slot_mapping[6], 3 * bs + 2);

  // Sampling rows reaching back into the prompt rows share them; more rows than new tokens are clamped.
  Sequence e = make_seq(5, 5, 0, bs, 0);
  out.seqs = {{&e, 5, true}};
  const LogitsRequest both[] = {{true, 3}};
  build_forward_batch(out, both, bs, batch, rows);
  EXPECT_EQ(batch.logits_indices, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(rows.sample_row[0], 2);
  EXPECT_EQ(rows.sample_row_count[0], 3);
  const LogitsRequest many[] = {{false, 9}};
  build_forward_batch(out, many, bs, batch, rows);
  EXPECT_EQ(rows.sample_row_count[0], 5);
  EXPECT_EQ(batch.logits_indices.size(), 5u);

  // Warm-up batches write no KV.
  build_forward_batch(out, {}, bs, batch, rows, /*write_kv=*/false);
  for (int32_t s : batch.slot_mapping) EXPECT_EQ(s, -1);
  EXPECT_EQ(batch.logits_indices, (std::vector<int32_t>{4}));
}

TEST(KvCacheManagerTruncate, ReleasesTailBlocksAndKeepsCachedOnes) {
  KvCacheManager kv(8, 4, true);
  Sequence s;
  s.token_ids = {1, 2, 3, 4, 5, 6};
  s.num_prompt_tokens = 6;
  ASSERT_TRUE(kv.allocate_slots(s, 6, {}));
  s.num_computed_tokens = 6;
  kv.cache_full_blocks(s);  // block 0 (tokens 1..4) is cached
  // Six drafted tokens with KV (positions 6..11), then four of them rejected.
  for (int t = 7; t <= 12; ++t) s.token_ids.push_back(t);
  ASSERT_TRUE(kv.allocate_slots(s, 6, {}));
  s.num_computed_tokens = 12;
  EXPECT_EQ(s.block_table.size(), 3u);
  const int free_before = kv.pool().num_free();
  kv.truncate(s, 8);
  EXPECT_EQ(s.num_tokens(), 8);
  EXPECT_EQ(s.num_computed_tokens, 8);
  EXPECT_EQ(s.block_table.size(), 2u);
  EXPECT_EQ(kv.pool().num_free(), free_before + 1);
  // Below the prompt, or into a cached block: refused.
  EXPECT_THROW(kv.truncate(s, 5), Error);
  s.num_prompt_tokens = 2;
  EXPECT_THROW(kv.truncate(s, 3), Error);
  kv.free(s);
}

class RunnerOnModel : public ::testing::Test {
 protected:
  void SetUp() override {
    auto shared = testing::shared_dir();
    dir_ = shared ? *shared / "models" / "pycoder-tiny" : testing::source_dir() / "models" / "pycoder-tiny";
    if (!std::filesystem::exists(dir_ / "config.json")) GTEST_SKIP() << dir_ << " absent";
    const io::ModelConfig config = io::load_model_config(dir_);
    const DeviceChoice choice = resolve_device("cpu", "auto", config.torch_dtype);
    auto backend = create_backend(choice, 0);
    model::ModelOptions mo;
    mo.activation_dtype = choice.activation_dtype;
    mo.max_num_tokens = 256;
    mo.max_logits_rows = 8;  // fewer than some steps ask for: later chunks are computed eagerly
    auto model = model::load_model(dir_, *backend, mo);
    RunnerOptions ro;
    ro.max_num_seqs = 8;
    ro.max_num_batched_tokens = 256;
    ro.max_model_len = 512;
    ro.block_size = 16;
    ro.kv_dtype = choice.kv_dtype;
    runner_ = std::make_unique<ModelRunner>(std::move(backend), std::move(model), ro);
    runner_->allocate_kv_cache(64);
    vocab_ = runner_->vocab_size();
  }
  // A runner of its own on the CPU (8 sequences, 256 tokens a step, 512 positions, a 64-block cache), with the
  // options tweak sets; device and wrap (a backend around the device's) for runners on other backends.
  using Wrap = std::function<std::unique_ptr<ops::Backend>(std::unique_ptr<ops::Backend>)>;
  std::unique_ptr<ModelRunner> make_runner(int max_logits_rows, const std::function<void(RunnerOptions&)>& tweak,
                                           const std::string& device = "cpu", const Wrap& wrap = nullptr) const {
    const io::ModelConfig config = io::load_model_config(dir_);
    auto backend = create_backend(resolve_device(device, "auto", config.torch_dtype), 0);
    if (wrap) backend = wrap(std::move(backend));
    model::ModelOptions mo;
    mo.max_num_tokens = 256;
    mo.max_logits_rows = max_logits_rows;
    auto model = model::load_model(dir_, *backend, mo);
    RunnerOptions ro;
    ro.max_num_seqs = 8;
    ro.max_num_batched_tokens = 256;
    ro.max_model_len = 512;
    tweak(ro);
    auto r = std::make_unique<ModelRunner>(std::move(backend), std::move(model), ro);
    r->allocate_kv_cache(64);
    return r;
  }
  std::filesystem::path dir_;
  std::unique_ptr<ModelRunner> runner_;
  int vocab_ = 0;
};

TEST_F(RunnerOnModel, SeveralRowsPerSequenceEqualOneStepAtATime) {
  // A 40-token prompt computed whole, asking for its last 5 rows (as a verify step of 4 drafts would).
  Sequence whole = make_seq(40, 36, 0, 16, 0);
  for (int i = 0; i < 40; ++i) whole.token_ids[static_cast<size_t>(i)] = 300 + 7 * i;
  SchedulerOutput out;
  out.seqs = {{&whole, 40, true}};
  const LogitsRequest five[] = {{false, 5}};
  LogitsRows rows;
  std::vector<float> together;
  runner_->prepare(out, five, rows);
  runner_->execute(together);
  ASSERT_EQ(rows.sample_row_count[0], 5);
  ASSERT_EQ(together.size(), static_cast<size_t>(5 * vocab_));

  // The same tokens in other blocks: positions 0..35 as a prefill, then one decode step per token.
  Sequence steps = whole;
  steps.block_table = {10, 11, 12};
  steps.num_computed_tokens = 0;
  out.seqs = {{&steps, 36, true}};
  std::vector<float> one;
  runner_->prepare(out, {}, rows);
  runner_->execute(one);
  ASSERT_EQ(one.size(), static_cast<size_t>(vocab_));
  EXPECT_EQ(std::memcmp(one.data(), together.data(), sizeof(float) * vocab_), 0) << "row of position 35";
  for (int p = 36; p < 40; ++p) {
    steps.num_computed_tokens = p;
    out.seqs = {{&steps, 1, true}};
    runner_->prepare(out, {}, rows);
    runner_->execute(one);
    EXPECT_EQ(std::memcmp(one.data(), together.data() + static_cast<size_t>(p - 35) * vocab_, sizeof(float) * vocab_), 0)
        << "row of position " << p;
  }

  // Prompt rows for every position (more than one logits chunk) agree with the rows above too.
  Sequence prompt = make_seq(40, 40, 0, 16, 20);
  prompt.token_ids = whole.token_ids;
  out.seqs = {{&prompt, 40, true}};
  const LogitsRequest all[] = {{true, 1}};
  std::vector<float> every;
  runner_->prepare(out, all, rows);
  runner_->execute(every);
  ASSERT_EQ(rows.prompt_row_count[0], 40);
  ASSERT_EQ(rows.sample_row[0], 39);
  EXPECT_EQ(std::memcmp(every.data() + static_cast<size_t>(35) * vocab_, together.data(), sizeof(float) * 5 * vocab_), 0);
}

TEST_F(RunnerOnModel, PaddedVerifyLayoutGivesTheSameRows) {
  // Three sequences verifying 4, 2 and 0 drafts; the padded layout (what verify graphs replay) and row-exact pieces
  // (what the CUDA backend asks for: short sequences cut into pieces of few rows within one key granule, plus
  // empty ones) must give the same logits, bit for bit, as the plain one.
  struct Mode {
    bool pad;
    ops::Backend::RowExactLayout pieces;
  };
  const Mode modes[] = {{false, {}}, {true, {}}, {false, {2, 4}}, {true, {2, 4}}, {false, {1, 0}}, {true, {3, 0}}};
  auto make = [&](const Mode& m) {
    return make_runner(64, [&](RunnerOptions& ro) {
      ro.pad_verify_steps = m.pad;
      ro.row_exact_override = m.pieces;
    });
  };
  std::vector<float> plain_logits;
  for (const Mode& mode : modes) {
    SCOPED_TRACE(::testing::Message() << "pad " << mode.pad << ", pieces of " << mode.pieces.max_rows << " rows, granule "
                                    << mode.pieces.key_granule);
    std::vector<float> mode_logits;
    auto runner = make(mode);
    std::vector<Sequence> seqs;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back(make_seq(60, 30 + 5 * i, 0, 16, i * 4));  // blocks for 60 positions, 30 + 5i tokens
      seqs.back().token_ids.resize(static_cast<size_t>(30 + 5 * i));
    }
    LogitsRows rows;
    std::vector<float> logits;
    for (auto& q : seqs) {  // prefill each context but its last token
      SchedulerOutput out;
      out.seqs = {{&q, q.num_tokens() - 1, false}};
      runner->prepare(out, {}, rows);
      runner->execute(logits);
      q.num_computed_tokens = q.num_tokens() - 1;
    }
    SchedulerOutput out;
    std::vector<LogitsRequest> req;
    const int drafts[] = {4, 2, 0};
    for (int i = 0; i < 3; ++i) {
      seqs[static_cast<size_t>(i)].draft_tokens.assign(static_cast<size_t>(drafts[i]), 77 + i);
      for (int j = 0; j < drafts[i]; ++j) seqs[static_cast<size_t>(i)].draft_parents.push_back(j - 1);
      out.seqs.push_back({&seqs[static_cast<size_t>(i)], 1 + drafts[i], true, drafts[i]});
      req.push_back({false, 1 + drafts[i]});
    }
    runner->prepare(out, req, rows);
    runner->execute(mode_logits);
    if (plain_logits.empty()) {
      plain_logits = mode_logits;
      ASSERT_EQ(plain_logits.size(), static_cast<size_t>(9 * vocab_));
      continue;
    }
    ASSERT_EQ(mode_logits.size(), plain_logits.size());
    for (int r = 0; r < 9; ++r) {
      EXPECT_EQ(std::memcmp(plain_logits.data() + static_cast<size_t>(r) * vocab_, mode_logits.data() + static_cast<size_t>(r) * vocab_,
                            sizeof(float) * vocab_), 0) << "row " << r;
    }
  }
}

TEST_F(RunnerOnModel, TreeVerifyAsKeyTailPiecesGivesTheSameRows) {
  // Two sequences verifying token trees and one a chain: laid out as pieces with key tails (how backends without
  // tree_parents verify trees) the logits must equal, bit for bit, those of tree attention.
  auto make = [&](ops::Backend::RowExactLayout pieces) {
    return make_runner(64, [&](RunnerOptions& ro) { ro.row_exact_override = pieces; });
  };
  const std::vector<std::vector<int32_t>> parents = {{-1, 0, 0, 1, 1, 2, 4}, {-1, 0, 1, 2}, {-1, -1, 1, 1, 0}};
  std::vector<float> want;
  for (const ops::Backend::RowExactLayout& mode : {ops::Backend::RowExactLayout{}, ops::Backend::RowExactLayout{2, 4}}) {
    auto runner = make(mode);
    std::vector<Sequence> seqs;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back(make_seq(60, 30 + 7 * i, 0, 16, i * 4));
      seqs.back().token_ids.resize(static_cast<size_t>(30 + 7 * i));
    }
    LogitsRows rows;
    std::vector<float> logits;
    for (auto& q : seqs) {
      SchedulerOutput out;
      out.seqs = {{&q, q.num_tokens() - 1, false}};
      runner->prepare(out, {}, rows);
      runner->execute(logits);
      q.num_computed_tokens = q.num_tokens() - 1;
    }
    SchedulerOutput out;
    std::vector<LogitsRequest> req;
    int total = 0;
    for (int i = 0; i < 3; ++i) {
      Sequence& q = seqs[static_cast<size_t>(i)];
      const auto& par = parents[static_cast<size_t>(i)];
      for (size_t d = 0; d < par.size(); ++d) {
        q.draft_tokens.push_back(static_cast<int32_t>(40 + 3 * d + i));
        q.draft_parents.push_back(par[d]);
      }
      const int k = static_cast<int>(par.size());
      out.seqs.push_back({&q, 1 + k, true, k});
      req.push_back({false, 1 + k});
      total += 1 + k;
    }
    runner->prepare(out, req, rows);
    runner->execute(logits);
    ASSERT_EQ(logits.size(), static_cast<size_t>(total) * vocab_);
    if (want.empty()) {
      ASSERT_FALSE(runner->batch().tree_parents.empty());
      want = logits;
      continue;
    }
    for (int r = 0; r < total; ++r)
      EXPECT_EQ(std::memcmp(want.data() + static_cast<size_t>(r) * vocab_, logits.data() + static_cast<size_t>(r) * vocab_,
                            sizeof(float) * vocab_), 0) << "row " << r;
  }
}

TEST_F(RunnerOnModel, DeferredRowsComputedLaterHaveTheStepsBits) {
  // Lazy logits rows (host backends): a step whose verify rows are deferred, then computed a few at a time, in any
  // order, repeated, more at once than one logits chunk holds, gives every row the bits of the step that computed
  // them all. Rows not deferred (a prompt's logprob rows, a plain decode) come with the step.
  // 4 logits rows per chunk: compute_rows takes several chunks for some calls below.
  auto make = [&](bool lazy) { return make_runner(4, [&](RunnerOptions& ro) { ro.lazy_logits = lazy; }); };
  auto run = [&](ModelRunner& runner, const std::vector<uint8_t>* deferred, std::vector<float>& logits, LogitsRows& rows) {
    std::vector<Sequence> seqs;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back(make_seq(60, 30 + 5 * i, 0, 16, i * 4));
      seqs.back().token_ids.resize(static_cast<size_t>(30 + 5 * i));
    }
    std::vector<float> scratch;
    for (size_t i = 0; i < seqs.size(); ++i) {  // prefill each context but its last token (sequence 1: 3 tokens)
      Sequence& q = seqs[i];
      const int left = i == 1 ? 3 : 1;
      SchedulerOutput out;
      out.seqs = {{&q, q.num_tokens() - left, false}};
      runner.prepare(out, {}, rows);
      runner.execute(scratch);
      q.num_computed_tokens = q.num_tokens() - left;
    }
    // Sequence 0 verifies 6 drafts, 1 computes its last 3 prompt tokens with prompt logprobs, 2 verifies 3 drafts.
    SchedulerOutput out;
    std::vector<LogitsRequest> req;
    for (int i = 0; i < 3; ++i) {
      Sequence& q = seqs[static_cast<size_t>(i)];
      const int drafts = i == 0 ? 6 : i == 2 ? 3 : 0;
      for (int j = 0; j < drafts; ++j) {
        q.draft_tokens.push_back(60 + 11 * j + i);
        q.draft_parents.push_back(j - 1);
      }
      out.seqs.push_back({&q, q.num_tokens() - q.num_computed_tokens + drafts, true, drafts});
      req.push_back({i == 1, 1 + drafts});
    }
    runner.prepare(out, req, rows);
    runner.execute(logits, nullptr, deferred);
  };
  auto eager = make(false);
  std::vector<float> want;
  LogitsRows rows;
  run(*eager, nullptr, want, rows);
  const int total = rows.num_rows;
  ASSERT_EQ(total, 7 + 3 + 4);
  ASSERT_EQ(want.size(), static_cast<size_t>(total) * vocab_);
  EXPECT_FALSE(eager->deferred_rows());

  auto lazy = make(true);
  ASSERT_TRUE(lazy->lazy_logits());
  // Defer all but the first two rows of each verifying sequence.
  std::vector<uint8_t> deferred(static_cast<size_t>(total), 0);
  std::vector<int32_t> later;
  for (int i : {0, 2}) {
    for (int r = 2; r < rows.sample_row_count[static_cast<size_t>(i)]; ++r) {
      deferred[static_cast<size_t>(rows.sample_row[static_cast<size_t>(i)] + r)] = 1;
      later.push_back(rows.sample_row[static_cast<size_t>(i)] + r);
    }
  }
  ASSERT_EQ(later.size(), 5u + 2u);
  std::vector<float> got;
  LogitsRows lazy_rows;
  run(*lazy, &deferred, got, lazy_rows);
  ASSERT_TRUE(lazy->deferred_rows());
  ASSERT_EQ(got.size(), want.size());
  auto same = [&](int r) {
    return std::memcmp(want.data() + static_cast<size_t>(r) * vocab_, got.data() + static_cast<size_t>(r) * vocab_,
                       sizeof(float) * vocab_) == 0;
  };
  for (int r = 0; r < total; ++r) {
    if (!deferred[static_cast<size_t>(r)]) {
      EXPECT_TRUE(same(r)) << "row " << r << " (computed with the step)";
    }
  }
  // One row, then the rest backwards with a repeat (two chunks of 4).
  lazy->compute_rows(std::vector<int32_t>{later[2]}, got);
  EXPECT_TRUE(same(later[2]));
  std::vector<int32_t> rest(later.rbegin(), later.rend());
  rest.push_back(later[2]);
  lazy->compute_rows(rest, got);
  for (int r = 0; r < total; ++r) EXPECT_TRUE(same(r)) << "row " << r;
  EXPECT_THROW(lazy->compute_rows(std::vector<int32_t>{total}, got), Error);

  // Nothing deferred (or no lazy runner): every row with the step, and compute_rows has nothing to work on.
  std::vector<uint8_t> none(static_cast<size_t>(total), 0);
  run(*lazy, &none, got, lazy_rows);
  EXPECT_FALSE(lazy->deferred_rows());
  EXPECT_EQ(got, want);
  EXPECT_THROW(lazy->compute_rows(std::vector<int32_t>{0}, got), Error);
  run(*eager, &deferred, got, rows);
  EXPECT_FALSE(eager->deferred_rows());
  EXPECT_EQ(got, want);
}

TEST_F(RunnerOnModel, MalformedBatchesAreRefusedAndWarmUpRuns) {
  ForwardBatch b;
  b.token_ids = {1, 2};
  b.positions = {0, 1};
  b.slot_mapping = {0, 1};
  b.query_start_loc = {0, 2};
  b.seq_lens = {2};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.logits_indices = {1};
  std::vector<float> logits;
  runner_->execute(b, logits);
  EXPECT_EQ(logits.size(), static_cast<size_t>(vocab_));
  auto expect_bad = [&](ForwardBatch bad, const char* what) {
    try {
      runner_->execute(bad, logits);
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
    }
  };
  ForwardBatch x = b;
  x.token_ids[0] = vocab_;
  expect_bad(x, "token id out of the vocabulary");
  x = b;
  x.block_tables = {64};
  expect_bad(x, "block out of range");
  x = b;
  x.slot_mapping = {0, 64 * 16};
  expect_bad(x, "slot out of range");
  x = b;
  x.logits_indices = {2};
  expect_bad(x, "logits row out of range");
  x = b;
  x.query_start_loc = {0, 1};
  expect_bad(x, "query_start_loc");
  runner_->warm_up();
  EXPECT_EQ(runner_->num_graphs(), 0);  // the CPU backend has no graphs
}

// A compact LM head (model::Model::use_logits_subset, the drafters' reduced vocabulary): column j of its logits is
// the full vocabulary's logit of the token in row j, after rows are rewritten in place too; the model's own LM head
// is untouched. On every backend here (ref, CPU; CUDA where a GPU is visible) for a dense head, and for quantized
// heads cut by rows: GGUF blocks (the CPU re-packs the compact rows' groups in its packed layout) and W4A16 codes
// with their scale and zero rows; where the backend keeps a head only in its own packed layout (the CPU's int8-
// activation W4A16 blocks, CUDA's GGUF layout) use_logits_subset refuses with kUnsupported.
void check_logits_subset(const std::filesystem::path& model, const char* device, const std::string& quantization) {
  SCOPED_TRACE(model.filename().string() + " on " + device + (quantization.empty() ? "" : " as " + quantization));
  const io::ModelConfig config = io::load_model_config_any(model);
  const DeviceChoice choice = resolve_device(device, "auto", config.torch_dtype);
  auto backend = create_backend(choice, 0);
  model::ModelOptions mo;
  mo.activation_dtype = choice.activation_dtype;
  mo.max_num_tokens = 32;
  mo.max_logits_rows = 4;
  mo.quantization = quantization;  // a scheme: random weights of the model's shape in it (every matrix, the head too)
  mo.random_weights = !quantization.empty();
  mo.random_seed = 7;
  auto load = [&] {
    return quantization.empty() ? model::load_model(model, *backend, mo)
                                : model::make_random_model(config, *backend, mo);
  };
  RunnerOptions ro;
  ro.max_num_seqs = 2;
  ro.max_num_batched_tokens = 32;
  ro.max_model_len = 64;
  ro.kv_dtype = choice.kv_dtype;
  ro.use_graphs = false;
  auto full_model = load();
  auto sub_model = load();
  EXPECT_THROW(sub_model->set_logits_tokens(std::vector<int32_t>{1}, 0), Error) << "no compact head yet";
  constexpr int kRows = 64;
  try {
    sub_model->use_logits_subset(kRows);
  } catch (const Error& e) {
    const bool refused = std::string(device) == "cpu" && !quantization.empty();
    EXPECT_TRUE(refused && e.code() == ErrorCode::kUnsupported) << e.message();
    return;
  }
  EXPECT_EQ(sub_model->logits_width(), kRows);
  std::vector<int32_t> ids(kRows);
  for (int j = 0; j < kRows; ++j) ids[static_cast<size_t>(j)] = (j * 499 + 7) % static_cast<int32_t>(config.vocab_size);
  sub_model->set_logits_tokens(ids, 0);
  ids[10] = static_cast<int32_t>(config.vocab_size) - 1;
  ids[11] = 2;
  ids[40] = 5;
  sub_model->set_logits_tokens(std::span(ids).subspan(10, 2), 10);  // rows rewritten in place (one packed group)
  sub_model->set_logits_tokens(std::span(ids).subspan(40, 1), 40);  // and in another group
  EXPECT_THROW(sub_model->set_logits_tokens(std::vector<int32_t>{static_cast<int32_t>(config.vocab_size)}, 0), Error);
  EXPECT_THROW(sub_model->set_logits_tokens(std::vector<int32_t>{1, 2}, kRows - 1), Error);
  ModelRunner full(nullptr, std::move(full_model), ro), sub(nullptr, std::move(sub_model), ro);
  ASSERT_EQ(sub.logits_width(), kRows);
  ASSERT_EQ(full.logits_width(), full.vocab_size());
  full.allocate_kv_cache(4);
  sub.allocate_kv_cache(4);
  Sequence a = make_seq(12, 12, 0, 16, 0);
  SchedulerOutput out;
  out.seqs = {{&a, 12, true}};
  LogitsRows rows;
  std::vector<float> lf, ls;
  full.prepare(out, {}, rows);
  full.execute(lf);
  sub.prepare(out, {}, rows);
  sub.execute(ls);
  ASSERT_EQ(ls.size(), static_cast<size_t>(kRows));
  const bool host = std::string(device) != "cuda";
  for (int j = 0; j < kRows; ++j) {
    const float want = lf[static_cast<size_t>(ids[static_cast<size_t>(j)])];
    if (host)
      EXPECT_EQ(ls[static_cast<size_t>(j)], want) << "column " << j;
    else
      EXPECT_NEAR(ls[static_cast<size_t>(j)], want, 1e-3 * (1 + std::abs(want))) << "column " << j;
  }
}

TEST(RunnerLogitsSubset, ColumnsAreTheFullLogitsOfTheirTokens) {
  auto shared = testing::shared_dir();
  const std::filesystem::path dir = shared ? *shared / "models" / "pycoder-tiny" : testing::source_dir() / "models" / "pycoder-tiny";
  if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP() << dir << " absent";
  for (const char* device : {"ref", "cpu", "cuda"}) {
    if (std::string(device) == "cuda" && !ops::cuda_available()) continue;
    check_logits_subset(dir, device, "");
    check_logits_subset(dir, device, "w4a16");  // random codes, group 128, pycoder-tiny's shape
  }
}

// GGUF heads: Q8_0 and Q4_0 (the file's output.weight in those types) and the Q4_K mix's head, as llama.cpp wrote
// them (../shared/models/gguf).
TEST(RunnerLogitsSubset, GgufHeadsAreCutByRows) {
  auto shared = testing::shared_dir();
  if (!shared || !std::filesystem::exists(*shared / "models" / "gguf")) GTEST_SKIP() << "no ../shared/models/gguf";
  for (const char* file : {"pycoder-tiny-q8_0.gguf", "pycoder-tiny-q4_0.gguf", "pycoder-tiny-q4_k.gguf"})
    for (const char* device : {"ref", "cpu"}) check_logits_subset(*shared / "models" / "gguf" / file, device, "");
}

// A backend that runs every op on another one and fuses the epilogues alone (the residual add, SiLU·mul on normed
// x: ops.h MatmulFusion without a norm), as CUDA does for 4- and 8-bit codes. The ref backend computes the fused
// groups by ops.h's definitions.
// Forwards every op to another backend; the tests' wrappers below override what they watch or change.
class Forwarding : public ops::Backend {
 public:
  explicit Forwarding(std::unique_ptr<ops::Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "wrapped(" + inner_->name() + ")"; }
  ops::DeviceKind kind() const override { return inner_->kind(); }
  bool is_host() const override { return inner_->is_host(); }
  bool supports_activation(DType act) const override { return inner_->supports_activation(act); }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void deallocate(void* p) override { inner_->deallocate(p); }
  void copy_from_host(void* d, const void* s, size_t n) override { inner_->copy_from_host(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { inner_->copy_to_host(d, s, n); }
  void copy_on_device(void* d, const void* s, size_t n) override { inner_->copy_on_device(d, s, n); }
  void fill_zero(void* d, size_t n) override { inner_->fill_zero(d, n); }
  void synchronize() override { inner_->synchronize(); }
  size_t free_memory() const override { return inner_->free_memory(); }
  void embedding(const ops::EmbeddingParams& p) override { inner_->embedding(p); }
  void matmul(const ops::MatmulParams& p) override { inner_->matmul(p); }
  void rms_norm(const ops::RmsNormParams& p) override { inner_->rms_norm(p); }
  void rope(const ops::RopeParams& p) override { inner_->rope(p); }
  void silu_mul(const ops::SiluMulParams& p) override { inner_->silu_mul(p); }
  void kv_write(const ops::KvWriteParams& p) override { inner_->kv_write(p); }
  void attention(const ops::AttentionParams& p) override { inner_->attention(p); }
  void gather_rows(const ops::GatherRowsParams& p) override { inner_->gather_rows(p); }

 protected:
  std::unique_ptr<ops::Backend> inner_;
};

class EpilogueFusing final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  bool fuses_matmuls(std::span<const ops::MatmulParams>, const ops::MatmulFusion& f) const override {
    ++asked_;
    return f.norm_weight.empty();
  }
  void matmuls_fused(std::span<const ops::MatmulParams> ps, const ops::MatmulFusion& f) override {
    ++fused_;
    inner_->matmuls_fused(ps, f);
  }
  mutable int asked_ = 0;
  int fused_ = 0;
};

// The model's epilogue plan (LlamaModel::epilogue_plan): on a backend that fuses the residual adds and SiLU·mul but
// not the norms, a prefill and decode steps give the logits of the unfused ops (the fused ops keep their roundings)
// and the same greedy tokens; the fused ops are used.
TEST_F(RunnerOnModel, EpilogueFusionsMatchTheUnfusedOps) {
  EpilogueFusing* fusing = nullptr;
  auto plain = make_runner(4, [](RunnerOptions&) {}, "ref");
  auto fused = make_runner(4, [](RunnerOptions&) {}, "ref", [&](std::unique_ptr<ops::Backend> inner) {
    auto wrapped = std::make_unique<EpilogueFusing>(std::move(inner));
    fusing = wrapped.get();
    return std::unique_ptr<ops::Backend>(std::move(wrapped));
  });
  // A 20-token prompt, then three decode steps of the greedy tokens.
  auto run = [&](ModelRunner& runner) {
    Sequence seq = make_seq(24, 20, 0, 16, 0);
    seq.token_ids.resize(20);
    for (int i = 0; i < 20; ++i) seq.token_ids[static_cast<size_t>(i)] = 300 + 11 * i;
    std::vector<std::vector<float>> rows;
    LogitsRows lr;
    for (int step = 0; step < 4; ++step) {
      SchedulerOutput out;
      const int n = step == 0 ? 20 : 1;
      out.seqs = {{&seq, n, true}};
      std::vector<float> logits;
      runner.prepare(out, {}, lr);
      runner.execute(logits);
      EXPECT_EQ(logits.size(), static_cast<size_t>(vocab_));
      seq.num_computed_tokens += n;
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      seq.token_ids.push_back(next);
      rows.push_back(std::move(logits));
    }
    return std::make_pair(rows, seq.token_ids);
  };
  const auto [want, want_ids] = run(*plain);
  const auto [got, got_ids] = run(*fused);
  EXPECT_EQ(got_ids, want_ids);
  ASSERT_EQ(got.size(), want.size());
  for (size_t step = 0; step < want.size(); ++step) {
    float worst = 0.0f;
    for (size_t i = 0; i < want[step].size(); ++i) worst = std::max(worst, std::fabs(got[step][i] - want[step][i]));
    EXPECT_LT(worst, 1e-4f) << "step " << step;
  }
  ASSERT_NE(fusing, nullptr);
  EXPECT_GT(fusing->asked_, 0);
  // Each layer's o_proj, gate/up and down fused in every forward (4 steps, and any warm-up).
  const int64_t layers = io::load_model_config(dir_).num_hidden_layers;
  EXPECT_GE(fusing->fused_, 4 * 3 * layers);
  EXPECT_EQ(fusing->fused_ % (3 * layers), 0);
}

// Records what the model tells the ops before its matmuls (ops.h RmsNormParams / SiluMulParams `next`): every told
// op's next must be exactly the matmul call that follows it (the same x, weights and outputs), with nothing between.
class NextRecording final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  void embedding(const ops::EmbeddingParams& p) override { between(), inner_->embedding(p); }
  void rope(const ops::RopeParams& p) override { between(), inner_->rope(p); }
  void kv_write(const ops::KvWriteParams& p) override { between(), inner_->kv_write(p); }
  void attention(const ops::AttentionParams& p) override { between(), inner_->attention(p); }
  void gather_rows(const ops::GatherRowsParams& p) override { between(), inner_->gather_rows(p); }
  void rms_norm(const ops::RmsNormParams& p) override { told(p.next, p.out), inner_->rms_norm(p); }
  void silu_mul(const ops::SiluMulParams& p) override { told(p.next, p.out), inner_->silu_mul(p); }
  void matmul(const ops::MatmulParams& p) override { called({&p, 1}), inner_->matmul(p); }
  void matmuls(std::span<const ops::MatmulParams> ps) override { called(ps), inner_->matmuls(ps); }
  int told_ = 0, matched_ = 0, violations_ = 0;

 private:
  void between() {
    if (!pending_.empty()) ++violations_, pending_.clear();
  }
  void told(std::span<const ops::MatmulParams> next, const TensorView& out) {
    between();
    if (next.empty()) return;
    ++told_;
    for (const ops::MatmulParams& m : next)
      if (m.x.data != out.data) ++violations_;
    pending_.assign(next.begin(), next.end());
  }
  void called(std::span<const ops::MatmulParams> ps) {
    if (pending_.empty()) return;
    bool same = ps.size() == pending_.size();
    for (size_t i = 0; same && i < ps.size(); ++i)
      same = ps[i].x.data == pending_[i].x.data && ps[i].w.data == pending_[i].w.data &&
             ps[i].out.data == pending_[i].out.data;
    same ? ++matched_ : ++violations_;
    pending_.clear();
  }
  std::vector<ops::MatmulParams> pending_;
};

// The model tells each layer's input norm of q/k/v, its post-attention norm of gate/up and SiLU·mul of down_proj,
// and each time calls exactly those matmuls next (where the CUDA backend makes their W8A8 codes in the op before).
TEST_F(RunnerOnModel, NormsAndSiluTellTheMatmulsThatFollow) {
  NextRecording* rec = nullptr;
  auto runner = make_runner(4, [](RunnerOptions&) {}, "ref", [&](std::unique_ptr<ops::Backend> inner) {
    auto wrapped = std::make_unique<NextRecording>(std::move(inner));
    rec = wrapped.get();
    return std::unique_ptr<ops::Backend>(std::move(wrapped));
  });
  ASSERT_NE(rec, nullptr);
  const int told_before = rec->told_;
  Sequence seq = make_seq(24, 20, 0, 16, 0);
  seq.token_ids.resize(20);
  for (int i = 0; i < 20; ++i) seq.token_ids[static_cast<size_t>(i)] = 300 + 11 * i;
  LogitsRows lr;
  for (int step = 0; step < 3; ++step) {
    SchedulerOutput out;
    const int n = step == 0 ? 20 : 1;
    out.seqs = {{&seq, n, true}};
    std::vector<float> logits;
    runner->prepare(out, {}, lr);
    runner->execute(logits);
    seq.num_computed_tokens += n;
    seq.token_ids.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  const int layers = static_cast<int>(io::load_model_config(dir_).num_hidden_layers);
  EXPECT_EQ(rec->violations_, 0);
  EXPECT_EQ(rec->matched_, rec->told_);
  EXPECT_EQ(rec->told_ - told_before, 3 * 3 * layers);  // three steps, three told ops a layer
}

}  // namespace
}  // namespace peregrine::engine
