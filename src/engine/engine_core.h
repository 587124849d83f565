// EngineCore: one engine step at a time, on one thread: schedule, flatten and run the batch, sample, append
// tokens, detokenize, check stops, free finished sequences and hand deltas to request callbacks. The public
// Engine (engine.cpp) owns a core and drives it from its loop thread; tests drive it directly with a fake
// model and codec.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "engine/logits_processor.h"
#include "engine/model_runner.h"
#include "engine/request_state.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/spec/proposer.h"
#include "engine/host_kv_tier.h"
#include "engine/spec/spec_controller.h"
#include "engine/structured/structured.h"
#include "engine/text_codec.h"
#include "peregrine/engine.h"

namespace peregrine::engine {

// Resolved limits (Engine::create derives them from EngineConfig, the model and the measured memory).
struct EngineCoreConfig {
  int max_model_len = 4096;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  int num_blocks = 0;
  bool enable_prefix_caching = true;
  uint64_t seed = 0;
  std::vector<int32_t> eos_token_ids;
  int max_queued_requests = 4096;
  // Blocks of the prefix cache's host tier (0 = none); needs prefix caching. The disk tier below it: a folder
  // (empty = none), its bound in bytes, and the identity of the model and KV layout its files are kept under.
  int host_kv_blocks = 0;
  std::string kv_cache_dir;
  uint64_t kv_cache_disk_bytes = 0;
  uint64_t kv_identity = 0;
  // Speculative decoding (off unless enabled; the proposer is given with set_proposer).
  SpeculativeConfig speculative;
  // Sampling on the backend (ops::Backend::sample) for requests that need nothing but temperature/top-k/top-p/
  // min-p: logits stay on the device and only token ids come back. -1: never; 0 (auto): where the backend is not
  // the host (CUDA); 1: wherever the backend has the op (tests on the ref backend).
  int device_sampling = 0;
};

class EngineCore {
 public:
  // Default of speculative_config.disable_by_batch_size: no hard limit; the SpecController measures where
  // speculation stops paying.
  static constexpr int kDefaultSpecBatchLimit = 1 << 20;
  // The runner must have its KV cache allocated with config.num_blocks blocks of config.block_size.
  EngineCore(std::unique_ptr<ModelRunner> runner, std::shared_ptr<const TextCodec> codec,
             const EngineCoreConfig& config, ModelInfo info);
  ~EngineCore();

  const EngineCoreConfig& config() const { return config_; }
  int max_queued_requests() const { return config_.max_queued_requests; }
  const ModelInfo& info() const { return info_; }
  const TextCodec& codec() const { return *codec_; }
  const SamplingParams& default_sampling_params() const { return default_params_; }
  void set_default_sampling_params(const SamplingParams& p) { default_params_ = p; }
  // Decremented when a request leaves the waiting queue (first scheduled, or ended before); may be null.
  void set_queued_counter(std::atomic<int>* counter) { queued_counter_ = counter; }
  // The proposer of draft tokens when config().speculative is enabled (loop thread, before the first step).
  void set_proposer(std::unique_ptr<Proposer> proposer) { proposer_ = std::move(proposer); }

  // Checks a request against the model and limits (any thread). Throws Error(kInvalidArgument).
  void validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  // Loop thread only. `arrival` is seconds on this core's clock (now() when submitted).
  void add_request(const std::string& id, std::vector<int32_t> prompt, const SamplingParams& params,
                   OutputCallback callback, double arrival);
  void abort_request(const std::string& id);
  void abort_all(const std::string& reason);
  bool has_unfinished() const { return !requests_.empty(); }
  size_t num_requests() const { return requests_.size(); }
  // Runs one step. Throws only on internal errors (the caller then fails every request with abort_all).
  void step();
  // Whether the prefix cache's tiers have work in flight that only polling finishes: loads whose blocks the manager
  // holds (an aborted request's too), copy-downs still to hand to the disk tier. The loop polls it while no request
  // runs, so nothing stays held, and no evicted block stays off the disk, while the engine is idle.
  bool has_background_work() const;
  void poll_background();

  EngineStats stats() const;
  const Scheduler& scheduler() const { return scheduler_; }
  double now() const;
  ModelRunner& runner() { return *runner_; }
  KvCacheManager& kv_manager() { return scheduler_.kv(); }

 private:
  void compute_prompt_logprobs(RequestState& req, const float* rows, int count, int first_position);
  // Per-thread scratch of the sampling phase (rows are sampled in parallel when there are many).
  struct SamplingWorkspace {
    Sampler sampler;
    LogitsEdits edits;
    std::vector<int32_t> text_ids;
    std::vector<std::string> text_out;
    std::vector<uint64_t> mask;     // structured outputs: the allowed tokens of the row
    std::vector<float> saved_row;   // the row before masking (when logprobs are asked)
  };
  // Structured outputs: the vocabulary as bytes (built at the first constrained request) and masks.
  std::shared_ptr<const structured::TokenVocab> token_vocab() const;
  void apply_grammar_mask(const SeqState& ss, const RequestState& req, float* row, SamplingWorkspace& ws) const;
  PositionLogprobs make_logprobs(const float* row, int32_t chosen, int top_k, double lse,
                                 std::span<const int32_t> context, SamplingWorkspace& ws) const;
  // drafts: the tokens proposed for this position (verification); empty for plain sampling.
  int32_t sample_token(SeqState& ss, RequestState& req, float* row, SamplingWorkspace& ws,
                       std::span<const int32_t> drafts = {}) const;
  // One sequence's drafts under verification: the tree (a chain is one) walked from the last real token, each
  // node's row sampled with what the earlier tokens left, the emitted token processed as it comes.
  struct DraftWalk {
    RequestState* req = nullptr;
    SeqState* ss = nullptr;
    int first_row = 0;  // the logits row of the last real token; draft c's row is first_row + c + 1
    int first_slot = 0;  // draft c's KV is at sequence slot first_slot + c
    std::vector<int32_t> drafts, parents;
    const int32_t* device_tokens = nullptr;  // the rows' tokens when the backend sampled them (greedy), else null
    int node = -1;               // the node whose row is sampled next (-1: the last real token)
    std::vector<int32_t> path;   // the drafts accepted, in order
    bool done = false;
  };
  DraftWalk start_walk(RequestState& req, SeqState& ss, int first_row, int num_drafts) const;
  // Walks on while the rows it needs are computed (ready: one flag per logits row; empty: all are). Returns the
  // row it waits for, or -1 once the walk has ended (a draft rejected, all accepted, or the sequence finished).
  int walk_drafts(DraftWalk& w, const std::vector<uint8_t>& ready, double now);
  // After the walk: the accepted path's KV, the counts, the adaptive length. Returns the drafts accepted.
  int finish_walk(DraftWalk& w);
  // Fills the drafts of the sequences that decode next (the proposer, the adaptive lengths, the batch limit).
  void propose_drafts();
  void process_token(RequestState& req, SeqState& ss, int32_t token, double now);
  void finish_seq(RequestState& req, SeqState& ss, FinishReason reason);
  void emit(RequestState& req);
  void release_queued(RequestState& req);

  std::unique_ptr<ModelRunner> runner_;
  std::shared_ptr<const TextCodec> codec_;
  bool device_sampling_ = false;  // config_.device_sampling resolved for this backend
  DeviceSampling device_rows_;     // this step's rows sampled on the backend
  // Per entry of device_rows_: the constraint and state whose mask the row takes (null: none).
  std::vector<std::pair<structured::CompiledGrammar*, int32_t>> device_masks_;
  std::vector<int> device_row_of_; // per scheduled sequence: its entry in device_rows_, or -1
  EngineCoreConfig config_;
  ModelInfo info_;
  SamplingParams default_params_;
  Scheduler scheduler_;
  std::unique_ptr<ThreadPool> sampling_pool_;  // null when one thread samples
  std::vector<SamplingWorkspace> workspaces_;  // one per sampling thread
  std::vector<float> logits_;
  // Lazy verify rows (ModelRunner::lazy_logits): this step's deferred rows, and its walks.
  std::vector<uint8_t> deferred_;
  std::vector<DraftWalk> walks_;
  std::vector<LogitsRequest> logits_requests_;
  LogitsRows rows_;
  std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;
  std::vector<RequestState*> touched_;
  int64_t next_seq_id_ = 1;
  uint64_t seed_counter_ = 0;
  std::atomic<int>* queued_counter_ = nullptr;
  std::unique_ptr<HostKvTier> host_tier_;  // null unless config.host_kv_blocks > 0
  double prefill_rate_ = 0;                 // prompt tokens a second of large prefill steps (for the disk tier)
  bool disk_skip_ = true;                   // PEREGRINE_KV_DISK_SKIP=0: always read the disk tier
  std::unique_ptr<Proposer> proposer_;
  std::vector<Sequence*> propose_seqs_;
  std::vector<int> propose_limits_;
  SpecController spec_controller_;
  int step_draft_limit_ = 0;      // the controller's draft limit the current step's drafts were proposed under
  double propose_seconds_ = 0.0;  // what proposing the current step's drafts took
  double propose_backlog_ = 0.0;  // ... of which catching up a backlog (Proposer::backlog_seconds)
  std::chrono::steady_clock::time_point epoch_;
  EngineStats stats_;
  // The device's memory in stats_, read after a step at most every 0.5 s (and once at construction).
  void read_device_memory(std::chrono::steady_clock::time_point now);
  std::chrono::steady_clock::time_point device_memory_read_{};
  mutable structured::GrammarCache grammar_cache_;
  mutable std::mutex vocab_mutex_;
  mutable std::shared_ptr<const structured::TokenVocab> token_vocab_;
};

}  // namespace peregrine::engine
