// Engine: the public face of Peregrine's serving engine. It loads a model and its tokenizer, runs one engine
// loop thread (continuous batching over a paged KV cache with a prefix cache) and streams per-request output
// deltas to callbacks. Every public method is thread-safe; callbacks run on the engine loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "peregrine/bandwidth.h"
#include "peregrine/engine_config.h"
#include "peregrine/outputs.h"
#include "peregrine/sampling_params.h"

namespace peregrine {

namespace engine {
class EngineCore;
}

// What was loaded, for logs, /v1/models and request validation.
struct ModelInfo {
  std::string model_path;
  std::string architecture;  // "LlamaForCausalLM"
  std::string backend;       // "cpu (avx2 fma)"
  std::string dtype;         // activation dtype
  int vocab_size = 0;
  int max_model_len = 0;
  int block_size = 0;
  int num_kv_blocks = 0;
  int64_t kv_capacity_tokens = 0;
  size_t weight_bytes = 0;
  size_t decode_weight_bytes = 0;  // what a decode step reads of them (an untied embedding table is only gathered)
  size_t kv_cache_bytes = 0;
  std::vector<int32_t> eos_token_ids;
  bool has_chat_template = false;
  bool has_tokenizer = true;  // false with skip_tokenizer_init
  double load_seconds = 0.0;
  // The model's shape (benchmarks count bytes and FLOPs from it).
  int num_layers = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  size_t kv_bytes_per_token = 0;  // over all layers, K and V
  bool tie_word_embeddings = false;
  int max_num_batched_tokens = 0;  // the step's token budget the engine chose
};


// Options of a chat-template rendering (tools and extra template variables are JSON, as the client sent them,
// with key order kept: templates print them).
struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // The rendered prompt ends right after the final message's content, so the model continues that message
  // (e.g. a partly written assistant reply). Exclusive with add_generation_prompt.
  bool continue_final_message = false;
  const nlohmann::ordered_json* tools = nullptr;                 // array or null
  const nlohmann::ordered_json* chat_template_kwargs = nullptr;  // object or null
  // Renders with this template instead of the engine's (a file path or the template text, as --chat-template);
  // empty = the engine's. The model folder's bos/eos tokens are kept.
  std::string chat_template;
};

// Called on the engine loop thread with each delta. It must return quickly and never block on I/O; it may
// call abort_request or add_request.
using OutputCallback = std::function<void(RequestOutput&&)>;

// How an offline batch (Engine::generate) is watched and named.
struct GenerateOptions {
  // Called on the calling thread about every poll_interval while the batch runs, with the number of prompts
  // finished so far (progress bars, cancellation). When it throws, the batch's live requests are aborted,
  // generate waits until each has ended and rethrows.
  std::function<void(size_t num_finished)> poll;
  std::chrono::milliseconds poll_interval{50};
  // One id per prompt; empty = "generate-<batch>-<index>".
  std::vector<std::string> request_ids;
};

// Prometheus-style histogram: counts[i] counts observations <= bounds[i]; counts.back() is the +Inf bucket.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // not cumulative, size bounds.size() + 1
  double sum = 0.0;
  uint64_t count = 0;
};

// A snapshot of the engine's counters (for /metrics and benchmarks).
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int num_kv_blocks = 0;
  int num_free_kv_blocks = 0;  // includes cached blocks no request holds
  int num_used_kv_blocks = 0;  // held by at least one request
  double kv_usage = 0.0;       // used / total
  uint64_t prefix_cache_queries = 0;  // prompt tokens looked up
  uint64_t prefix_cache_hits = 0;     // of which found cached
  // The prefix cache's host tier (kv_offloading_size): hits served from it (prompt tokens, part of
  // prefix_cache_hits), blocks and bytes copied down (evicted from the device) and back up (hits), capacity.
  uint64_t prefix_cache_host_hits = 0;
  uint64_t kv_offload_blocks_to_host = 0, kv_offload_blocks_from_host = 0;
  uint64_t kv_offload_bytes_to_host = 0, kv_offload_bytes_from_host = 0;
  double kv_offload_seconds_to_host = 0.0, kv_offload_seconds_from_host = 0.0;  // the copies' own time
  // The bytes of the copies those seconds time (transfers seen finished): the copy rate is these over the seconds.
  uint64_t kv_offload_timed_bytes_to_host = 0, kv_offload_timed_bytes_from_host = 0;
  int host_kv_blocks = 0, host_kv_blocks_used = 0;
  // Of the blocks copied down: those copied ahead of their eviction (while still cached on the device); and the
  // evicted blocks that needed no copy, a host slot already holding them.
  uint64_t kv_offload_blocks_ahead = 0, kv_offload_evicted_held = 0;
  // The disk tier (kv_cache_dir): hits read back from disk (prompt tokens, part of prefix_cache_host_hits), bytes
  // written and read, files dropped as bad, blocks held now and found at start; evicted blocks that went to disk
  // past the host tier (more than its free slots at once), writes dropped (the disk refused them or its writer
  // stalled), and the seconds the engine thread waited for the disk tier (its copies past the host tier, and a
  // full write queue).
  uint64_t prefix_cache_disk_hits = 0;
  uint64_t kv_disk_bytes_written = 0, kv_disk_bytes_read = 0, kv_disk_dropped_bad = 0;
  uint64_t kv_disk_blocks = 0, kv_disk_blocks_at_start = 0;
  uint64_t kv_disk_blocks_past_host = 0, kv_disk_dropped_writes = 0;
  // Blocks on disk that lookups left to be recomputed, reading them being slower than the prefill (the disk skip).
  uint64_t kv_disk_blocks_skipped = 0;
  double kv_disk_wait_seconds = 0.0;
  // Engine-thread seconds spent handing evicted blocks down (copies enqueued, staging rounds to the disk, the disk's
  // write queue), and the seconds loads that read from the disk took from their start until every block was read
  // back and its copy up enqueued.
  double kv_evict_seconds = 0.0, kv_disk_load_seconds = 0.0;
  // Tier work in flight: device blocks held while a load fills them, host slots pinned by loads, disk writes queued
  // (findable, readable from memory); and how often the disk under the tier was found full (ENOSPC: the tier then
  // shrinks to what fits, kv_disk_bound_bytes).
  int kv_blocks_loading = 0, host_kv_blocks_pinned = 0;
  uint64_t kv_disk_blocks_queued = 0, kv_disk_full = 0, kv_disk_bound_bytes = 0;
  // The device's memory in use (total - free, as its driver reports it: every allocation of the process), and its
  // size; -1 on host backends. Read at most every 0.5 s.
  int64_t device_memory_used_bytes = -1, device_memory_total_bytes = -1;
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t num_preemptions = 0;
  uint64_t backend_sampled_tokens = 0;  // tokens sampled where the logits are (GPU sampling), not on the host
  // Speculative decoding (vLLM's spec_decode counters): verify steps of a sequence with drafts, drafted and accepted
  // tokens, and accepted tokens by draft position.
  uint64_t spec_num_drafts = 0;
  uint64_t spec_num_draft_tokens = 0;
  uint64_t spec_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_position;
  // Verify rows of the LM head computed on demand (host backends): the extra rounds and the rows they computed.
  uint64_t spec_lazy_rounds = 0;
  uint64_t spec_lazy_rows = 0;
  uint64_t requests_finished_stop = 0;
  uint64_t requests_finished_length = 0;
  uint64_t requests_finished_abort = 0;
  Histogram ttft_seconds;
  Histogram inter_token_seconds;
  Histogram time_per_output_token_seconds;  // per request: (finished - first token) / (tokens - 1)
  Histogram e2e_seconds;
  // Engine loop time split, seconds summed over all steps.
  uint64_t num_steps = 0;
  double step_schedule_seconds = 0.0;  // scheduler
  double step_prepare_seconds = 0.0;   // flattening the batch
  double step_forward_seconds = 0.0;   // model forward (including logits to host, and sampling on the backend)
  double step_sample_seconds = 0.0;    // host sampler
  double step_update_seconds = 0.0;    // appending tokens, detokenizing, stop checks, callbacks
  // The same steps split by kind: steps that compute prompt tokens (prompt chunks, alone or beside decodes) and
  // decode steps (no prompt token: each sequence's next token, with its drafts when speculating); their counts,
  // whole-step seconds, the prompt steps' prompt tokens, and the decode steps' sequences and context lengths (keys
  // the sequence's last row attends to) summed over them (mean context = context / rows).
  uint64_t num_prompt_steps = 0, num_decode_steps = 0;
  double prompt_step_seconds = 0.0, decode_step_seconds = 0.0;
  uint64_t prompt_step_prompt_tokens = 0, decode_step_rows = 0, decode_step_context = 0;
};

class Engine {
 public:
  // Loads the model and tokenizer named by config.model and starts the loop. Throws Error naming what failed.
  static std::unique_ptr<Engine> create(const EngineConfig& config);
  // For tests and embedding: wraps an already-built core (takes ownership) and starts the loop.
  explicit Engine(std::unique_ptr<engine::EngineCore> core);
  ~Engine();  // shutdown() then join
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& info() const;
  // Sampling defaults from generation_config.json (per --generation-config); the server starts from these.
  const SamplingParams& default_sampling_params() const;

  // Submits a request. Validates synchronously (throws Error(kInvalidArgument) naming the field;
  // kUnavailable when the waiting queue is full or the engine is stopping). request_id must be unique
  // among live requests. on_output receives every delta; the last has finished == true.
  void add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                   const SamplingParams& params, OutputCallback on_output);
  // Aborts a live request (no-op when unknown or finished); its blocks are freed at the next step and its
  // callback gets a final delta with finish_reason kAbort.
  void abort_request(const std::string& request_id);
  // Offline: runs every prompt to completion and returns the accumulated outputs in prompt order.
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params);
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts, const SamplingParams& params);
  // The same with one SamplingParams per prompt (or one for all). Requests are submitted as the waiting queue
  // has room, so any number of prompts fits. A prompt refused by validation throws its Error once the prompts
  // already submitted have been aborted and have ended.
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      std::span<const SamplingParams> params, const GenerateOptions& options = {});
  // Stops accepting requests, aborts every live one (each callback gets its final delta) and stops the loop.
  void shutdown();

  // Text utilities (thread-safe, run on the calling thread).
  std::vector<int32_t> tokenize(std::string_view text, bool add_special_tokens) const;
  std::string detokenize(std::span<const int32_t> ids, bool skip_special_tokens) const;
  std::string token_text(int32_t id) const;  // one token decoded alone
  // Renders the model's (or --chat-template's) chat template. Throws Error(kInvalidArgument) on bad messages.
  std::string apply_chat_template(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const;

  EngineStats stats() const;
  // Measures the device's memory bandwidth on the engine loop thread, between steps (benchmarks: the limit
  // measured in the same run). Takes a few seconds.
  MemoryBandwidth measure_memory_bandwidth();
  // Measures the dense matmul rate of the engine's backend in its activation dtype (8192^3 on a GPU, 1024^3 on the
  // host; best of a few), in TFLOP/s: the compute limit a roofline is drawn against. Same thread rules as above.
  double measure_matmul_tflops();

 private:
  // Runs task on the engine loop thread between steps and waits for it (rethrowing what it threw).
  void run_on_loop(const std::function<void()>& task);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine
