// ModelRunner: everything that runs one model on one backend, apart from the architecture. It owns the backend
// (when given one), the model, the KV cache object, the step-input staging (one pinned buffer, one host→device
// copy per step), the graphs of decode steps (captured per padded batch size, replayed after), warm-up, and the
// logits rows (an f32 device buffer, copied back per step). The model (src/model) maps weights and runs layers on
// the tensors the runner prepared.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/scheduler.h"
#include "engine/step_builder.h"
#include "model/model.h"
#include "ops/backend.h"

namespace peregrine::engine {

struct RunnerOptions {
  int max_num_seqs = 256;            // sequences per step
  int max_num_batched_tokens = 2048; // tokens per step (must not exceed the model's workspace)
  int max_model_len = 4096;          // longest sequence: sizes the block-table rows
  int block_size = 16;
  DType kv_dtype = DType::kF32;
  bool use_graphs = true;            // capture and replay decode steps where the backend and model allow it
  // Tests: lay verify steps out padded as graphs replay them, also where there are no graphs (run eagerly).
  bool pad_verify_steps = false;
  // Speculative decoding: warm_up also captures verify-step graphs of up to this many rows per sequence (0 = none).
  // With it, a backend's row-exact layout (ops::Backend::row_exact_layout) is applied to short sequences.
  int verify_rows = 0;
  // Benchmarks: false skips the backend's row-exact layout (verification then rounds as the shared kernels do).
  bool row_exact_verify = true;
  // Tests: cut short sequences' rows into pieces by this rule even where the backend needs none.
  ops::Backend::RowExactLayout row_exact_override{};
  // Logits rows on demand (execute's `deferred`, then compute_rows): only on a host backend, whose matmul rows
  // never depend on the rows beside them, so a row computed later has the bits it would have had in the step.
  bool lazy_logits = false;
};

// Sampling on the backend (ops::Backend::sample) for some logits rows of a step: those rows are sampled where the
// logits are and only their tokens come back; every other row comes back as f32 logits, as without it.
struct DeviceSampling {
  std::vector<int32_t> rows;  // logits rows (indices into the step's logits rows), ascending
  std::vector<float> temperature, top_p, min_p;  // one per entry of rows
  std::vector<int32_t> top_k;
  std::vector<int64_t> seeds, offsets;
  // Penalties (all empty when no row has one): per entry, and the tokens they look at, entry i owning
  // tokens[offsets[i], offsets[i + 1]) of each list.
  std::vector<float> repetition, presence, frequency;
  std::vector<int32_t> prompt_tokens, prompt_offsets{0}, output_tokens, output_offsets{0};
  // Token masks (structured outputs): masked[i] marks the entries a mask constrains (empty: none); each mask is
  // mask_words little-endian u64 words (bit t % 64 of word t / 64 set: token t allowed), written by
  // fill_mask(i, words) after the forward is launched, so it may wait for masks computed while the forward runs.
  std::vector<char> masked;
  size_t mask_words = 0;
  std::function<void(size_t entry, uint64_t* words)> fill_mask;
  // Out: tokens[i] for rows[i]; done is false when the step could not sample on the backend (its logits rows
  // exceed one chunk, or the backend has no sampling op); then every row's logits came back.
  std::vector<int32_t> tokens;
  bool done = false;
  // No rows, no penalties (the parameters' capacity is kept).
  void clear() {
    for (auto* v : {&temperature, &top_p, &min_p, &repetition, &presence, &frequency}) v->clear();
    for (auto* v : {&rows, &top_k, &prompt_tokens, &output_tokens, &tokens}) v->clear();
    masked.clear();
    fill_mask = nullptr;
    seeds.clear();
    offsets.clear();
    prompt_offsets.assign(1, 0);
    output_offsets.assign(1, 0);
    done = false;
  }
  void drop_penalties() {
    repetition.clear();
    presence.clear();
    frequency.clear();
  }
};

// A step's rows staged as pieces (ModelRunner::stage_row_pieces): count pieces over table_rows block-table rows,
// with tails key-tail entries.
struct RowPieces {
  int count = 0;  // 0: none
  int table_rows = 0;
  int tails = 0;
};

class ModelRunner {
 public:
  // backend may be null when the caller keeps the model's backend alive; otherwise it is destroyed last.
  ModelRunner(std::unique_ptr<ops::Backend> backend, std::unique_ptr<model::Model> model, const RunnerOptions& options);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  model::Model& model() { return *model_; }
  const model::Model& model() const { return *model_; }
  ops::Backend& backend() const { return backend_; }
  const RunnerOptions& options() const { return options_; }
  int vocab_size() const { return vocab_; }
  // Columns of each logits row: vocab_size(), or the rows of the model's compact LM head
  // (model::Model::use_logits_subset, drafters): column j is then the token the model put in its row j.
  int logits_width() const { return logits_width_; }

  // The cache layout this model needs for num_blocks blocks (nothing allocated).
  KvCacheConfig kv_cache_config(int num_blocks) const;
  size_t kv_bytes_per_block() const { return kv_cache_config(1).bytes_per_block(); }
  // (Re)allocates the KV cache; drops captured graphs (they point at the old pools).
  void allocate_kv_cache(int num_blocks);
  // Runs on a cache it does not own instead (a view of another runner's cache: self-speculation).
  void use_kv_cache(std::unique_ptr<KvCache> cache);
  bool has_kv_cache() const { return kv_ != nullptr; }
  KvCache& kv_cache();

  // Builds the step's batch (the one step builder; requests may be empty: one sampling row per sampler).
  void prepare(const SchedulerOutput& output, std::span<const LogitsRequest> requests, LogitsRows& rows);
  // Runs the prepared batch: logits becomes [rows.num_rows * vocab] f32 on the host. With sampling (may be null),
  // its rows are sampled on the backend instead and their logits rows are left unset. With deferred (one flag per
  // logits row; lazy_logits() only), the flagged rows are left uncomputed for compute_rows.
  void execute(std::vector<float>& logits, DeviceSampling* sampling = nullptr,
               const std::vector<uint8_t>* deferred = nullptr);
  // Whether execute may defer rows (RunnerOptions::lazy_logits on a host backend).
  bool lazy_logits() const { return options_.lazy_logits && backend_.is_host(); }
  // Computes logits rows the last execute deferred (indices into its logits rows) into their places in logits,
  // with the bits the step would have given them. Valid until the next execute on this runner. Rows already
  // computed are computed again (the same bits).
  void compute_rows(std::span<const int32_t> rows, std::vector<float>& logits);
  // Whether the last execute left its deferred rows uncomputed (it may compute them all instead).
  bool deferred_rows() const { return !lazy_indices_.empty(); }
  const ForwardBatch& batch() const { return batch_; }
  // Runs an already built batch (tests, warm-up). Throws Error(kInvalidArgument) on a malformed batch.
  void execute(const ForwardBatch& batch, std::vector<float>& logits, DeviceSampling* sampling = nullptr,
               const std::vector<uint8_t>* deferred = nullptr);

  // One one-token step on a one-block cache, so first-use allocations happen before memory is measured. Leaves
  // that one-block cache allocated.
  void profile_run();
  // A largest-prefill step and every decode bucket once (capturing decode graphs where supported), so the first
  // real requests pay no first-use costs. Needs an allocated KV cache; writes no KV.
  void warm_up();
  // Number of captured decode graphs (tests, logs).
  int num_graphs() const;

 private:
  struct InputLayout {
    size_t ids, positions, slots, qsl, seq_lens, logits, parents, tables, lazy;  // offsets in int32 elements
    // Row-exact pieces (copied only in steps that use them): their qsl, seq_lens, block-table rows, key tails.
    size_t piece_qsl, piece_lens, piece_table, tail_from, tail_offset, tails, total;
  };
  void validate(const ForwardBatch& b) const;
  int graph_bucket(int seqs) const;
  // The model's forward plus the first chunk of logits rows, on the staged inputs (graph-capturable).
  using Pieces = RowPieces;
  // With pieces, seqs are the staged pieces (RowPieces).
  void run_compute(int64_t tokens, int64_t seqs, int64_t rows, int max_query_len, int max_seq_len, bool tree = false,
                   const Pieces& pieces = {});
  void release_graphs();
  // Stages the s staged sequences as pieces (sequences of their own over the same block-table rows): the rows of a
  // sequence that verifies a chain of drafts (b.verifying) cut by the backend's row-exact rule; each row of a token
  // tree (when the backend takes no tree_parents) a piece whose path is its key tail; every other sequence whole.
  // With fixed_rows (a padded verify layout of that many rows per sequence) each sequence takes exactly
  // pieces_for(fixed_rows) pieces, empty ones last, so graphs see fixed shapes. Returns the pieces (count 0 when
  // nothing is cut) and sets *max_query_len.
  Pieces stage_row_pieces(const ForwardBatch& b, int s, int fixed_rows, bool tree, int* max_query_len);
  int pieces_for(int rows) const;

  std::unique_ptr<ops::Backend> backend_owner_;  // destroyed after everything below
  ops::Backend& backend_;
  std::unique_ptr<model::Model> model_;
  RunnerOptions options_;
  int vocab_ = 0;
  int logits_width_ = 0;  // model_->logits_width() when the runner was built
  int max_blocks_per_seq_ = 0;  // block-table row stride on the device
  int max_rows_per_chunk_ = 0;  // logits rows per compute_logits call
  ops::Backend::RowExactLayout row_exact_{};  // max_rows 0: sequences are never cut
  int sliding_window_ = 0;
  bool convert_trees_ = false;  // token trees become pieces with key tails (the backend takes no tree_parents)
  bool warming_up_ = false;     // inside warm_up(): its steps are traced as "warmup"
  int piece_capacity_ = 0;      // pieces the staging holds (0: never used)
  int tail_capacity_ = 0;       // key-tail entries it holds
  std::vector<int> tree_depth_, tree_path_;
  std::unique_ptr<KvCache> kv_;
  ForwardBatch batch_;
  // The last execute's logits rows, when it deferred some (compute_rows reads them); empty otherwise.
  std::vector<int32_t> lazy_indices_;

  InputLayout layout_{};
  ops::DeviceBuffer inputs_;     // [layout_.total] int32 on the device
  int32_t* staging_ = nullptr;   // [layout_.total] int32, pinned host memory
  ops::DeviceBuffer logits_;     // [max_rows_per_chunk_, vocab] f32
  // Sampling on the backend: per-row parameters and tokens of up to max_rows_per_chunk_ rows (see sample_rows).
  void sample_rows(int64_t real_rows, DeviceSampling& s, std::vector<float>& logits);
  // Pinned host staging and the device buffer it is copied to, grown (doubling; contents not kept) as needed.
  struct StagedUpload {
    ops::DeviceBuffer device;
    char* host = nullptr;
    size_t capacity = 0;  // bytes of each
    void reserve(ops::Backend& backend, size_t bytes);
    void release(ops::Backend& backend);
  };
  StagedUpload sample_params_;   // the per-row parameters and tokens (layout in sample_rows)
  StagedUpload penalty_tokens_;  // prompt and output tokens of rows with penalties, and their offsets (int32)
  StagedUpload masks_;           // token masks of a step's constrained rows, then their per-row index
  // Decode graphs by padded batch size: 0 = not captured yet.
  std::vector<int64_t> graphs_;
  // Verify-step graphs by (padded sequences, rows per sequence): key sequences * 64 + rows.
  std::map<int, int64_t> verify_graphs_;
};

}  // namespace peregrine::engine
