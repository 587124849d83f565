// Test doubles for the engine: FakeModel implements model::Model over a paged "KV cache" that stores each
// slot's (token, position); a row's logits are a hash of the whole context read back through the block
// table, so any bookkeeping error (wrong slot, wrong block, stale prefix block) changes the output or throws.
// FakeCodec maps token ids to single characters. expected_greedy() computes the reference continuation.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
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

class FakeModel : public model::Model {
 public:
  FakeModel() {
    config_.vocab_size = kFakeVocab;
    config_.max_position_embeddings = 4096;
    config_.architecture_name = "FakeForCausalLM";
  }
  const io::ModelConfig& config() const override { return config_; }
  ops::Backend& backend() const override {
    throw Error(ErrorCode::kUnsupported, "FakeModel has no backend");
  }
  size_t kv_bytes_per_token(DType) const override { return 8; }
  size_t weight_bytes() const override { return 0; }
  void allocate_kv_cache(const model::KvCacheSpec& spec) override {
    spec_ = spec;
    slots_.assign(static_cast<size_t>(spec.num_blocks) * spec.block_size, {-1, -1});
  }
  const model::KvCacheSpec& kv_cache_spec() const override { return spec_; }

  void forward(const model::ForwardBatch& b, std::vector<float>& logits) override {
    ++num_forwards;
    max_batch_tokens = std::max(max_batch_tokens, b.num_tokens());
    for (int t = 0; t < b.num_tokens(); ++t) {
      const int slot = b.slot_mapping[static_cast<size_t>(t)];
      PEREGRINE_CHECK(slot >= 0 && slot < static_cast<int>(slots_.size()), "slot out of range");
      slots_[static_cast<size_t>(slot)] = {b.token_ids[static_cast<size_t>(t)], b.positions[static_cast<size_t>(t)]};
    }
    std::vector<std::vector<float>> row_logits(static_cast<size_t>(b.num_tokens()));
    const int bs = spec_.block_size;
    for (int s = 0; s < b.num_seqs(); ++s) {
      for (int row = b.query_start_loc[static_cast<size_t>(s)]; row < b.query_start_loc[static_cast<size_t>(s) + 1];
           ++row) {
        const int p = b.positions[static_cast<size_t>(row)];
        PEREGRINE_CHECK(p < b.seq_lens[static_cast<size_t>(s)], "position beyond seq_len");
        std::vector<int32_t> context;
        for (int j = 0; j <= p; ++j) {
          const int block = b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + j / bs];
          const auto& cell = slots_[static_cast<size_t>(block) * bs + j % bs];
          PEREGRINE_CHECK(cell.second == j, "KV slot of position " + std::to_string(j) + " holds position " +
                                                std::to_string(cell.second));
          context.push_back(cell.first);
        }
        row_logits[static_cast<size_t>(row)].resize(kFakeVocab);
        fake_logits(context, row_logits[static_cast<size_t>(row)].data());
      }
    }
    logits.resize(b.logits_indices.size() * kFakeVocab);
    for (size_t r = 0; r < b.logits_indices.size(); ++r) {
      const auto& src = row_logits[static_cast<size_t>(b.logits_indices[r])];
      std::copy(src.begin(), src.end(), logits.begin() + static_cast<ptrdiff_t>(r) * kFakeVocab);
    }
  }

  int num_forwards = 0;
  int max_batch_tokens = 0;

 private:
  io::ModelConfig config_;
  model::KvCacheSpec spec_;
  std::vector<std::pair<int32_t, int32_t>> slots_;  // (token, position) per KV slot
};

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
