// The Llama-family decoder (Llama, Mistral, Qwen2, Qwen3): one forward per engine step over a ragged batch,
// every layer through the op interface, KV in the paged cache. See model.h for the contract.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"
#include "model/llama_weights.h"
#include "model/model.h"
#include "model/rope_scaling.h"

namespace peregrine::model {
namespace {

class LlamaModel final : public Model {
 public:
  LlamaModel(io::ModelConfig config, LlamaWeights weights, ops::Backend& backend, const ModelOptions& options)
      : config_(std::move(config)), weights_(std::move(weights)), backend_(backend), options_(options) {
    if (!backend_.supports_activation(options_.activation_dtype))
      throw Error(ErrorCode::kUnsupported, "backend " + backend_.name() + " does not compute in " +
                                               std::string(dtype_name(options_.activation_dtype)));
    max_tokens_ = std::max(1, options_.max_num_batched_tokens);
    max_seqs_ = std::max(1, std::min(options_.max_num_seqs, max_tokens_));
    max_logit_rows_ = max_seqs_;
    const int64_t model_len = options_.max_model_len > 0 ? options_.max_model_len : config_.max_position_embeddings;
    max_blocks_per_seq_ = static_cast<int>((model_len + options_.min_block_size - 1) / options_.min_block_size);
    allocate_workspace();
    rope_ = compute_rope_tables(config_, 0);
    upload_rope(rope_);
  }

  const io::ModelConfig& config() const override { return config_; }
  ops::Backend& backend() const override { return backend_; }
  size_t weight_bytes() const override { return weights_.total_bytes; }

  size_t kv_bytes_per_token(DType kv_dtype) const override {
    return 2 * static_cast<size_t>(config_.num_hidden_layers) *
           dtype_bytes(kv_dtype, static_cast<size_t>(config_.num_key_value_heads * config_.head_dim));
  }

  void allocate_kv_cache(const KvCacheSpec& spec) override {
    if (spec.num_blocks <= 0 || spec.block_size <= 0)
      throw Error(ErrorCode::kInvalidArgument, "KV cache needs a positive number of blocks and block size");
    release_graphs();
    kv_k_.clear();
    kv_v_.clear();
    kv_spec_ = spec;
    const size_t per_layer = dtype_bytes(spec.dtype, static_cast<size_t>(spec.num_blocks) * spec.block_size *
                                                         config_.num_key_value_heads * config_.head_dim);
    for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
      kv_k_.emplace_back(backend_, per_layer);
      kv_v_.emplace_back(backend_, per_layer);
      backend_.fill_zero(kv_k_.back().data(), per_layer);
      backend_.fill_zero(kv_v_.back().data(), per_layer);
    }
  }
  const KvCacheSpec& kv_cache_spec() const override { return kv_spec_; }

  void forward(const ForwardBatch& b, std::vector<float>& logits) override;
  void warm_up() override;

 private:
  void allocate_workspace();
  void upload_rope(const RopeTables& tables);
  void validate(const ForwardBatch& b) const;
  TensorView act(const ops::DeviceBuffer& buf, int64_t rows, int64_t cols) const {
    return TensorView(buf.data(), options_.activation_dtype, {rows, cols});
  }

  io::ModelConfig config_;
  LlamaWeights weights_;
  ops::Backend& backend_;
  ModelOptions options_;
  int max_tokens_ = 0;
  int max_logit_rows_ = 0;
  RopeTables rope_;
  KvCacheSpec kv_spec_;
  std::vector<ops::DeviceBuffer> kv_k_, kv_v_;  // per layer: [num_blocks, block_size, num_kv_heads, head_dim]

  // Workspace (sized for max_tokens_ rows).
  ops::DeviceBuffer hidden_;    // [T, hidden] layer output / embedding
  ops::DeviceBuffer residual_;  // [T, hidden] the residual stream
  ops::DeviceBuffer normed_;    // [T, hidden]
  ops::DeviceBuffer q_, k_, v_; // [T, nq*hd], [T, nkv*hd], [T, nkv*hd]
  ops::DeviceBuffer attn_;      // [T, nq*hd]
  ops::DeviceBuffer gate_, up_; // [T, intermediate]
  ops::DeviceBuffer selected_;  // [R_max, hidden]
  ops::DeviceBuffer logits_;    // [R_max, vocab] f32
  ops::DeviceBuffer inv_freq_;  // [rotary_dim / 2] f32
  // Per-step int32 inputs at fixed offsets (so graphs replay on them): see InputLayout.
  struct InputLayout {
    size_t ids, positions, slots, qsl, seq_lens, logits, tables, total;  // offsets in int32 elements
  };
  InputLayout layout_{};
  int max_seqs_ = 0;           // capacity of the per-sequence arrays
  int max_blocks_per_seq_ = 0; // block-table row stride
  ops::DeviceBuffer inputs_;   // [layout_.total] int32 on the device
  int32_t* staging_ = nullptr; // [layout_.total] int32, pinned host memory
  // Decode graphs, keyed by padded batch size (0 = not captured yet, -1 = eager run done, capture next).
  std::vector<int64_t> graphs_;
  std::vector<int> graph_state_;

  struct StepShape {
    int64_t tokens, seqs, rows;
    int max_query_len, max_seq_len;
  };
  void run_compute(const StepShape& shape);
  void release_graphs();
  int graph_bucket(int seqs) const;

 public:
  ~LlamaModel() override {
    release_graphs();
    if (staging_) backend_.deallocate_pinned(staging_);
  }
};

void LlamaModel::allocate_workspace() {
  const size_t t = static_cast<size_t>(max_tokens_);
  const DType a = options_.activation_dtype;
  const auto& c = config_;
  auto rows = [&](size_t n, int64_t cols) { return ops::DeviceBuffer(backend_, dtype_bytes(a, n * cols)); };
  hidden_ = rows(t, c.hidden_size);
  residual_ = rows(t, c.hidden_size);
  normed_ = rows(t, c.hidden_size);
  q_ = rows(t, c.num_attention_heads * c.head_dim);
  k_ = rows(t, c.num_key_value_heads * c.head_dim);
  v_ = rows(t, c.num_key_value_heads * c.head_dim);
  attn_ = rows(t, c.num_attention_heads * c.head_dim);
  gate_ = rows(t, c.intermediate_size);
  up_ = rows(t, c.intermediate_size);
  selected_ = rows(static_cast<size_t>(max_logit_rows_), c.hidden_size);
  // Logits are f32 whatever the activation dtype: rounding them to bf16 would cost ~1e-2 in logprobs.
  logits_ = ops::DeviceBuffer(backend_, sizeof(float) * static_cast<size_t>(max_logit_rows_) * c.vocab_size);
  inv_freq_ = ops::DeviceBuffer(backend_, sizeof(float) * static_cast<size_t>(c.rotary_dim() / 2));
  // Block tables last, so a step copies only the rows it uses.
  size_t off = 0;
  auto take = [&](size_t n) {
    size_t at = off;
    off += (n + 15) / 16 * 16;
    return at;
  };
  layout_.ids = take(t);
  layout_.positions = take(t);
  layout_.slots = take(t);
  layout_.qsl = take(static_cast<size_t>(max_seqs_) + 1);
  layout_.seq_lens = take(static_cast<size_t>(max_seqs_));
  layout_.logits = take(t);
  layout_.tables = take(static_cast<size_t>(max_seqs_) * max_blocks_per_seq_);
  layout_.total = off;
  inputs_ = ops::DeviceBuffer(backend_, layout_.total * sizeof(int32_t));
  staging_ = static_cast<int32_t*>(backend_.allocate_pinned(layout_.total * sizeof(int32_t)));
}

void LlamaModel::release_graphs() {
  for (int64_t g : graphs_)
    if (g > 0) backend_.destroy_graph(g);
  graphs_.clear();
  graph_state_.clear();
}

// Decode graphs exist for padded batch sizes 1, 2, 4, ..., up to max_seqs_ (capped at 256).
int LlamaModel::graph_bucket(int seqs) const {
  int b = 1;
  while (b < seqs) b *= 2;
  return b <= std::min(max_seqs_, 256) ? b : 0;
}

void LlamaModel::upload_rope(const RopeTables& tables) {
  backend_.copy_from_host(inv_freq_.data(), tables.inv_freq.data(), tables.inv_freq.size() * sizeof(float));
}

void LlamaModel::validate(const ForwardBatch& b) const {
  auto bad = [](const std::string& what) { throw Error(ErrorCode::kInvalidArgument, "forward batch: " + what); };
  const int t = b.num_tokens(), s = b.num_seqs();
  if (t == 0 || s == 0) bad("empty batch");
  if (t > max_tokens_) bad(std::to_string(t) + " tokens exceed max_num_batched_tokens " + std::to_string(max_tokens_));
  if (b.positions.size() != static_cast<size_t>(t) || b.slot_mapping.size() != static_cast<size_t>(t))
    bad("positions and slot_mapping must have one entry per token");
  if (b.query_start_loc.size() != static_cast<size_t>(s) + 1 || b.query_start_loc.front() != 0 ||
      b.query_start_loc.back() != t)
    bad("query_start_loc must run from 0 to the token count");
  if (b.block_tables.size() != static_cast<size_t>(s) * b.max_blocks_per_seq) bad("block_tables size");
  if (s > max_seqs_) bad(std::to_string(s) + " sequences exceed max_num_seqs " + std::to_string(max_seqs_));
  if (b.max_blocks_per_seq > max_blocks_per_seq_)
    bad("block tables wider than max_model_len allows (" + std::to_string(max_blocks_per_seq_) + " blocks)");
  if (b.logits_indices.size() > static_cast<size_t>(t)) bad("more logits rows than tokens");
  if (kv_k_.empty()) bad("the KV cache is not allocated");
  const int64_t slots = static_cast<int64_t>(kv_spec_.num_blocks) * kv_spec_.block_size;
  for (int i = 0; i < s; ++i) {
    int q_len = b.query_start_loc[i + 1] - b.query_start_loc[i];
    if (q_len <= 0 || q_len > b.seq_lens[i]) bad("sequence " + std::to_string(i) + " has a bad query length");
    if (b.seq_lens[i] > static_cast<int64_t>(b.max_blocks_per_seq) * kv_spec_.block_size)
      bad("sequence " + std::to_string(i) + " is longer than its block table");
    int needed = (b.seq_lens[i] + kv_spec_.block_size - 1) / kv_spec_.block_size;
    for (int j = 0; j < needed; ++j) {
      int32_t blk = b.block_tables[static_cast<size_t>(i) * b.max_blocks_per_seq + j];
      if (blk < 0 || blk >= kv_spec_.num_blocks) bad("block table entry out of range");
    }
  }
  for (int32_t slot : b.slot_mapping)
    if (slot >= slots) bad("slot out of range");
  for (int32_t id : b.token_ids)
    if (id < 0 || id >= config_.vocab_size) bad("token id " + std::to_string(id) + " out of the vocabulary");
  for (int32_t r : b.logits_indices)
    if (r < 0 || r >= t) bad("logits index out of range");
}

void LlamaModel::forward(const ForwardBatch& b, std::vector<float>& logits) {
  validate(b);
  const auto& c = config_;
  int max_q = 0;
  for (int i = 0; i < b.num_seqs(); ++i) max_q = std::max(max_q, b.query_start_loc[i + 1] - b.query_start_loc[i]);
  const int max_len = *std::max_element(b.seq_lens.begin(), b.seq_lens.end());
  if (c.rope.type == io::RopeType::kDynamic) {
    int64_t longest = *std::max_element(b.positions.begin(), b.positions.end()) + 1;
    upload_rope(compute_rope_tables(c, longest));
  }
  // A pure decode step with a logits row per sequence replays a graph, padded to its bucket with dummy
  // sequences (slot -1: nothing written; one key from block 0: finite, discarded).
  const int bucket = max_q == 1 && options_.use_graphs && backend_.supports_graphs() &&
                             c.rope.type != io::RopeType::kDynamic &&
                             b.logits_indices.size() == static_cast<size_t>(b.num_seqs())
                         ? graph_bucket(b.num_seqs())
                         : 0;
  const int s = bucket ? bucket : b.num_seqs();
  const int t = bucket ? bucket : b.num_tokens();
  const int r = bucket ? bucket : static_cast<int>(b.logits_indices.size());

  // Stage every int32 input at its fixed offset, then one host→device copy.
  int32_t* st = staging_;
  auto put = [&](size_t off, const std::vector<int32_t>& v, int n, int32_t pad) {
    std::copy(v.begin(), v.end(), st + off);
    std::fill(st + off + v.size(), st + off + n, pad);
  };
  put(layout_.ids, b.token_ids, t, 0);
  put(layout_.positions, b.positions, t, 0);
  put(layout_.slots, b.slot_mapping, t, -1);
  std::copy(b.query_start_loc.begin(), b.query_start_loc.end(), st + layout_.qsl);
  for (int i = b.num_seqs() + 1; i <= s; ++i) st[layout_.qsl + i] = st[layout_.qsl + i - 1] + 1;
  put(layout_.seq_lens, b.seq_lens, s, 1);
  put(layout_.logits, b.logits_indices, r, 0);
  for (int i = b.num_seqs(); i < r; ++i) st[layout_.logits + i] = i;
  for (int i = 0; i < s; ++i) {
    int32_t* row = st + layout_.tables + static_cast<size_t>(i) * max_blocks_per_seq_;
    const int have = i < b.num_seqs() ? b.max_blocks_per_seq : 0;
    if (have) std::copy_n(b.block_tables.begin() + static_cast<long>(i) * have, have, row);
    std::fill(row + have, row + max_blocks_per_seq_, 0);
  }
  const size_t used = layout_.tables + static_cast<size_t>(s) * max_blocks_per_seq_;
  backend_.copy_from_host_async(inputs_.data(), staging_, used * sizeof(int32_t));

  StepShape shape{t, s, r, max_q, max_len};
  if (bucket) {
    // Graph kernels must not depend on this step's context length: pass the longest the tables allow.
    shape.max_seq_len = max_blocks_per_seq_ * kv_spec_.block_size;
    if (graphs_.empty()) {
      graphs_.assign(static_cast<size_t>(std::min(max_seqs_, 256)) + 1, 0);
      graph_state_.assign(graphs_.size(), 0);
    }
    if (graph_state_[bucket] == 1) {
      backend_.replay_graph(graphs_[bucket]);
    } else {
      run_compute(shape);  // eager first, so workspaces and plans exist before capture
      graphs_[bucket] = backend_.capture_graph([&] { run_compute(shape); });
      graph_state_[bucket] = 1;
    }
  } else {
    run_compute(shape);
  }

  // Logits of the real rows back to the host as f32.
  const int64_t vocab = c.vocab_size;
  const int64_t real_rows = static_cast<int64_t>(b.logits_indices.size());
  logits.resize(static_cast<size_t>(real_rows * vocab));
  for (int64_t begin = 0; begin < real_rows; begin += max_logit_rows_) {
    const int64_t n = std::min<int64_t>(max_logit_rows_, real_rows - begin);
    if (begin > 0) {
      // Rows past the first chunk (prompt logprobs of long prefills) are computed here, eagerly.
      const TensorView normed(normed_.data(), options_.activation_dtype, {t, c.hidden_size});
      const TensorView idx(static_cast<int32_t*>(inputs_.data()) + layout_.logits + begin, DType::kI32, {n});
      const TensorView sel = act(selected_, n, c.hidden_size), out(logits_.data(), DType::kF32, {n, vocab});
      backend_.gather_rows({normed, idx, sel});
      backend_.matmul({sel, weights_.lm_head, {}, out});
    }
    backend_.copy_to_host(logits.data() + begin * vocab, logits_.data(), sizeof(float) * static_cast<size_t>(n * vocab));
  }
}

void LlamaModel::warm_up() {
  std::vector<float> logits;
  // One prefill of the full token budget (slots -1: the KV cache is not written), then each decode bucket.
  auto dummy = [&](int seqs, int tokens_per_seq) {
    ForwardBatch b;
    b.max_blocks_per_seq = (tokens_per_seq + kv_spec_.block_size - 1) / kv_spec_.block_size;
    b.query_start_loc.push_back(0);
    for (int i = 0; i < seqs; ++i) {
      for (int p = 0; p < tokens_per_seq; ++p) {
        b.token_ids.push_back(0);
        b.positions.push_back(p);
        b.slot_mapping.push_back(-1);
      }
      b.query_start_loc.push_back(b.num_tokens());
      b.seq_lens.push_back(tokens_per_seq);
      for (int j = 0; j < b.max_blocks_per_seq; ++j) b.block_tables.push_back(0);
      b.logits_indices.push_back(b.num_tokens() - 1);
    }
    return b;
  };
  const int prefill = std::min<int64_t>(max_tokens_, static_cast<int64_t>(max_blocks_per_seq_) * kv_spec_.block_size);
  if (static_cast<int64_t>(prefill) <= static_cast<int64_t>(kv_spec_.num_blocks) * kv_spec_.block_size) forward(dummy(1, prefill), logits);
  for (int seqs = 1; seqs <= std::min(max_seqs_, 256); seqs *= 2) forward(dummy(seqs, 1), logits);
  backend_.synchronize();
}

// Every layer plus the first chunk of logits rows, on the inputs already on the device. Enqueues ops only
// (no host synchronisation), so it can be captured into a graph.
void LlamaModel::run_compute(const StepShape& shape) {
  const auto& c = config_;
  const int64_t t = shape.tokens, s = shape.seqs;
  const int64_t h = c.hidden_size, hd = c.head_dim, nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  auto ints = [&](size_t off, std::initializer_list<int64_t> dims) {
    return TensorView(static_cast<int32_t*>(inputs_.data()) + off, DType::kI32, dims);
  };
  const TensorView token_ids = ints(layout_.ids, {t}), positions = ints(layout_.positions, {t});
  const TensorView slots = ints(layout_.slots, {t});
  const TensorView qsl = ints(layout_.qsl, {s + 1}), seq_lens = ints(layout_.seq_lens, {s});
  const TensorView tables = ints(layout_.tables, {s, max_blocks_per_seq_});

  const TensorView hidden = act(hidden_, t, h), residual = act(residual_, t, h), normed = act(normed_, t, h);
  const TensorView q = act(q_, t, nq * hd), k = act(k_, t, nkv * hd), v = act(v_, t, nkv * hd);
  const TensorView attn = act(attn_, t, nq * hd);
  const TensorView gate = act(gate_, t, c.intermediate_size), up = act(up_, t, c.intermediate_size);
  const TensorView inv_freq(inv_freq_.data(), DType::kF32, {c.rotary_dim() / 2});
  const float eps = static_cast<float>(c.rms_norm_eps);

  backend_.embedding({token_ids, weights_.embed_tokens, hidden});
  backend_.fill_zero(residual.data, residual.bytes());
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    const LayerWeights& w = weights_.layers[l];
    // residual += hidden; normed = rmsnorm(residual)
    backend_.rms_norm({hidden, residual, w.input_norm, normed, eps});
    backend_.matmul({normed, w.q_proj, w.q_bias, q});
    backend_.matmul({normed, w.k_proj, w.k_bias, k});
    backend_.matmul({normed, w.v_proj, w.v_bias, v});
    if (c.qk_norm) {
      TensorView qh = q.reshaped({t * nq, hd}), kh = k.reshaped({t * nkv, hd});
      backend_.rms_norm({qh, {}, w.q_norm, qh, eps});
      backend_.rms_norm({kh, {}, w.k_norm, kh, eps});
    }
    const TensorView q3 = q.reshaped({t, nq, hd}), k3 = k.reshaped({t, nkv, hd}), v3 = v.reshaped({t, nkv, hd});
    backend_.rope({q3, k3, positions, inv_freq, rope_.attention_scaling, static_cast<int>(c.rotary_dim())});
    const KvCacheSpec& kv = kv_spec_;
    const TensorView kc(kv_k_[l].data(), kv.dtype, {kv.num_blocks, kv.block_size, nkv, hd});
    const TensorView vc(kv_v_[l].data(), kv.dtype, {kv.num_blocks, kv.block_size, nkv, hd});
    backend_.kv_write({k3, v3, slots, kc, vc});
    ops::AttentionParams ap;
    ap.q = q3;
    ap.k_cache = kc;
    ap.v_cache = vc;
    ap.out = attn.reshaped({t, nq, hd});
    ap.query_start_loc = qsl;
    ap.seq_lens = seq_lens;
    ap.block_tables = tables;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ap.sliding_window = static_cast<int>(c.sliding_window);
    ap.max_query_len = shape.max_query_len;
    ap.max_seq_len = shape.max_seq_len;
    backend_.attention(ap);
    backend_.matmul({attn, w.o_proj, w.o_bias, hidden});
    backend_.rms_norm({hidden, residual, w.post_norm, normed, eps});
    backend_.matmul({normed, w.gate_proj, w.gate_bias, gate});
    backend_.matmul({normed, w.up_proj, w.up_bias, up});
    backend_.silu_mul({gate, up, gate});
    backend_.matmul({gate, w.down_proj, w.down_bias, hidden});
  }
  backend_.rms_norm({hidden, residual, weights_.final_norm, normed, eps});
  const int64_t n = std::min<int64_t>(max_logit_rows_, shape.rows);
  if (n > 0) {
    const TensorView idx = ints(layout_.logits, {n});
    const TensorView sel = act(selected_, n, h), out(logits_.data(), DType::kF32, {n, c.vocab_size});
    backend_.gather_rows({normed, idx, sel});
    backend_.matmul({sel, weights_.lm_head, {}, out});
  }
}

}  // namespace

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, ops::Backend& backend, const ModelOptions& options) {
  io::ModelConfig config = io::load_model_config(dir);
  if (options.random_weights) return make_random_model(config, backend, options);
  LlamaWeights weights = load_llama_weights(config, dir, backend, options);
  return std::make_unique<LlamaModel>(std::move(config), std::move(weights), backend, options);
}

std::unique_ptr<Model> make_random_model(const io::ModelConfig& config, ops::Backend& backend,
                                         const ModelOptions& options) {
  LlamaWeights weights = make_random_llama_weights(config, backend, options);
  return std::make_unique<LlamaModel>(config, std::move(weights), backend, options);
}

}  // namespace peregrine::model
