// Test doubles for the engine: FakeModel implements model::Model over the runner's paged KV cache, storing each
// slot's (token, position); a row's logits are a hash of the whole context read back through the block
// table, so any bookkeeping error (wrong slot, wrong block, stale prefix block) changes the output or throws.
// FakeCodec maps token ids to single characters. expected_greedy() computes the reference continuation.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "core/status.h"
#include "engine/model_runner.h"
#include "engine/text_codec.h"
#include "model/model.h"

namespace peregrine::engine::testing {

constexpr int kFakeVocab = 64;
constexpr int32_t kFakeBos = 0;
constexpr int32_t kFakeEos = 1;

// "prefix" + i without GCC 12's -Wrestrict false positive on operator+(const char*, string&&).
inline std::string make_id(std::string prefix, int i) {
  prefix += std::to_string(i);
  return prefix;
}

inline uint64_t fake_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Logits of the next token after `context` (deterministic; eos is likely only after long contexts).
inline void fake_logits(const std::vector<int32_t>& context, float* out) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = fake_mix(h ^ static_cast<uint64_t>(t));
  const int preferred = 2 + static_cast<int>(h % (kFakeVocab - 2));
  for (int v = 0; v < kFakeVocab; ++v) {
    out[v] = static_cast<float>(fake_mix(h + static_cast<uint64_t>(v)) % 1000) / 1000.0f;
  }
  out[preferred] += 3.0f;
  out[kFakeBos] = -5.0f;
  out[kFakeEos] = context.size() > 60 ? 10.0f : -2.0f;
}

// Greedy continuation as the engine should produce it (stops at eos or after max_tokens).
inline std::vector<int32_t> expected_greedy(std::vector<int32_t> context, int max_tokens, bool stop_at_eos = true) {
  std::vector<int32_t> out;
  std::vector<float> logits(kFakeVocab);
  for (int i = 0; i < max_tokens; ++i) {
    fake_logits(context, logits.data());
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    context.push_back(t);
    if (stop_at_eos && t == kFakeEos) break;
  }
  return out;
}

// A model whose "KV cache" is the runner's real KvCache (one layer, one KV head, head_dim 2, f32): each token
// writes (token + 1, position + 1) into its slot of the K pool (0 means never written), and a row's logits hash
// the whole context read back through the block table, so any slot, block or copy error changes the output or
// throws. Runs on the ref backend (host memory), so the runner's inputs are readable directly.
class FakeModel : public model::Model {
 public:
  explicit FakeModel(ops::Backend& backend, int max_tokens = 4096) : backend_(backend), max_tokens_(max_tokens) {
    config_.vocab_size = kFakeVocab;
    config_.max_position_embeddings = 4096;
    config_.architecture_name = "FakeForCausalLM";
    config_.num_hidden_layers = 1;
    config_.num_key_value_heads = 1;
    config_.head_dim = 2;
  }
  const io::ModelConfig& config() const override { return config_; }
  ops::Backend& backend() const override { return backend_; }
  size_t weight_bytes() const override { return 0; }
  int max_num_tokens() const override { return max_tokens_; }
  int max_logits_rows() const override { return max_tokens_; }

  void forward(const model::StepInputs& in, std::span<const model::KvLayer> kv) override {
    ++num_forwards;
    const int t_count = static_cast<int>(in.token_ids.dim(0));
    const int s_count = static_cast<int>(in.seq_lens.dim(0));
    max_batch_tokens = std::max(max_batch_tokens, t_count);
    const int32_t* ids = in.token_ids.as<const int32_t>();
    const int32_t* pos = in.positions.as<const int32_t>();
    const int32_t* slots = in.slot_mapping.as<const int32_t>();
    const int32_t* qsl = in.query_start_loc.as<const int32_t>();
    const int32_t* lens = in.seq_lens.as<const int32_t>();
    const int32_t* tables = in.block_tables.as<const int32_t>();
    const int64_t stride = in.block_tables.dim(1);
    float* cells = kv[0].k.as<float>();
    const int bs = static_cast<int>(kv[0].k.dim(1));
    const int64_t num_slots = kv[0].k.dim(0) * bs;
    for (int t = 0; t < t_count; ++t) {
      if (slots[t] < 0) continue;
      PEREGRINE_CHECK(slots[t] < num_slots, "slot out of range");
      cells[2 * slots[t]] = static_cast<float>(ids[t] + 1);
      cells[2 * slots[t] + 1] = static_cast<float>(pos[t] + 1);
    }
    row_logits_.assign(static_cast<size_t>(t_count) * kFakeVocab, 0.0f);
    const int32_t* parents = in.tree_parents.empty() ? nullptr : in.tree_parents.as<const int32_t>();
    const int32_t* table_index = in.block_table_index.empty() ? nullptr : in.block_table_index.as<const int32_t>();
    const int32_t* tail_from = in.key_tail_from.empty() ? nullptr : in.key_tail_from.as<const int32_t>();
    for (int s = 0; s < s_count; ++s) {
      const int ctx = lens[s] - (qsl[s + 1] - qsl[s]);
      const int64_t trow = table_index ? table_index[s] : s;
      for (int row = qsl[s]; row < qsl[s + 1]; ++row) {
        if (slots[row] < 0) continue;  // padding (a graph-shaped step): writes nothing, its output is discarded
        const int p = pos[row];
        PEREGRINE_CHECK(p < lens[s], "position beyond seq_len");
        // The sequence slot holding each position this row sees: the context, then (a tree) its own path.
        std::vector<int> slot_of(static_cast<size_t>(p) + 1);
        for (int j = 0; j <= p; ++j) slot_of[static_cast<size_t>(j)] = j;
        if (parents) {
          int j = p;
          for (int r = row - qsl[s]; r >= 0; r = parents[qsl[s] + r]) slot_of[static_cast<size_t>(j--)] = ctx + r;
          PEREGRINE_CHECK(j == ctx - 1, "a tree row's depth does not match its position");
        }
        if (tail_from && tail_from[s] < lens[s]) {  // keys remapped (a tree row laid out as a chain)
          const int32_t* tail = in.key_tail.as<const int32_t>() + in.key_tail_offset.as<const int32_t>()[s];
          for (int j = tail_from[s]; j <= p; ++j) slot_of[static_cast<size_t>(j)] = tail[j - tail_from[s]];
        }
        std::vector<int32_t> context;
        for (int j = 0; j <= p; ++j) {
          const int64_t sj = slot_of[static_cast<size_t>(j)];
          const int64_t slot = static_cast<int64_t>(tables[trow * stride + sj / bs]) * bs + sj % bs;
          const float* cell = cells + 2 * slot;
          PEREGRINE_CHECK(static_cast<int>(cell[1]) == j + 1, "KV slot of position " + std::to_string(j) +
                                                                  " holds position " + std::to_string(cell[1] - 1));
          context.push_back(static_cast<int32_t>(cell[0]) - 1);
        }
        fake_logits(context, row_logits_.data() + static_cast<size_t>(row) * kFakeVocab);
      }
    }
  }

  void compute_logits(const TensorView& rows, const TensorView& out) override {
    const int32_t* idx = rows.as<const int32_t>();
    float* dst = out.as<float>();
    for (int64_t r = 0; r < rows.dim(0); ++r) {
      std::copy_n(row_logits_.data() + static_cast<size_t>(idx[r]) * kFakeVocab, kFakeVocab, dst + r * kFakeVocab);
    }
  }

  int num_forwards = 0;
  int max_batch_tokens = 0;

 private:
  ops::Backend& backend_;
  int max_tokens_;
  io::ModelConfig config_;
  std::vector<float> row_logits_;  // [T, vocab] of the last forward
};

// A runner over a FakeModel on its own ref backend, with a KV cache of num_blocks blocks.
inline std::unique_ptr<ModelRunner> make_fake_runner(int num_blocks, int block_size, int max_num_seqs,
                                                     int max_num_batched_tokens, int max_model_len,
                                                     FakeModel** model_out = nullptr, bool pad_verify_steps = false,
                                                     ops::Backend::RowExactLayout row_exact = {}) {
  auto backend = ops::make_ref_backend();
  auto model = std::make_unique<FakeModel>(*backend, std::max(max_num_batched_tokens, 1));
  if (model_out) *model_out = model.get();
  RunnerOptions ro;
  ro.max_num_seqs = max_num_seqs;
  ro.max_num_batched_tokens = max_num_batched_tokens;
  ro.max_model_len = max_model_len;
  ro.block_size = block_size;
  ro.kv_dtype = DType::kF32;
  ro.pad_verify_steps = pad_verify_steps;
  ro.row_exact_override = row_exact;
  auto runner = std::make_unique<ModelRunner>(std::move(backend), std::move(model), ro);
  runner->allocate_kv_cache(num_blocks);
  return runner;
}

// Token v >= 2 is one character of kAlphabet; 0 and 1 are the special <s> and </s>.
inline const std::string& fake_alphabet() {
  static const std::string a = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.";
  return a;
}

class FakeDetokenizer : public IncrementalDetokenizer {
 public:
  explicit FakeDetokenizer(bool skip_special) : skip_special_(skip_special) {}
  std::string push(int32_t token) override {
    if (token == kFakeBos) return skip_special_ ? "" : "<s>";
    if (token == kFakeEos) return skip_special_ ? "" : "</s>";
    return std::string(1, fake_alphabet()[static_cast<size_t>(token - 2)]);
  }

 private:
  bool skip_special_;
};

class FakeCodec : public TextCodec {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(kFakeBos);
    for (char c : text) {
      const size_t pos = fake_alphabet().find(c);
      if (pos == std::string::npos) throw Error(ErrorCode::kInvalidArgument, "FakeCodec cannot encode this text");
      ids.push_back(static_cast<int32_t>(pos) + 2);
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    FakeDetokenizer d(skip_special_tokens);
    std::string s;
    for (int32_t id : ids) s += d.push(id);
    return s;
  }
  std::string token_text(int32_t id) const override { return FakeDetokenizer(false).push(id); }
  std::unique_ptr<IncrementalDetokenizer> make_detokenizer(std::span<const int32_t>, bool skip_special_tokens,
                                                           bool) const override {
    return std::make_unique<FakeDetokenizer>(skip_special_tokens);
  }
  bool has_chat_template() const override { return false; }
  std::string apply_chat_template(const nlohmann::ordered_json&, const ChatTemplateOptions&) const override {
    throw Error(ErrorCode::kUnsupported, "FakeCodec has no chat template");
  }
};

}  // namespace peregrine::engine::testing
