// ModelRunner: KV cache, staging, graphs, warm-up and logits around one model (see model_runner.h).
#include "engine/model_runner.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/status.h"

namespace peregrine::engine {
namespace {

constexpr int kMaxGraphBatch = 256;
constexpr int kMaxGraphQuery = 16;  // rows per sequence of a graphed verify step

}  // namespace

ModelRunner::ModelRunner(std::unique_ptr<ops::Backend> backend, std::unique_ptr<model::Model> model,
                         const RunnerOptions& options)
    : backend_owner_(std::move(backend)),
      backend_(model->backend()),
      model_(std::move(model)),
      options_(options),
      vocab_(static_cast<int>(model_->config().vocab_size)),
      logits_width_(static_cast<int>(model_->logits_width())) {
  if (options_.block_size <= 0) throw Error(ErrorCode::kInvalidArgument, "block_size must be positive");
  options_.max_num_batched_tokens = std::max(1, options_.max_num_batched_tokens);
  options_.max_num_seqs = std::max(1, std::min(options_.max_num_seqs, options_.max_num_batched_tokens));
  if (options_.max_num_batched_tokens > model_->max_num_tokens())
    throw Error(ErrorCode::kInvalidArgument, "the model's workspace holds " + std::to_string(model_->max_num_tokens()) +
                                                 " tokens, fewer than max_num_batched_tokens " +
                                                 std::to_string(options_.max_num_batched_tokens));
  const int64_t model_len = options_.max_model_len > 0 ? options_.max_model_len : model_->config().max_position_embeddings;
  max_blocks_per_seq_ = static_cast<int>((model_len + options_.block_size - 1) / options_.block_size);
  max_rows_per_chunk_ = model_->max_logits_rows();
  const io::ModelConfig& mc = model_->config();
  sliding_window_ = static_cast<int>(mc.sliding_window);
  if (options_.row_exact_override.max_rows > 0) {
    row_exact_ = options_.row_exact_override;
  } else if (options_.verify_rows > 1 && options_.row_exact_verify) {
    row_exact_ = backend_.row_exact_layout(model_->activation_dtype(), options_.kv_dtype,
                                           static_cast<int>(mc.num_attention_heads),
                                           static_cast<int>(mc.num_key_value_heads), static_cast<int>(mc.head_dim));
  }
  convert_trees_ = backend_.supports_key_tails() &&
                   (options_.row_exact_override.max_rows > 0 ||
                    (options_.verify_rows > 1 && !backend_.supports_tree_attention()));
  // Pieces: at most one per token row (empty ones only pad cut sequences); a tree row's tail is at most its depth in
  // drafts (num_speculative_tokens <= 64).
  if (row_exact_.max_rows > 0 || convert_trees_) piece_capacity_ = options_.max_num_batched_tokens;
  if (convert_trees_) tail_capacity_ = options_.max_num_batched_tokens * 65;

  // Block tables last, so a step copies only the rows it uses; the pieces' arrays after them, copied when used.
  const size_t t = static_cast<size_t>(options_.max_num_batched_tokens);
  const size_t s = static_cast<size_t>(options_.max_num_seqs);
  const size_t pc = static_cast<size_t>(piece_capacity_);
  size_t off = 0;
  auto take = [&](size_t n) {
    const size_t at = off;
    off += (n + 15) / 16 * 16;
    return at;
  };
  layout_.ids = take(t);
  layout_.positions = take(t);
  layout_.slots = take(t);
  layout_.qsl = take(s + 1);
  layout_.seq_lens = take(s);
  layout_.logits = take(t);
  layout_.parents = take(t);
  layout_.lazy = take(static_cast<size_t>(max_rows_per_chunk_));
  layout_.tables = take(s * static_cast<size_t>(max_blocks_per_seq_));
  layout_.piece_qsl = take(pc + 1);
  layout_.piece_lens = take(pc);
  layout_.piece_table = take(pc);
  layout_.tail_from = take(pc);
  layout_.tail_offset = take(pc);
  layout_.tails = take(static_cast<size_t>(tail_capacity_));
  layout_.total = off;
  inputs_ = ops::DeviceBuffer(backend_, layout_.total * sizeof(int32_t));
  staging_ = static_cast<int32_t*>(backend_.allocate_pinned(layout_.total * sizeof(int32_t)));
  // Logits are f32 whatever the activation dtype: rounding them to bf16 would cost ~1e-2 in logprobs.
  logits_ = ops::DeviceBuffer(backend_, sizeof(float) * static_cast<size_t>(max_rows_per_chunk_) * logits_width_);
}

ModelRunner::~ModelRunner() {
  release_graphs();
  if (staging_) backend_.deallocate_pinned(staging_);
  for (StagedUpload* u : {&sample_params_, &penalty_tokens_, &masks_}) u->release(backend_);
}

void ModelRunner::StagedUpload::reserve(ops::Backend& backend, size_t bytes) {
  if (bytes <= capacity) return;
  release(backend);
  capacity = std::max(bytes, 2 * capacity);
  device = ops::DeviceBuffer(backend, capacity);
  host = static_cast<char*>(backend.allocate_pinned(capacity));
}

void ModelRunner::StagedUpload::release(ops::Backend& backend) {
  if (host) backend.deallocate_pinned(host);
  host = nullptr;
}

KvCacheConfig ModelRunner::kv_cache_config(int num_blocks) const {
  const io::ModelConfig& c = model_->config();
  KvCacheConfig k;
  k.num_layers = static_cast<int>(c.num_hidden_layers);
  k.num_kv_heads = static_cast<int>(c.num_key_value_heads);
  k.head_dim = static_cast<int>(c.head_dim);
  k.num_blocks = num_blocks;
  k.block_size = options_.block_size;
  k.dtype = options_.kv_dtype;
  // int8 / fp8 caches keep one f32 scale per token and KV head beside the codes (ops.h KvWriteParams).
  k.scales_per_token_head = (k.dtype == DType::kI8 || k.dtype == DType::kF8E4M3) ? 1 : 0;
  return k;
}

void ModelRunner::allocate_kv_cache(int num_blocks) {
  release_graphs();
  kv_.reset();
  kv_ = std::make_unique<KvCache>(backend_, kv_cache_config(num_blocks));
}

void ModelRunner::use_kv_cache(std::unique_ptr<KvCache> cache) {
  release_graphs();
  kv_ = std::move(cache);
}

KvCache& ModelRunner::kv_cache() {
  PEREGRINE_CHECK(kv_ != nullptr, "the KV cache is not allocated");
  return *kv_;
}

int ModelRunner::num_graphs() const {
  return static_cast<int>(std::count_if(graphs_.begin(), graphs_.end(), [](int64_t g) { return g > 0; })) +
         static_cast<int>(verify_graphs_.size());
}

void ModelRunner::release_graphs() {
  for (int64_t g : graphs_)
    if (g > 0) backend_.destroy_graph(g);
  graphs_.clear();
  for (auto& [key, g] : verify_graphs_)
    if (g > 0) backend_.destroy_graph(g);
  verify_graphs_.clear();
}

// Decode graphs exist for padded batch sizes 1, 2, 4, ..., up to max_num_seqs (capped at 256).
int ModelRunner::graph_bucket(int seqs) const {
  int b = 1;
  while (b < seqs) b *= 2;
  return b <= std::min(options_.max_num_seqs, kMaxGraphBatch) ? b : 0;
}

void ModelRunner::prepare(const SchedulerOutput& output, std::span<const LogitsRequest> requests, LogitsRows& rows) {
  build_forward_batch(output, requests, options_.block_size, batch_, rows);
}

void ModelRunner::execute(std::vector<float>& logits, DeviceSampling* sampling, const std::vector<uint8_t>* deferred) {
  if (batch_.token_ids.empty()) {
    logits.clear();
    return;
  }
  execute(batch_, logits, sampling, deferred);
}

void ModelRunner::compute_rows(std::span<const int32_t> rows, std::vector<float>& logits) {
  const int64_t real_rows = static_cast<int64_t>(lazy_indices_.size());
  PEREGRINE_CHECK(logits.size() == static_cast<size_t>(real_rows * logits_width_), "compute_rows without a lazy step");
  const size_t width = static_cast<size_t>(logits_width_);
  for (size_t begin = 0; begin < rows.size(); begin += static_cast<size_t>(max_rows_per_chunk_)) {
    const size_t n = std::min(rows.size() - begin, static_cast<size_t>(max_rows_per_chunk_));
    for (size_t i = 0; i < n; ++i) {
      const int32_t r = rows[begin + i];
      PEREGRINE_CHECK(r >= 0 && r < real_rows, "compute_rows: a row past the step's logits rows");
      staging_[layout_.lazy + i] = lazy_indices_[static_cast<size_t>(r)];
    }
    int32_t* idx = static_cast<int32_t*>(inputs_.data()) + layout_.lazy;
    backend_.copy_from_host_async(idx, staging_ + layout_.lazy, n * sizeof(int32_t));
    const int64_t ni = static_cast<int64_t>(n);
    model_->compute_logits(TensorView(idx, DType::kI32, {ni}), TensorView(logits_.data(), DType::kF32, {ni, logits_width_}));
    for (size_t i = 0; i < n; ++i) {
      backend_.copy_to_host(logits.data() + static_cast<size_t>(rows[begin + i]) * width,
                            static_cast<const float*>(logits_.data()) + i * width, sizeof(float) * width);
    }
  }
}

void ModelRunner::validate(const ForwardBatch& b) const {
  auto bad = [](const std::string& what) { throw Error(ErrorCode::kInvalidArgument, "forward batch: " + what); };
  const int t = b.num_tokens(), s = b.num_seqs();
  if (t == 0 || s == 0) bad("empty batch");
  if (t > options_.max_num_batched_tokens)
    bad(std::to_string(t) + " tokens exceed max_num_batched_tokens " + std::to_string(options_.max_num_batched_tokens));
  if (b.positions.size() != static_cast<size_t>(t) || b.slot_mapping.size() != static_cast<size_t>(t))
    bad("positions and slot_mapping must have one entry per token");
  if (b.query_start_loc.size() != static_cast<size_t>(s) + 1 || b.query_start_loc.front() != 0 ||
      b.query_start_loc.back() != t)
    bad("query_start_loc must run from 0 to the token count");
  if (b.block_tables.size() != static_cast<size_t>(s) * b.max_blocks_per_seq) bad("block_tables size");
  if (s > options_.max_num_seqs)
    bad(std::to_string(s) + " sequences exceed max_num_seqs " + std::to_string(options_.max_num_seqs));
  if (b.max_blocks_per_seq > max_blocks_per_seq_)
    bad("block tables wider than max_model_len allows (" + std::to_string(max_blocks_per_seq_) + " blocks)");
  if (b.logits_indices.size() > static_cast<size_t>(t)) bad("more logits rows than tokens");
  if (!kv_) bad("the KV cache is not allocated");
  const int bs = kv_->block_size(), nb = kv_->num_blocks();
  const int64_t slots = static_cast<int64_t>(nb) * bs;
  for (int i = 0; i < s; ++i) {
    const int q_len = b.query_start_loc[i + 1] - b.query_start_loc[i];
    if (q_len <= 0 || q_len > b.seq_lens[i]) bad("sequence " + std::to_string(i) + " has a bad query length");
    if (b.seq_lens[i] > static_cast<int64_t>(b.max_blocks_per_seq) * bs)
      bad("sequence " + std::to_string(i) + " is longer than its block table");
    const int needed = (b.seq_lens[i] + bs - 1) / bs;
    for (int j = 0; j < needed; ++j) {
      const int32_t blk = b.block_tables[static_cast<size_t>(i) * b.max_blocks_per_seq + j];
      if (blk < 0 || blk >= nb) bad("block table entry out of range");
    }
  }
  for (int32_t slot : b.slot_mapping)
    if (slot >= slots) bad("slot out of range");
  for (int32_t id : b.token_ids)
    if (id < 0 || id >= vocab_) bad("token id " + std::to_string(id) + " out of the vocabulary");
  for (int32_t r : b.logits_indices)
    if (r < 0 || r >= t) bad("logits index out of range");
  if (!b.tree_parents.empty()) {
    if (b.tree_parents.size() != static_cast<size_t>(t)) bad("tree_parents must have one entry per token");
    for (int i = 0; i < s; ++i) {
      for (int r = 0; r < b.query_start_loc[i + 1] - b.query_start_loc[i]; ++r) {
        const int32_t par = b.tree_parents[static_cast<size_t>(b.query_start_loc[i] + r)];
        if (r == 0 ? par != -1 : (par < 0 || par >= r)) bad("tree_parents: a row's parent must precede it");
      }
    }
  }
}

void ModelRunner::run_compute(int64_t tokens, int64_t seqs, int64_t rows, int max_query_len, int max_seq_len, bool tree,
                              const Pieces& pieces) {
  auto ints = [&](size_t off, std::initializer_list<int64_t> dims) {
    return TensorView(static_cast<int32_t*>(inputs_.data()) + off, DType::kI32, dims);
  };
  model::StepInputs in;
  in.token_ids = ints(layout_.ids, {tokens});
  in.positions = ints(layout_.positions, {tokens});
  in.slot_mapping = ints(layout_.slots, {tokens});
  in.query_start_loc = ints(layout_.qsl, {seqs + 1});
  in.seq_lens = ints(layout_.seq_lens, {seqs});
  in.block_tables = ints(layout_.tables, {seqs, max_blocks_per_seq_});
  if (pieces.count > 0) {
    in.query_start_loc = ints(layout_.piece_qsl, {seqs + 1});
    in.seq_lens = ints(layout_.piece_lens, {seqs});
    in.block_tables = ints(layout_.tables, {pieces.table_rows, max_blocks_per_seq_});
    in.block_table_index = ints(layout_.piece_table, {seqs});
    if (pieces.tails > 0) {
      in.key_tail_from = ints(layout_.tail_from, {seqs});
      in.key_tail_offset = ints(layout_.tail_offset, {seqs});
      in.key_tail = ints(layout_.tails, {pieces.tails});
    }
  }
  in.max_query_len = max_query_len;
  in.max_seq_len = max_seq_len;
  if (tree) in.tree_parents = ints(layout_.parents, {tokens});
  if (kv_->has_layer_waits()) in.before_layer = [this](int layer) { kv_->enter_layer(layer); };
  model_->forward(in, kv_->layers());
  kv_->flush_layer_waits();  // none left unless the model skipped a layer's call
  const int64_t n = std::min<int64_t>(max_rows_per_chunk_, rows);
  if (n > 0) {
    model_->compute_logits(ints(layout_.logits, {n}), TensorView(logits_.data(), DType::kF32, {n, logits_width_}));
  }
}

void ModelRunner::execute(const ForwardBatch& b, std::vector<float>& logits, DeviceSampling* sampling,
                          const std::vector<uint8_t>* deferred) {
  validate(b);
  lazy_indices_.clear();
  int max_q = 0;
  for (int i = 0; i < b.num_seqs(); ++i) max_q = std::max(max_q, b.query_start_loc[i + 1] - b.query_start_loc[i]);
  const int max_len = *std::max_element(b.seq_lens.begin(), b.seq_lens.end());
  struct Trace {  // the step's work as one named range for profilers (Backend::trace_push)
    ops::Backend& b;
    Trace(ops::Backend& backend, const char* name) : b(backend) { b.trace_push(name); }
    ~Trace() { b.trace_pop(); }
  };
  // PEREGRINE_TRACE_DECODE_MIN_SEQS=N names decode steps of fewer than N sequences "decode-few", so that a profiler
  // filtered on "decode" sees the full batch's steps only (a run's first requests decode before the rest arrive).
  static const int min_seqs = [] {
    const char* v = std::getenv("PEREGRINE_TRACE_DECODE_MIN_SEQS");
    return v ? std::atoi(v) : 0;
  }();
  const char* name = warming_up_ ? "warmup" : max_q != 1 ? "step" : b.num_seqs() < min_seqs ? "decode-few" : "decode";
  Trace trace(backend_, name);
  model_->prepare_step(*std::max_element(b.positions.begin(), b.positions.end()) + int64_t{1});
  // A pure decode step with a logits row per sequence replays a graph, padded to its bucket with dummy
  // sequences (slot -1: nothing written; one key from block 0: finite, discarded).
  const int bucket = max_q == 1 && b.tree_parents.empty() && options_.use_graphs && backend_.supports_graphs() && model_->graph_safe() &&
                             b.logits_indices.size() == static_cast<size_t>(b.num_seqs())
                         ? graph_bucket(b.num_seqs())
                         : 0;
  // A verify step (every row's logits wanted, at most kMaxGraphQuery rows per sequence: a decode with its drafts)
  // replays a graph of vs sequences x vq rows, each sequence padded with rows that write nothing.
  int vq = 0, vs = 0;
  const int kv_len = max_blocks_per_seq_ * kv_->block_size();
  const bool graphs = options_.use_graphs && backend_.supports_graphs() && model_->graph_safe();
  if (!bucket && max_q > 1 && max_q <= kMaxGraphQuery && b.tree_parents.empty() && (graphs || options_.pad_verify_steps) &&
      b.logits_indices.size() == static_cast<size_t>(b.num_tokens())) {
    int q = 2;
    while (q < max_q) q *= 2;
    const int sb = graph_bucket(b.num_seqs());
    bool fits = sb > 0 && sb * q <= max_rows_per_chunk_ && sb * q <= options_.max_num_batched_tokens;
    for (int i = 0; fits && i < b.num_tokens(); ++i) fits = b.logits_indices[static_cast<size_t>(i)] == i;
    for (int i = 0; fits && i < b.num_seqs(); ++i) {
      const int qi = b.query_start_loc[i + 1] - b.query_start_loc[i];
      fits = b.seq_lens[static_cast<size_t>(i)] + (q - qi) <= kv_len;
    }
    if (fits) {
      vq = q;
      vs = sb;
    }
  }
  const int s = bucket ? bucket : vs ? vs : b.num_seqs();
  const int t = bucket ? bucket : vs ? vs * vq : b.num_tokens();
  const int r = bucket ? bucket : vs ? vs * vq : static_cast<int>(b.logits_indices.size());

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
  const bool tree = !b.tree_parents.empty();
  if (tree) std::copy(b.tree_parents.begin(), b.tree_parents.end(), st + layout_.parents);
  // Padded rows of a graph step read their dummy sequence's token (row i). NOTE: only past the real rows: a
  // sequence may own several rows (prompt logprobs, verification).
  for (int i = static_cast<int>(b.logits_indices.size()); i < r; ++i) st[layout_.logits + i] = i;
  for (int i = 0; i < s; ++i) {
    int32_t* row = st + layout_.tables + static_cast<size_t>(i) * max_blocks_per_seq_;
    const int have = i < b.num_seqs() ? b.max_blocks_per_seq : 0;
    if (have) std::copy_n(b.block_tables.begin() + static_cast<long>(i) * have, have, row);
    std::fill(row + have, row + max_blocks_per_seq_, 0);
  }
  if (vs) {
    // The padded verify layout: sequence i owns rows [i * vq, (i + 1) * vq); its real rows first, then rows at the
    // next positions with slot -1 (their outputs are discarded); the real rows' logits come first.
    int next_logit = 0;
    for (int i = 0; i < vs; ++i) {
      const int q0 = i < b.num_seqs() ? b.query_start_loc[i] : 0;
      const int qi = i < b.num_seqs() ? b.query_start_loc[i + 1] - q0 : 0;
      const int last_pos = qi > 0 ? b.positions[static_cast<size_t>(q0 + qi - 1)] : 0;
      for (int r2 = 0; r2 < vq; ++r2) {
        const size_t row = static_cast<size_t>(i * vq + r2);
        if (r2 < qi) {
          st[layout_.ids + row] = b.token_ids[static_cast<size_t>(q0 + r2)];
          st[layout_.positions + row] = b.positions[static_cast<size_t>(q0 + r2)];
          st[layout_.slots + row] = b.slot_mapping[static_cast<size_t>(q0 + r2)];
          st[layout_.logits + next_logit++] = static_cast<int32_t>(row);
        } else {
          st[layout_.ids + row] = 0;
          st[layout_.positions + row] = last_pos + (r2 - qi + 1);
          st[layout_.slots + row] = -1;
        }
      }
      st[layout_.qsl + i] = i * vq;
      st[layout_.seq_lens + i] = i < b.num_seqs() ? b.seq_lens[static_cast<size_t>(i)] + (vq - qi) : vq;
    }
    st[layout_.qsl + vs] = vs * vq;
    for (int i = next_logit; i < vs * vq; ++i) st[layout_.logits + i] = i;
  }
  // Row-exact verification (ops::Backend::row_exact_layout) and trees as key tails: rows become pieces.
  int att_seqs = s;
  int att_q = bucket ? 1 : vs ? vq : max_q;
  Pieces pieces;
  if (!bucket && ((!tree && row_exact_.max_rows > 0) || (tree && convert_trees_))) {
    int q = att_q;
    pieces = stage_row_pieces(b, s, vs ? vq : 0, tree, &q);
    if (pieces.count > 0) {
      att_seqs = pieces.count;
      // A verify graph's kernels take the bound for its shape, whatever these rows' positions.
      att_q = vs ? std::min(vq, row_exact_.max_rows) : q;
    }
  }
  PEREGRINE_CHECK(!tree || pieces.count > 0 || !convert_trees_, "a token tree was not laid out as pieces");
  const size_t used = layout_.tables + static_cast<size_t>(s) * max_blocks_per_seq_;
  backend_.copy_from_host_async(inputs_.data(), staging_, used * sizeof(int32_t));
  if (pieces.count > 0) {
    const size_t end = layout_.tails + static_cast<size_t>(pieces.tails);
    backend_.copy_from_host_async(static_cast<int32_t*>(inputs_.data()) + layout_.piece_qsl, staging_ + layout_.piece_qsl,
                                  (end - layout_.piece_qsl) * sizeof(int32_t));
  }
  const bool tree_rows = tree && pieces.count == 0;  // trees the backend attends to with tree_parents
  // KV loads overlapped layer by layer only on the plain eager path with a model that calls before_layer; graphs
  // (and anything else) wait for every load before the step.
  if (bucket || vs || !model_->calls_before_layer()) kv_->flush_layer_waits();

  if (bucket) {
    // Graph kernels must not depend on this step's context length: pass the longest the tables allow.
    const int graph_len = max_blocks_per_seq_ * kv_->block_size();
    if (graphs_.empty()) graphs_.assign(static_cast<size_t>(std::min(options_.max_num_seqs, kMaxGraphBatch)) + 1, 0);
    if (graphs_[bucket] > 0) {
      backend_.replay_graph(graphs_[bucket]);
    } else {
      run_compute(t, s, r, 1, graph_len);  // eager first, so workspaces and plans exist before capture
      graphs_[bucket] = backend_.capture_graph([&] { run_compute(t, s, r, 1, graph_len); });
    }
  } else if (vs && !graphs) {
    run_compute(t, att_seqs, r, att_q, kv_len, false, pieces);  // the padded layout, eagerly (tests)
  } else if (vs) {
    int64_t& g = verify_graphs_[vs * 64 + vq];
    if (g > 0) {
      backend_.replay_graph(g);
    } else {
      run_compute(t, att_seqs, r, att_q, kv_len, false, pieces);
      g = backend_.capture_graph([&] { run_compute(t, att_seqs, r, att_q, kv_len, false, pieces); });
    }
  } else {
    // Deferred rows (a host backend, no sampling on it): the forward alone, then the rows wanted now.
    const bool lazy = deferred && lazy_logits() && (!sampling || sampling->rows.empty()) &&
                      deferred->size() == b.logits_indices.size() &&
                      std::find(deferred->begin(), deferred->end(), uint8_t{1}) != deferred->end();
    run_compute(t, att_seqs, lazy ? 0 : r, att_q, max_len, tree_rows, pieces);
    if (lazy) {
      if (sampling) {
        sampling->done = false;
        sampling->tokens.clear();
      }
      lazy_indices_ = b.logits_indices;
      logits.resize(lazy_indices_.size() * static_cast<size_t>(logits_width_));
      std::vector<int32_t> now;
      for (size_t i = 0; i < deferred->size(); ++i)
        if (!(*deferred)[i]) now.push_back(static_cast<int32_t>(i));
      compute_rows(now, logits);
      return;
    }
  }

  // Logits of the real rows back to the host as f32; rows past the first chunk (prompt logprobs of long
  // prefills) are computed here, eagerly.
  const int64_t real_rows = static_cast<int64_t>(b.logits_indices.size());
  logits.resize(static_cast<size_t>(real_rows * logits_width_));
  if (sampling) {
    sampling->done = false;
    sampling->tokens.clear();
    if (!sampling->rows.empty() && real_rows <= max_rows_per_chunk_ && backend_.supports_sampling()) {
      sample_rows(real_rows, *sampling, logits);
      return;
    }
  }
  for (int64_t begin = 0; begin < real_rows; begin += max_rows_per_chunk_) {
    const int64_t n = std::min<int64_t>(max_rows_per_chunk_, real_rows - begin);
    if (begin > 0) {
      const TensorView idx(static_cast<int32_t*>(inputs_.data()) + layout_.logits + begin, DType::kI32, {n});
      model_->compute_logits(idx, TensorView(logits_.data(), DType::kF32, {n, logits_width_}));
    }
    backend_.copy_to_host(logits.data() + begin * logits_width_, logits_.data(), sizeof(float) * static_cast<size_t>(n * logits_width_));
  }
}

// Every real row of the first chunk is sampled on the backend (rows not asked for greedily, which is cheap), so the
// op sees one contiguous [rows, vocab] block; the asked-for rows' tokens come back, and the other rows' logits.
void ModelRunner::sample_rows(int64_t real_rows, DeviceSampling& s, std::vector<float>& logits) {
  const size_t n = static_cast<size_t>(real_rows), cap = static_cast<size_t>(max_rows_per_chunk_);
  // Layout: temperature, top_p, min_p (f32), top_k, tokens (i32), seeds, offsets (i64), repetition, presence,
  // frequency (f32); each [cap].
  const size_t f_temp = 0, f_top_p = cap * 4, f_min_p = cap * 8, f_top_k = cap * 12, f_tokens = cap * 16,
               f_seeds = cap * 24, f_offsets = cap * 32, f_rep = cap * 40, f_pres = cap * 44, f_freq = cap * 48,
               total = cap * 52;
  sample_params_.reserve(backend_, total);
  char* const staging = sample_params_.host;
  auto* temp = reinterpret_cast<float*>(staging + f_temp);
  auto* top_p = reinterpret_cast<float*>(staging + f_top_p);
  auto* min_p = reinterpret_cast<float*>(staging + f_min_p);
  auto* top_k = reinterpret_cast<int32_t*>(staging + f_top_k);
  auto* seeds = reinterpret_cast<int64_t*>(staging + f_seeds);
  auto* offsets = reinterpret_cast<int64_t*>(staging + f_offsets);
  std::fill(temp, temp + n, 0.0f);
  std::fill(top_p, top_p + n, 1.0f);
  std::fill(min_p, min_p + n, 0.0f);
  std::fill(top_k, top_k + n, 0);
  std::fill(seeds, seeds + n, 0);
  std::fill(offsets, offsets + n, 0);
  const bool penalties = !s.repetition.empty();
  auto* rep = reinterpret_cast<float*>(staging + f_rep);
  auto* pres = reinterpret_cast<float*>(staging + f_pres);
  auto* freq = reinterpret_cast<float*>(staging + f_freq);
  if (penalties) {
    std::fill(rep, rep + n, 1.0f);
    std::fill(pres, pres + n, 0.0f);
    std::fill(freq, freq + n, 0.0f);
  }
  std::vector<int> entry_of(n, -1);
  std::vector<char> asked(n, 0);
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const int32_t r = s.rows[i];
    PEREGRINE_CHECK(r >= 0 && static_cast<size_t>(r) < n && !asked[static_cast<size_t>(r)],
                    "device sampling rows must be distinct logits rows of the step");
    asked[static_cast<size_t>(r)] = 1;
    temp[r] = s.temperature[i];
    top_p[r] = s.top_p[i];
    min_p[r] = s.min_p[i];
    top_k[r] = s.top_k[i];
    seeds[r] = s.seeds[i];
    offsets[r] = s.offsets[i];
    entry_of[static_cast<size_t>(r)] = static_cast<int>(i);
    if (penalties) {
      rep[r] = s.repetition[i];
      pres[r] = s.presence[i];
      freq[r] = s.frequency[i];
    }
  }
  char* dev = static_cast<char*>(sample_params_.device.data());
  for (size_t off : {f_temp, f_top_p, f_min_p, f_top_k, f_seeds, f_offsets, f_rep, f_pres, f_freq}) {
    if (!penalties && off >= f_rep) continue;
    const size_t width = off >= f_seeds && off < f_rep ? 8 : 4;
    backend_.copy_from_host_async(dev + off, staging + off, n * width);
  }
  // Penalty tokens in row order: [prompt tokens][output tokens][prompt offsets (n + 1)][output offsets (n + 1)].
  int32_t* pen_dev = nullptr;
  size_t pen_prompt = 0, pen_output = 0;
  if (penalties) {
    pen_prompt = s.prompt_tokens.size();
    pen_output = s.output_tokens.size();
    const size_t need = pen_prompt + pen_output + 2 * (n + 1);
    penalty_tokens_.reserve(backend_, need * sizeof(int32_t));
    int32_t* pt = reinterpret_cast<int32_t*>(penalty_tokens_.host);
    int32_t* ot = pt + pen_prompt;
    int32_t* po = ot + pen_output;
    int32_t* oo = po + n + 1;
    size_t p_at = 0, o_at = 0;
    po[0] = 0;
    oo[0] = 0;
    for (size_t r = 0; r < n; ++r) {
      const int e = entry_of[r];
      if (e >= 0) {
        const auto pb = static_cast<size_t>(s.prompt_offsets[static_cast<size_t>(e)]);
        const auto pe = static_cast<size_t>(s.prompt_offsets[static_cast<size_t>(e) + 1]);
        const auto ob = static_cast<size_t>(s.output_offsets[static_cast<size_t>(e)]);
        const auto oe = static_cast<size_t>(s.output_offsets[static_cast<size_t>(e) + 1]);
        std::copy(s.prompt_tokens.begin() + static_cast<long>(pb), s.prompt_tokens.begin() + static_cast<long>(pe), pt + p_at);
        std::copy(s.output_tokens.begin() + static_cast<long>(ob), s.output_tokens.begin() + static_cast<long>(oe), ot + o_at);
        p_at += pe - pb;
        o_at += oe - ob;
      }
      po[r + 1] = static_cast<int32_t>(p_at);
      oo[r + 1] = static_cast<int32_t>(o_at);
    }
    pen_dev = static_cast<int32_t*>(penalty_tokens_.device.data());
    backend_.copy_from_host_async(pen_dev, penalty_tokens_.host, need * sizeof(int32_t));
  }
  // NOTE: the sampling op's token ids are column indices; only a full-vocabulary LM head makes them token ids.
  PEREGRINE_CHECK(logits_width_ == vocab_, "sampling on the backend needs the full vocabulary's logits");
  const int64_t rows = real_rows;
  ops::SampleParams p;
  p.logits = TensorView(logits_.data(), DType::kF32, {rows, logits_width_});
  p.temperature = TensorView(dev + f_temp, DType::kF32, {rows});
  p.top_p = TensorView(dev + f_top_p, DType::kF32, {rows});
  p.min_p = TensorView(dev + f_min_p, DType::kF32, {rows});
  p.top_k = TensorView(dev + f_top_k, DType::kI32, {rows});
  p.seeds = TensorView(dev + f_seeds, DType::kI64, {rows});
  p.offsets = TensorView(dev + f_offsets, DType::kI64, {rows});
  p.out_tokens = TensorView(dev + f_tokens, DType::kI32, {rows});
  if (penalties) {
    p.repetition_penalty = TensorView(dev + f_rep, DType::kF32, {rows});
    p.presence_penalty = TensorView(dev + f_pres, DType::kF32, {rows});
    p.frequency_penalty = TensorView(dev + f_freq, DType::kF32, {rows});
    const int64_t np = static_cast<int64_t>(pen_prompt), no = static_cast<int64_t>(pen_output);
    if (np > 0) p.prompt_tokens = TensorView(pen_dev, DType::kI32, {np});
    if (no > 0) p.output_tokens = TensorView(pen_dev + np, DType::kI32, {no});
    p.prompt_offsets = TensorView(pen_dev + np + no, DType::kI32, {rows + 1});
    p.output_offsets = TensorView(pen_dev + np + no + rows + 1, DType::kI32, {rows + 1});
  }
  // Token masks: [masks][index per row (-1: none)], the masks in entry order.
  size_t num_masks = 0;
  for (char m : s.masked) num_masks += m ? 1 : 0;
  if (num_masks > 0) {
    PEREGRINE_CHECK(s.masked.size() == s.rows.size() && s.fill_mask && s.mask_words * 64 >= static_cast<size_t>(vocab_),
                    "device sampling masks need one flag per entry, fill_mask and mask_words covering the vocabulary");
    const size_t mask_bytes = num_masks * s.mask_words * 8, need = mask_bytes + n * 4;
    masks_.reserve(backend_, need);
    char* const mask_host = masks_.host;
    auto* index = reinterpret_cast<int32_t*>(mask_host + mask_bytes);
    std::fill(index, index + n, -1);
    int32_t m = 0;
    for (size_t i = 0; i < s.rows.size(); ++i) {
      if (!s.masked[i]) continue;
      s.fill_mask(i, reinterpret_cast<uint64_t*>(mask_host) + static_cast<size_t>(m) * s.mask_words);
      index[s.rows[i]] = m++;
    }
    backend_.copy_from_host_async(masks_.device.data(), mask_host, need);
    auto* dev_masks = static_cast<char*>(masks_.device.data());
    p.allowed_tokens = TensorView(dev_masks, DType::kI32, {static_cast<int64_t>(num_masks), static_cast<int64_t>(2 * s.mask_words)});
    p.allowed_index = TensorView(dev_masks + mask_bytes, DType::kI32, {rows});
  }
  backend_.sample(p);
  // Rows the host samples: their logits, in runs of consecutive rows.
  for (size_t r = 0; r < n;) {
    if (asked[r]) {
      ++r;
      continue;
    }
    size_t end = r;
    while (end < n && !asked[end]) ++end;
    backend_.copy_to_host(logits.data() + r * static_cast<size_t>(logits_width_),
                          static_cast<const float*>(logits_.data()) + r * static_cast<size_t>(logits_width_),
                          sizeof(float) * (end - r) * static_cast<size_t>(logits_width_));
    r = end;
  }
  auto* tokens = reinterpret_cast<int32_t*>(staging + f_tokens);
  backend_.copy_to_host(tokens, dev + f_tokens, n * sizeof(int32_t));
  s.tokens.resize(s.rows.size());
  for (size_t i = 0; i < s.rows.size(); ++i) s.tokens[i] = tokens[s.rows[i]];
  s.done = true;
}

int ModelRunner::pieces_for(int rows) const {
  if (rows <= 1 || rows > kMaxGraphQuery) return 1;
  const int r = row_exact_.max_rows;
  if (r <= 0) return 1;
  if (r == 1) return rows;
  // Runs of r rows, plus one more for each granule boundary the rows may cross (the window's start too).
  const int crossings = row_exact_.key_granule > 0 ? (sliding_window_ > 0 ? 2 : 1) : 0;
  return std::min(rows, (rows + r - 1) / r + crossings);
}

ModelRunner::Pieces ModelRunner::stage_row_pieces(const ForwardBatch& b, int s, int fixed_rows, bool tree,
                                                  int* max_query_len) {
  int32_t* st = staging_;
  const int32_t* qsl = st + layout_.qsl;
  const int32_t* lens = st + layout_.seq_lens;
  const bool chains = row_exact_.max_rows > 0;
  auto verifying = [&](int i) { return i < b.num_seqs() && !b.verifying.empty() && b.verifying[static_cast<size_t>(i)]; };
  auto is_tree = [&](int i) {
    if (!tree || i >= b.num_seqs()) return false;
    for (int j = 0; j < qsl[i + 1] - qsl[i]; ++j)
      if (b.tree_parents[static_cast<size_t>(qsl[i] + j)] != j - 1) return true;
    return false;
  };
  // Cut: a sequence verifying drafts, and in a padded layout a plain decode too (its one row padded to
  // fixed_rows must still compute as a decode).
  auto decoding = [&](int i) {
    return fixed_rows > 0 && i < b.num_seqs() && b.query_start_loc[static_cast<size_t>(i) + 1] - b.query_start_loc[static_cast<size_t>(i)] == 1;
  };
  auto cut = [&](int i, int q) { return chains && (verifying(i) || decoding(i)) && pieces_for(q) > 1; };
  auto slots = [&](int i, int q) {
    if (fixed_rows > 0) return pieces_for(fixed_rows);
    if (is_tree(i)) return q;
    return cut(i, q) ? pieces_for(q) : 1;
  };
  int total = 0;
  bool any = false;
  for (int i = 0; i < s; ++i) {
    const int q = qsl[i + 1] - qsl[i];
    total += slots(i, q);
    any = any || is_tree(i) || cut(i, q);
  }
  if (fixed_rows == 0 && !any) return {};
  PEREGRINE_CHECK(total <= piece_capacity_, "row-exact pieces exceed the staging");
  int32_t* pq = st + layout_.piece_qsl;
  int32_t* pl = st + layout_.piece_lens;
  int32_t* pt = st + layout_.piece_table;
  int32_t* pf = st + layout_.tail_from;
  int32_t* po = st + layout_.tail_offset;
  int32_t* tails = st + layout_.tails;
  int v = 0, max_q = 0, nt = 0;
  auto put = [&](int first_row, int len, int table_row) {
    pq[v] = first_row;
    pl[v] = len;
    pt[v] = table_row;
    pf[v] = len;  // no key tail
    po[v] = 0;
    ++v;
  };
  const int g = row_exact_.key_granule;
  for (int i = 0; i < s; ++i) {
    const int q0 = qsl[i], q = qsl[i + 1] - q0, len = lens[i];
    const int n = slots(i, q);
    int made = 0;
    if (is_tree(i)) {
      // One piece per row, at its depth's position; keys past the context follow its path (root first), from
      // the first depth whose row is not the one a chain would have there.
      const int ctx = len - q;
      const int32_t* par = b.tree_parents.data() + q0;
      tree_depth_.assign(static_cast<size_t>(q), 0);
      for (int j = 1; j < q; ++j) tree_depth_[static_cast<size_t>(j)] = tree_depth_[static_cast<size_t>(par[j])] + 1;
      for (int j = 0; j < q; ++j) {
        const int depth = tree_depth_[static_cast<size_t>(j)];
        tree_path_.assign(static_cast<size_t>(depth) + 1, 0);
        for (int r = j, d = depth; d >= 0; r = par[r], --d) tree_path_[static_cast<size_t>(d)] = r;
        put(q0 + j, ctx + depth + 1, i);
        int from = 0;
        while (from <= depth && tree_path_[static_cast<size_t>(from)] == from) ++from;
        if (from <= depth) {
          PEREGRINE_CHECK(nt + depth + 1 - from <= tail_capacity_, "key tails exceed the staging");
          pf[v - 1] = ctx + from;
          po[v - 1] = nt;
          for (int d = from; d <= depth; ++d) tails[nt++] = ctx + tree_path_[static_cast<size_t>(d)];
        }
        max_q = std::max(max_q, 1);
        ++made;
      }
    } else if (cut(i, q)) {
      // Row j sits at context position len - q + j; a piece keeps its rows' positions (and window starts) in
      // one granule, so each row sees the kernel geometry its own decode would.
      auto granule_of = [&](int j) {
        const int p = len - q + j;
        const int w = sliding_window_ > 0 ? std::max(0, p - sliding_window_ + 1) : 0;
        return g > 0 ? std::pair{p / g, w / g} : std::pair{0, 0};
      };
      for (int j = 0; j < q;) {
        int e = j + 1;
        while (e < q && e - j < row_exact_.max_rows && granule_of(e) == granule_of(j)) ++e;
        put(q0 + j, len - q + e, i);
        max_q = std::max(max_q, e - j);
        ++made;
        j = e;
      }
    } else {
      put(q0, len, i);
      max_q = std::max(max_q, q);
      made = 1;
    }
    PEREGRINE_CHECK(made <= n, "row-exact pieces exceed their bound");
    for (; made < n; ++made) put(q0 + q, 1, 0);  // empty pieces: no rows, one key of block 0
  }
  pq[v] = qsl[s];
  *max_query_len = std::max(max_q, 1);
  return {v, s, nt};
}

void ModelRunner::profile_run() {
  if (!kv_) allocate_kv_cache(1);
  Sequence seq;
  seq.token_ids = {0};
  seq.num_prompt_tokens = 1;
  seq.block_table = {0};
  SchedulerOutput out;
  out.seqs.push_back({&seq, 1, true});
  LogitsRows rows;
  ForwardBatch batch;
  build_forward_batch(out, {}, options_.block_size, batch, rows);
  std::vector<float> logits;
  execute(batch, logits);
  backend_.synchronize();
}

void ModelRunner::warm_up() {
  PEREGRINE_CHECK(kv_ != nullptr, "warm_up needs an allocated KV cache");
  struct Warming {
    bool& flag;
    explicit Warming(bool& f) : flag(f) { flag = true; }
    ~Warming() { flag = false; }
  } warming(warming_up_);
  const int bs = kv_->block_size();
  std::vector<float> logits;
  ForwardBatch batch;
  LogitsRows rows;
  // `seqs` sequences of `len` tokens computing their last `compute` tokens, every block table pointing at
  // block 0 (slots -1: nothing is written).
  auto run = [&](int seqs, int len, int compute) {
    std::vector<Sequence> dummies(static_cast<size_t>(seqs));
    SchedulerOutput out;
    for (Sequence& d : dummies) {
      d.token_ids.assign(static_cast<size_t>(len), 0);
      d.num_prompt_tokens = len;
      d.num_computed_tokens = len - compute;
      d.block_table.assign(static_cast<size_t>((len + bs - 1) / bs), 0);
      out.seqs.push_back({&d, compute, true});
    }
    build_forward_batch(out, {}, bs, batch, rows, /*write_kv=*/false);
    execute(batch, logits);
  };
  // One prefill of the full token budget, then each decode bucket.
  const int64_t prefill = std::min<int64_t>(options_.max_num_batched_tokens, static_cast<int64_t>(max_blocks_per_seq_) * bs);
  if (prefill <= static_cast<int64_t>(kv_->num_blocks()) * bs) run(1, static_cast<int>(prefill), static_cast<int>(prefill));
  for (int seqs = 1; seqs <= std::min(options_.max_num_seqs, kMaxGraphBatch); seqs *= 2) run(seqs, 1, 1);
  // Verify steps (a decode and its drafts per sequence, every row's logits), for the shapes their graphs take.
  if (options_.verify_rows > 1 && backend_.supports_graphs() && options_.use_graphs && model_->graph_safe()) {
    for (int q = 2; q <= std::min(options_.verify_rows, kMaxGraphQuery); q *= 2) {
      for (int seqs = 1; seqs <= std::min(options_.max_num_seqs, kMaxGraphBatch); seqs *= 2) {
        if (seqs * q > max_rows_per_chunk_ || seqs * q > options_.max_num_batched_tokens) break;
        std::vector<Sequence> dummies(static_cast<size_t>(seqs));
        SchedulerOutput out;
        std::vector<LogitsRequest> req;
        for (Sequence& d : dummies) {
          d.token_ids.assign(1, 0);
          d.num_prompt_tokens = 1;
          d.draft_tokens.assign(static_cast<size_t>(q - 1), 0);
          for (int j = 0; j < q - 1; ++j) d.draft_parents.push_back(j - 1);
          d.block_table.assign(static_cast<size_t>((q + bs - 1) / bs), 0);
          out.seqs.push_back({&d, q, true, q - 1});
          req.push_back({false, q});
        }
        build_forward_batch(out, req, bs, batch, rows, /*write_kv=*/false);
        execute(batch, logits);
      }
    }
  }
  backend_.synchronize();
}

}  // namespace peregrine::engine
