// EngineCore: requests in, one step at a time, sampling and prompt logprobs (see engine_core.h). Token
// processing (detokenizing, stop checks) and delivering deltas are in engine_output.cpp.
#include "engine/engine_core.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <exception>
#include <future>
#include <limits>
#include <thread>

#include "core/status.h"
#include "engine/engine_stats.h"

namespace peregrine::engine {
namespace {

// An integer environment switch (measurements and comparisons): its value where set and not empty, else fallback.
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

SchedulerConfig scheduler_config(const EngineCoreConfig& c) {
  SchedulerConfig s;
  // Verification tokens a step may carry beyond one per sequence: a quarter of the budget (at least one chain).
  s.max_draft_tokens_per_step =
      c.speculative.enabled() ? std::max(c.speculative.max_verify_tokens(), c.max_num_batched_tokens / 4) : 0;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.max_model_len = c.max_model_len;
  s.block_size = c.block_size;
  s.num_blocks = c.num_blocks;
  s.enable_prefix_caching = c.enable_prefix_caching;
  return s;
}

// splitmix64: derives independent per-request seeds from the engine seed.
uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

namespace {
// A request the backend's sampling op can serve alone: nothing edits, masks or reads its logits on the host.
bool device_samplable(const RequestState& req) {
  const SamplingParams& p = req.params;
  // Penalties and token masks (structured outputs) are the op's too; logit_bias and min_tokens are not.
  return !p.logprobs && p.logit_bias.empty() && p.min_tokens == 0;
}
}  // namespace

EngineCore::EngineCore(std::unique_ptr<ModelRunner> runner, std::shared_ptr<const TextCodec> codec,
                       const EngineCoreConfig& config, ModelInfo info)
    : runner_(std::move(runner)),
      codec_(std::move(codec)),
      config_(config),
      info_(std::move(info)),
      scheduler_(scheduler_config(config)),
      spec_controller_(config.speculative.max_verify_tokens()),
      epoch_(std::chrono::steady_clock::now()) {
  PEREGRINE_CHECK(runner_->kv_cache().num_blocks() == config.num_blocks, "KV cache and config disagree on blocks");
  PEREGRINE_CHECK(runner_->kv_cache().block_size() == config.block_size, "KV cache and config disagree on block size");
  if (static_cast<int64_t>(config.num_blocks) * config.block_size < config.max_model_len) {
    throw Error(ErrorCode::kInvalidArgument,
                "max_model_len " + std::to_string(config.max_model_len) + " exceeds the KV cache capacity of " +
                    std::to_string(static_cast<int64_t>(config.num_blocks) * config.block_size) + " tokens");
  }
  {
    const ops::Backend& be = runner_->backend();
    device_sampling_ = be.supports_sampling() &&
                       (config.device_sampling > 0 || (config.device_sampling == 0 && !be.is_host()));
  }
  // Sampling many rows is spread over a few threads (each row is independent, so results do not change).
  const int sampling_threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 4);
  if (sampling_threads > 1) sampling_pool_ = std::make_unique<ThreadPool>(sampling_threads);
  workspaces_.resize(static_cast<size_t>(sampling_threads));
  stats_.ttft_seconds = make_latency_histogram(ttft_bounds());
  stats_.inter_token_seconds = make_latency_histogram(inter_token_bounds());
  stats_.time_per_output_token_seconds = make_latency_histogram(inter_token_bounds());
  stats_.e2e_seconds = make_latency_histogram(e2e_bounds());
  stats_.spec_accepted_per_position.assign(static_cast<size_t>(std::max(0, config.speculative.max_verify_tokens())), 0);
  read_device_memory(epoch_);
  if (config.host_kv_blocks > 0 && config.enable_prefix_caching) {
    std::unique_ptr<DiskKvStore> disk;
    if (!config.kv_cache_dir.empty()) {
      DiskKvStore::Config d;
      d.dir = config.kv_cache_dir;
      d.max_bytes = config.kv_cache_disk_bytes;
      d.identity = config.kv_identity;
      d.block_size = config.block_size;
      d.payload_bytes = runner_->kv_cache().config().bytes_per_block();
      // PEREGRINE_KV_DISK_THREADS=N: N readers and N writers (measurements; the default is DiskKvStore's).
      if (const int t = env_int("PEREGRINE_KV_DISK_THREADS", 0); t > 0)
        d.reader_threads = d.writer_threads = std::min(64, t);
      disk = std::make_unique<DiskKvStore>(d);
    }
    host_tier_ = std::make_unique<HostKvTier>(runner_->backend(), runner_->kv_cache(), config.host_kv_blocks,
                                              std::move(disk));
    scheduler_.kv().set_lower_tier(host_tier_.get());
    // Copies down ahead of need: the cached blocks among the next ones an allocation evicts go down while the
    // copy queue has time, so a hit's load (whose allocation evicts them) starts its copy up at once. The window
    // takes at most 1/16 of the host tier (those blocks are then held twice). PEREGRINE_KV_COPY_AHEAD=N sets it.
    // PEREGRINE_KV_AHEAD_TO_DISK=1: with a disk tier and a host tier too small for the window, the window goes to
    // the disk (through the ring of pinned slots lent to its write queue), so a hit's allocation finds what it
    // evicts there already. Off by default: on the H200 host (a disk of ~1 GB/s) the writes it adds just before a
    // hit slowed the hit and the device hits beside it (docs/BENCHMARKS.md).
    const bool to_disk = env_int("PEREGRINE_KV_AHEAD_TO_DISK", 0) > 0 && host_tier_->disk() &&
                         config.host_kv_blocks / 16 < config.num_blocks / 4;
    int ahead = to_disk ? config.num_blocks / 4 : std::min(config.num_blocks / 4, config.host_kv_blocks / 16);
    ahead = std::max(0, env_int("PEREGRINE_KV_COPY_AHEAD", ahead));
    host_tier_->set_ahead_to_disk(to_disk);
    // A hit that runs alone waits for its load layer by layer (checked on CUDA by EngineModelTest's layered-loads
    // case; scripts/device/tier_ttft.sh measures it); PEREGRINE_KV_LAYERED_LOADS=0 waits for the whole load first.
    host_tier_->set_layered_loads(env_int("PEREGRINE_KV_LAYERED_LOADS", 1) > 0);
    if (env_int("PEREGRINE_KV_DISK_SKIP", 1) == 0) disk_skip_ = false;
    scheduler_.kv().set_copy_ahead(ahead);
  }
}

EngineCore::~EngineCore() = default;

double EngineCore::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

void EngineCore::validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const {
  const int vocab = runner_->vocab_size();
  params.validate(vocab);
  if (!params.stop.empty() && !codec_->has_tokenizer()) {
    throw Error(ErrorCode::kInvalidArgument, "stop: stop strings need a tokenizer (the engine was started with "
                                             "skip_tokenizer_init); use stop_token_ids");
  }
  if (params.structured_outputs) {
    if (!codec_->has_tokenizer()) {
      throw Error(ErrorCode::kInvalidArgument, "structured_outputs: constraints need a tokenizer (the engine was "
                                               "started with skip_tokenizer_init)", params.structured_outputs->field);
    }
    // Compiles (cached; a bad constraint is refused here, on the caller's thread) and computes the first mask, so
    // the engine loop finds both ready.
    auto grammar = grammar_cache_.get(*params.structured_outputs, token_vocab());
    grammar->warm(grammar->initial());
  }
  if (prompt.empty()) throw Error(ErrorCode::kInvalidArgument, "prompt: the prompt is empty (0 tokens)");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      throw Error(ErrorCode::kInvalidArgument, "prompt: token id " + std::to_string(prompt[i]) + " at index " +
                                                   std::to_string(i) + " is out of the vocabulary [0, " +
                                                   std::to_string(vocab) + ")");
    }
  }
  const int64_t len = static_cast<int64_t>(prompt.size());
  const int64_t max_len = config_.max_model_len;
  if (len >= max_len) {
    throw Error(ErrorCode::kInvalidArgument,
                "This model's maximum context length is " + std::to_string(max_len) + " tokens. However, your prompt has " +
                    std::to_string(len) + " tokens, which leaves no room for output. Please reduce the length of the prompt.");
  }
  if (params.max_tokens && len + *params.max_tokens > max_len) {
    throw Error(ErrorCode::kInvalidArgument,
                "This model's maximum context length is " + std::to_string(max_len) + " tokens. However, you requested " +
                    std::to_string(len + *params.max_tokens) + " tokens (" + std::to_string(len) + " in the prompt, " +
                    std::to_string(*params.max_tokens) +
                    " in the completion). Please reduce the length of the prompt or of max_tokens.");
  }
}

void EngineCore::add_request(const std::string& id, std::vector<int32_t> prompt, const SamplingParams& params,
                             OutputCallback callback, double arrival) {
  PEREGRINE_CHECK(!requests_.count(id), "duplicate request id " + id);
  auto req = std::make_unique<RequestState>();
  req->id = id;
  req->params = params;
  req->prompt = std::move(prompt);
  req->callback = std::move(callback);
  req->timings.arrival = arrival;
  const int prompt_len = static_cast<int>(req->prompt.size());
  req->max_total_tokens =
      params.max_tokens ? std::min(config_.max_model_len, prompt_len + *params.max_tokens) : config_.max_model_len;
  if (params.repetition_penalty != 1.0f) {
    req->prompt_unique_tokens = req->prompt;
    std::sort(req->prompt_unique_tokens.begin(), req->prompt_unique_tokens.end());
    req->prompt_unique_tokens.erase(std::unique(req->prompt_unique_tokens.begin(), req->prompt_unique_tokens.end()),
                                    req->prompt_unique_tokens.end());
  }
  if (params.structured_outputs) req->grammar = grammar_cache_.get(*params.structured_outputs, token_vocab());
  const uint64_t base_seed = params.seed ? *params.seed : mix_seed(config_.seed ^ mix_seed(++seed_counter_));
  for (int i = 0; i < params.n; ++i) {
    auto ss = std::make_unique<SeqState>(base_seed + static_cast<uint64_t>(i));
    Sequence& seq = ss->seq;
    seq.id = next_seq_id_++;
    seq.request = req.get();
    seq.index = i;
    seq.token_ids = req->prompt;
    seq.token_ids.reserve(static_cast<size_t>(req->max_total_tokens));
    seq.num_prompt_tokens = prompt_len;
    // Prompt logprobs need every prompt row computed: the first sequence skips the prefix cache.
    seq.skip_prefix_cache = i == 0 && params.prompt_logprobs.has_value();
    ss->detokenizer =
        codec_->make_detokenizer(req->prompt, params.skip_special_tokens, params.spaces_between_special_tokens);
    req->seqs.push_back(std::move(ss));
  }
  // n > 1: siblings share the first sequence's full prompt blocks once it has computed them.
  if (params.n > 1 && (prompt_len - 1) / config_.block_size >= 1) {
    Sequence& leader = req->seqs[0]->seq;
    for (int i = 1; i < params.n; ++i) {
      req->seqs[static_cast<size_t>(i)]->seq.fork_leader = &leader;
      leader.fork_waiters.push_back(&req->seqs[static_cast<size_t>(i)]->seq);
    }
  }
  for (auto& ss : req->seqs) scheduler_.add(&ss->seq);
  stats_.prompt_tokens += static_cast<uint64_t>(prompt_len);
  requests_.emplace(id, std::move(req));
}

void EngineCore::release_queued(RequestState& req) {
  if (req.counted_as_queued) {
    req.counted_as_queued = false;
    if (queued_counter_) queued_counter_->fetch_sub(1);
  }
}

void EngineCore::abort_request(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestState& req = *it->second;
  for (auto& ss : req.seqs) {
    if (!ss->finished()) finish_seq(req, *ss, FinishReason::kAbort);
  }
  emit(req);  // the final delta; erases the request
}

void EngineCore::abort_all(const std::string& reason) {
  std::vector<std::string> ids;
  for (auto& [id, req] : requests_) ids.push_back(id);
  for (const std::string& id : ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    RequestState& req = *it->second;
    if (!reason.empty()) req.error = reason;
    for (auto& ss : req.seqs) {
      if (!ss->finished()) finish_seq(req, *ss, FinishReason::kAbort);
    }
    emit(req);
  }
  touched_.clear();
}

PositionLogprobs EngineCore::make_logprobs(const float* row, int32_t chosen, int top_k, double lse,
                                           std::span<const int32_t> context, SamplingWorkspace& ws) const {
  const int vocab = runner_->vocab_size();
  PositionLogprobs lp;
  lp.chosen.token_id = chosen;
  lp.chosen.logprob = static_cast<float>(row[chosen] - lse);
  int rank = 1;
  for (int i = 0; i < vocab; ++i) rank += row[i] > row[chosen] ? 1 : 0;
  lp.chosen.rank = rank;
  ws.text_ids.assign(1, chosen);
  if (top_k > 0) {
    auto top = Sampler::top_logprobs(row, vocab, top_k, lse);
    for (size_t r = 0; r < top.size(); ++r) {
      lp.top.push_back({top[r].first, top[r].second, static_cast<int32_t>(r + 1), {}});
      ws.text_ids.push_back(top[r].first);
    }
  }
  codec_->token_texts_after(context, ws.text_ids, ws.text_out);
  lp.chosen.text = std::move(ws.text_out[0]);
  for (size_t r = 0; r < lp.top.size(); ++r) lp.top[r].text = std::move(ws.text_out[r + 1]);
  return lp;
}

void EngineCore::compute_prompt_logprobs(RequestState& req, const float* rows, int count, int first_position) {
  const int vocab = runner_->vocab_size();
  const int k = req.params.prompt_logprobs.value_or(0);
  if (req.prompt_logprobs.empty()) {
    PositionLogprobs first;  // the first prompt token has no logprob
    first.chosen.token_id = req.prompt[0];
    first.chosen.text = codec_->token_text(req.prompt[0]);
    req.prompt_logprobs.push_back(std::move(first));
  }
  // Row r holds the distribution of the token at position first_position + r + 1.
  const int prompt_len = static_cast<int>(req.prompt.size());
  for (int r = 0; r < count; ++r) {
    const int target = first_position + r + 1;
    if (target >= prompt_len) break;
    const float* row = rows + static_cast<size_t>(r) * vocab;
    req.prompt_logprobs.push_back(make_logprobs(row, req.prompt[static_cast<size_t>(target)], k,
                                                Sampler::log_sum_exp(row, vocab),
                                                std::span<const int32_t>(req.prompt).first(static_cast<size_t>(target)),
                                                workspaces_[0]));
  }
  if (static_cast<int>(req.prompt_logprobs.size()) >= prompt_len) req.prompt_logprobs_done = true;
}

int32_t EngineCore::sample_token(SeqState& ss, RequestState& req, float* row, SamplingWorkspace& ws,
                                 std::span<const int32_t> drafts) const {
  const SamplingParams& p = req.params;
  const int vocab = runner_->vocab_size();
  const bool edit = needs_logits_edits(p);
  const bool masked = req.grammar != nullptr;
  if (masked) {
    if (p.logprobs) ws.saved_row.assign(row, row + vocab);  // logprobs are of the model's own distribution
    apply_grammar_mask(ss, req, row, ws);
  }
  if (edit) ws.edits.apply(row, vocab, req, ss, config_.eos_token_ids);
  SamplerParams sp;
  sp.temperature = p.temperature;
  sp.top_k = p.top_k;
  sp.top_p = p.top_p;
  sp.min_p = p.min_p;
  sp.num_logprobs = -1;
  const int32_t token =
      drafts.empty() ? ws.sampler.sample(row, vocab, sp, ss.rng).token : ws.sampler.verify(row, vocab, sp, ss.rng, drafts).token;
  if (edit) ws.edits.restore(row);
  if (masked && p.logprobs) std::copy(ws.saved_row.begin(), ws.saved_row.end(), row);
  if (p.logprobs) {
    const double lse = Sampler::log_sum_exp(row, vocab);
    PositionLogprobs lp = make_logprobs(row, token, *p.logprobs, lse, ss.seq.token_ids, ws);
    ss.cumulative_logprob += lp.chosen.logprob;
    ss.pending_logprobs.push_back(std::move(lp));
  }
  return token;
}

std::shared_ptr<const structured::TokenVocab> EngineCore::token_vocab() const {
  std::lock_guard<std::mutex> lock(vocab_mutex_);
  if (!token_vocab_) {
    const int vocab = runner_->vocab_size();
    std::vector<std::string> bytes(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) bytes[static_cast<size_t>(i)] = codec_->token_bytes(i);
    std::vector<int32_t> eos;
    for (int32_t e : config_.eos_token_ids) {
      if (e >= 0 && e < vocab) eos.push_back(e);
    }
    token_vocab_ = std::make_shared<const structured::TokenVocab>(std::move(bytes), std::move(eos));
  }
  return token_vocab_;
}

// Tokens the constraint refuses get -inf (whole 64-token words at a time where none is allowed).
void EngineCore::apply_grammar_mask(const SeqState& ss, const RequestState& req, float* row, SamplingWorkspace& ws) const {
  const int vocab = runner_->vocab_size();
  structured::CompiledGrammar& g = *req.grammar;
  ws.mask.resize(g.vocab().mask_words());
  g.fill_mask(ss.grammar_state, ws.mask.data());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t words = ws.mask.size();
  for (size_t w = 0; w < words; ++w) {
    const uint64_t m = ws.mask[w];
    if (m == ~uint64_t{0}) continue;
    const int base = static_cast<int>(w * 64);
    const int end = std::min(vocab, base + 64);
    if (m == 0) {
      std::fill(row + base, row + end, kNegInf);
      continue;
    }
    for (int t = base; t < end; ++t) {
      if (!((m >> (t - base)) & 1)) row[t] = kNegInf;
    }
  }
}

EngineCore::DraftWalk EngineCore::start_walk(RequestState& req, SeqState& ss, int first_row, int num_drafts) const {
  DraftWalk w;
  w.req = &req;
  w.ss = &ss;
  w.first_row = first_row;
  const Sequence& seq = ss.seq;
  w.first_slot = seq.num_computed_tokens;
  w.drafts.assign(seq.draft_tokens.begin(), seq.draft_tokens.begin() + num_drafts);
  w.parents.assign(seq.draft_parents.begin(), seq.draft_parents.begin() + num_drafts);
  return w;
}

int EngineCore::walk_drafts(DraftWalk& w, const std::vector<uint8_t>& ready, double now) {
  const size_t vocab = static_cast<size_t>(runner_->vocab_size());
  const int num_drafts = static_cast<int>(w.drafts.size());
  // At each node its children are the candidates (in the proposer's order); the emitted token either is one of
  // them (accepted: go down) or ends the walk.
  std::vector<int32_t> candidates;
  std::vector<int> child_of;
  while (!w.done) {
    const int row = w.first_row + w.node + 1;
    if (!ready.empty() && !ready[static_cast<size_t>(row)]) return row;
    candidates.clear();
    child_of.clear();
    for (int c = 0; c < num_drafts; ++c) {
      if (w.parents[static_cast<size_t>(c)] == w.node) {
        candidates.push_back(w.drafts[static_cast<size_t>(c)]);
        child_of.push_back(c);
      }
    }
    int32_t token = 0;
    if (w.device_tokens) {
      token = w.device_tokens[w.node + 1];  // sampled where the logits are (a greedy row: its argmax)
      ++stats_.backend_sampled_tokens;
    } else {
      token = sample_token(*w.ss, *w.req, logits_.data() + static_cast<size_t>(row) * vocab, workspaces_[0], candidates);
    }
    int hit = -1;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i] == token) {
        hit = child_of[i];
        break;
      }
    }
    if (hit >= 0) {
      const size_t depth = w.path.size();
      if (depth < stats_.spec_accepted_per_position.size()) ++stats_.spec_accepted_per_position[depth];
      w.path.push_back(hit);
    }
    process_token(*w.req, *w.ss, token, now);
    if (w.ss->finished() || hit < 0) w.done = true;
    w.node = hit;
  }
  return -1;
}

int EngineCore::finish_walk(DraftWalk& w) {
  SeqState& ss = *w.ss;
  Sequence& seq = ss.seq;
  const int num_drafts = static_cast<int>(w.drafts.size());
  const int accepted = static_cast<int>(w.path.size());
  const int first_slot = w.first_slot;
  spec_controller_.record_verify(step_draft_limit_, w.path, num_drafts);
  // The accepted path's KV moves to consecutive positions (a no-op for a chain), as decoding it would have left it.
  if (!ss.finished() && !w.path.empty()) {
    std::vector<std::pair<int64_t, int64_t>> moves;
    const int bs = runner_->kv_cache().block_size();
    auto physical = [&](int64_t slot) {
      return static_cast<int64_t>(seq.block_table[static_cast<size_t>(slot / bs)]) * bs + slot % bs;
    };
    for (size_t m = 0; m < w.path.size(); ++m) {
      if (w.path[m] != static_cast<int32_t>(m))
        moves.emplace_back(physical(first_slot + w.path[m]), physical(first_slot + static_cast<int64_t>(m)));
    }
    if (!moves.empty()) runner_->kv_cache().copy_token_slots(moves);
  }
  ++stats_.spec_num_drafts;
  stats_.spec_num_draft_tokens += static_cast<uint64_t>(num_drafts);
  stats_.spec_num_accepted_tokens += static_cast<uint64_t>(accepted);
  ss.num_draft_tokens += num_drafts;
  ss.num_accepted_tokens += accepted;
  // Adaptive length: grow while everything is accepted, else ask for one more than was accepted.
  const int k = config_.speculative.num_speculative_tokens;
  if (config_.speculative.adaptive) {
    const int cur = ss.draft_length > 0 ? ss.draft_length : k;
    ss.draft_length = accepted == num_drafts ? std::min(k, cur + 2) : std::clamp(accepted + 1, 1, k);
  }
  return accepted;
}

void EngineCore::propose_drafts() {
  propose_seqs_.clear();
  propose_limits_.clear();
  const auto& spec = config_.speculative;
  for (Sequence* seq : scheduler_.running()) {
    if (seq->num_computed_tokens + 1 != seq->num_tokens() || seq->request == nullptr) continue;
    propose_seqs_.push_back(seq);
  }
  // Above this many decoding sequences a step is no longer bound by reading the weights: no speculation.
  const int limit = spec.disable_by_batch_size > 0 ? spec.disable_by_batch_size : kDefaultSpecBatchLimit;
  const int batch = static_cast<int>(propose_seqs_.size());
  // The controller's limit: drafts (a chain's length, a tree's nodes) per sequence that pay at this batch size.
  const int cap = batch > limit ? 0 : spec.adaptive ? spec_controller_.draft_limit(batch) : spec.max_verify_tokens();
  const bool off = cap == 0;
  step_draft_limit_ = cap;
  proposer_->set_tree_node_limit(cap);
  // A trial of drafts while the controller runs none catches up one sequence's backlog, not every one (at c 8 on
  // the CPU such trials cost 60-85 ms of proposing against a 3 ms step).
  proposer_->set_catch_up_limit(spec.adaptive && batch <= limit && spec_controller_.drafting_trial() ? 1 : -1);
  for (Sequence* seq : propose_seqs_) {
    const RequestState& req = *seq->request;
    const SeqState& ss = *req.seqs[static_cast<size_t>(seq->index)];
    // At most one token fewer than the request may still produce (the step emits drafts + 1 tokens).
    const int room = std::min(req.max_total_tokens, config_.max_model_len) - seq->num_tokens() - 1;
    const int want = ss.draft_length > 0 ? ss.draft_length : spec.num_speculative_tokens;
    propose_limits_.push_back(off ? 0 : std::max(0, std::min({want, room, cap})));
  }
  proposer_->propose(propose_seqs_, propose_limits_);
}

bool EngineCore::has_background_work() const {
  return scheduler_.kv().num_blocks_loading() > 0 || (host_tier_ && host_tier_->busy());
}

void EngineCore::poll_background() {
  if (host_tier_) host_tier_->poll();
  scheduler_.kv().poll_loads();
  scheduler_.kv().copy_ahead();
}

void EngineCore::step() {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (host_tier_) host_tier_->poll();  // finished copy-downs go on to the disk tier
  SchedulerOutput out = scheduler_.schedule();
  // After the schedule's allocations, before its step: the copies run beside the step's compute.
  scheduler_.kv().copy_ahead();
  const auto t1 = Clock::now();
  if (out.empty()) return;
  const double step_start = now();

  logits_requests_.assign(out.seqs.size(), LogitsRequest{});
  std::vector<int> begin_positions(out.seqs.size());
  int64_t step_prompt_tokens = 0, step_context = 0;  // the step-kind split of EngineStats
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    Sequence& seq = *out.seqs[i].seq;
    RequestState& req = *seq.request;
    begin_positions[i] = seq.num_computed_tokens;
    step_prompt_tokens += std::max(0, std::min(seq.num_computed_tokens + out.seqs[i].num_new_tokens,
                                               seq.num_prompt_tokens) - seq.num_computed_tokens);
    step_context += seq.num_computed_tokens + out.seqs[i].num_new_tokens;
    if (req.timings.first_scheduled == 0.0) {
      req.timings.first_scheduled = step_start;
      release_queued(req);
    }
    logits_requests_[i].prompt_rows = seq.index == 0 && req.params.prompt_logprobs && !req.prompt_logprobs_done;
    logits_requests_[i].sample_rows = 1 + out.seqs[i].num_draft_tokens;  // the next token, and one per draft
  }
  runner_->prepare(out, logits_requests_, rows_);
  const auto t2 = Clock::now();
  // Structured outputs: the masks of the states sampled next are computed (and cached) while the forward runs.
  std::vector<std::pair<structured::CompiledGrammar*, int32_t>> warm;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const Sequence& seq = *out.seqs[i].seq;
    const RequestState& req = *seq.request;
    if (req.grammar && out.seqs[i].samples) {
      warm.emplace_back(req.grammar.get(), req.seqs[static_cast<size_t>(seq.index)]->grammar_state);
    }
  }
  std::future<void> warming;
  if (!warm.empty()) {
    warming = std::async(std::launch::async, [&warm] {
      for (auto& [g, st] : warm) g->warm(st);
    });
  }
  // Rows of requests that need only temperature/top-k/top-p/min-p are sampled on the backend (where the logits
  // are); a request qualifies by its own parameters alone, so its tokens never depend on the batch around it.
  device_rows_.clear();
  device_masks_.clear();
  bool any_penalty = false;
  device_row_of_.assign(out.seqs.size(), -1);
  if (device_sampling_) {
    for (size_t i = 0; i < out.seqs.size(); ++i) {
      const Sequence& seq = *out.seqs[i].seq;
      const RequestState& req = *seq.request;
      if (rows_.sample_row[i] < 0 || !device_samplable(req)) continue;
      // A greedy sequence's verify rows too (each row's token is its argmax whatever the drafts before it, so
      // only the tokens come back; the walk reads them): without penalties or a constraint, whose state would
      // depend on the drafts.
      const int drafts = out.seqs[i].num_draft_tokens;
      const SamplingParams& p = req.params;
      if (drafts > 0 && !(p.temperature <= 0.0f && req.grammar == nullptr && p.repetition_penalty == 1.0f &&
                          p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f))
        continue;
      const SeqState& ss = *req.seqs[static_cast<size_t>(seq.index)];
      device_row_of_[i] = static_cast<int>(device_rows_.rows.size());
      for (int r = 0; r <= drafts; ++r) {
        device_rows_.rows.push_back(rows_.sample_row[i] + r);
        device_rows_.temperature.push_back(p.temperature);
        device_rows_.top_p.push_back(p.top_p);
        device_rows_.min_p.push_back(p.min_p);
        device_rows_.top_k.push_back(p.top_k);
        device_rows_.seeds.push_back(static_cast<int64_t>(ss.seed));
        device_rows_.offsets.push_back(seq.num_output_tokens() + r);
        device_rows_.repetition.push_back(p.repetition_penalty);
        device_rows_.presence.push_back(p.presence_penalty);
        device_rows_.frequency.push_back(p.frequency_penalty);
        if (p.repetition_penalty != 1.0f) {
          device_rows_.prompt_tokens.insert(device_rows_.prompt_tokens.end(), req.prompt.begin(), req.prompt.end());
        }
        if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
          any_penalty = true;
          device_rows_.output_tokens.insert(device_rows_.output_tokens.end(),
                                            seq.token_ids.begin() + seq.num_prompt_tokens, seq.token_ids.end());
        }
        device_rows_.prompt_offsets.push_back(static_cast<int32_t>(device_rows_.prompt_tokens.size()));
        device_rows_.output_offsets.push_back(static_cast<int32_t>(device_rows_.output_tokens.size()));
        device_masks_.emplace_back(req.grammar.get(), ss.grammar_state);
      }
    }
    if (!any_penalty) {  // the op then runs without the penalty pass
      device_rows_.drop_penalties();
    }
    // Constrained rows take their masks to the backend: filled once the forward is launched, after the masks
    // computed meanwhile (so the mask copies never wait for the warming thread's lock).
    bool any_mask = false;
    for (const auto& [g, st] : device_masks_) any_mask = any_mask || g != nullptr;
    if (any_mask) {
      device_rows_.masked.resize(device_masks_.size());
      for (size_t e = 0; e < device_masks_.size(); ++e) device_rows_.masked[e] = device_masks_[e].first != nullptr;
      device_rows_.mask_words = token_vocab()->mask_words();
      device_rows_.fill_mask = [this, &warming](size_t entry, uint64_t* words) {
        if (warming.valid()) warming.wait();
        auto [g, st] = device_masks_[entry];
        g->fill_mask(st, words);
      };
    }
  }
  // A host backend computes the LM head's rows of verified drafts on demand: each walk's first lazy_chunk rows
  // now, the others when the walk reaches them (most walks end at a rejected draft, whose later rows no one reads).
  deferred_.clear();
  int lazy_chunk = 0;
  if (runner_->lazy_logits()) {
    int verifying = 0;
    for (size_t i = 0; i < out.seqs.size(); ++i) verifying += out.seqs[i].num_draft_tokens > 0 && rows_.sample_row[i] >= 0;
    if (verifying > 0) {
      lazy_chunk = verifying == 1 ? 4 : 2;
      deferred_.assign(static_cast<size_t>(rows_.num_rows), 0);
      for (size_t i = 0; i < out.seqs.size(); ++i) {
        const int drafts = out.seqs[i].num_draft_tokens;
        if (drafts == 0 || rows_.sample_row[i] < 0) continue;
        for (int r = lazy_chunk; r <= drafts; ++r) deferred_[static_cast<size_t>(rows_.sample_row[i] + r)] = 1;
      }
    }
  }
  try {
    runner_->execute(logits_, device_rows_.rows.empty() ? nullptr : &device_rows_, deferred_.empty() ? nullptr : &deferred_);
  } catch (...) {
    device_rows_.fill_mask = nullptr;
    if (warming.valid()) warming.wait();
    throw;
  }
  device_rows_.fill_mask = nullptr;  // it refers to this step's warming
  if (warming.valid()) warming.get();
  const auto t3 = Clock::now();

  scheduler_.on_step_computed(out);
  const int vocab = runner_->vocab_size();
  std::vector<std::pair<SeqState*, int32_t>> sampled;
  sampled.reserve(out.seqs.size());
  std::vector<float*> rows;
  rows.reserve(out.seqs.size());
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    Sequence& seq = *out.seqs[i].seq;
    RequestState& req = *seq.request;
    SeqState& ss = *req.seqs[static_cast<size_t>(seq.index)];
    if (rows_.prompt_row_begin[i] >= 0) {
      compute_prompt_logprobs(req, logits_.data() + static_cast<size_t>(rows_.prompt_row_begin[i]) * vocab,
                              rows_.prompt_row_count[i], begin_positions[i]);
    }
    if (rows_.sample_row[i] >= 0 && out.seqs[i].num_draft_tokens == 0) {
      // A decoding sequence in a step with drafts that had none to verify: for the controller it accepted none.
      if (step_draft_limit_ > 0 && begin_positions[i] >= seq.num_prompt_tokens) spec_controller_.record_verify(step_draft_limit_, {}, 0);
      if (device_rows_.done && device_row_of_[i] >= 0) {
        sampled.emplace_back(&ss, device_rows_.tokens[static_cast<size_t>(device_row_of_[i])]);
        rows.push_back(nullptr);
        ++stats_.backend_sampled_tokens;
        continue;
      }
      sampled.emplace_back(&ss, -1);
      rows.push_back(logits_.data() + static_cast<size_t>(rows_.sample_row[i]) * vocab);
    }
  }
  // Each row touches only its own sequence's state, so rows can be sampled on several threads.
  const size_t num_sampled = sampled.size();
  const int threads = sampling_pool_ && num_sampled >= 16 ? sampling_pool_->num_threads() : 1;
  std::vector<std::exception_ptr> failures(static_cast<size_t>(threads));
  auto sample_part = [&](int t) {
    const size_t begin = num_sampled * static_cast<size_t>(t) / static_cast<size_t>(threads);
    const size_t end = num_sampled * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    try {
      for (size_t k = begin; k < end; ++k) {
        if (rows[k] == nullptr) continue;  // sampled on the backend
        SeqState& ss = *sampled[k].first;
        sampled[k].second = sample_token(ss, *ss.seq.request, rows[k], workspaces_[static_cast<size_t>(t)]);
      }
    } catch (...) {
      failures[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  if (threads > 1) {
    sampling_pool_->run_on_all(sample_part);
  } else {
    sample_part(0);
  }
  for (auto& f : failures) {
    if (f) std::rethrow_exception(f);
  }
  const auto t4 = Clock::now();

  const double t_now = now();
  for (auto& [ss, token] : sampled) process_token(*ss->seq.request, *ss, token, t_now);
  // Sequences that verify drafts: their rows are sampled in order (each with the state the earlier tokens left)
  // and the tokens processed as they come, so the result is what decoding them one by one gives. Rows the step
  // deferred are computed in rounds, a few rows of every walk that waits for one per round.
  walks_.clear();
  std::vector<size_t> walk_seq;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const int drafts = out.seqs[i].num_draft_tokens;
    if (drafts == 0 || rows_.sample_row[i] < 0) continue;
    Sequence& seq = *out.seqs[i].seq;
    RequestState& req = *seq.request;
    walks_.push_back(start_walk(req, *req.seqs[static_cast<size_t>(seq.index)], rows_.sample_row[i], drafts));
    if (device_rows_.done && device_row_of_[i] >= 0)
      walks_.back().device_tokens = device_rows_.tokens.data() + device_row_of_[i];
    walk_seq.push_back(i);
  }
  std::vector<uint8_t> ready;
  if (runner_->deferred_rows()) {
    ready.resize(deferred_.size());
    for (size_t r = 0; r < ready.size(); ++r) ready[r] = !deferred_[r];
  }
  std::vector<int32_t> need;
  for (;;) {
    need.clear();
    for (DraftWalk& w : walks_) {
      const int row = walk_drafts(w, ready, t_now);
      if (row < 0) continue;
      const int end = std::min(w.first_row + static_cast<int>(w.drafts.size()) + 1, row + lazy_chunk);
      for (int r = row; r < end; ++r) {
        if (ready[static_cast<size_t>(r)]) continue;
        ready[static_cast<size_t>(r)] = 1;
        need.push_back(r);
      }
    }
    if (need.empty()) break;
    runner_->compute_rows(need, logits_);
    ++stats_.spec_lazy_rounds;
    stats_.spec_lazy_rows += need.size();
  }
  for (size_t j = 0; j < walks_.size(); ++j) {
    DraftWalk& w = walks_[j];
    const int accepted = finish_walk(w);
    if (!w.ss->finished()) scheduler_.accept_drafts(out.seqs[walk_seq[j]].seq, accepted);
  }
  for (const ScheduledSeq& s : out.seqs) {
    s.seq->draft_tokens.clear();
    s.seq->draft_parents.clear();
  }
  // Measure this step for the controller when it was a pure decode step (no prompt chunk in it): from its start
  // to its tokens' delivery, plus proposing its drafts (done at the end of the step before), minus proposing the
  // next step's.
  bool measured = false;
  int step_rows = 0;
  const int draft_limit = step_draft_limit_;
  double next_propose_seconds = 0.0, next_backlog = 0.0;
  if (proposer_) {
    measured = true;
    for (const ScheduledSeq& s : out.seqs) {
      measured = measured && s.samples && s.num_new_tokens == 1 + s.num_draft_tokens && s.seq->num_output_tokens() > 0;
      step_rows += s.num_new_tokens;
    }
    const auto p0 = Clock::now();
    propose_drafts();
    next_propose_seconds = std::chrono::duration<double>(Clock::now() - p0).count();
    next_backlog = std::min(proposer_->backlog_seconds(), next_propose_seconds);
  }
  for (RequestState* req : touched_) {
    if (req) emit(*req);  // null: delivered and ended since it was listed
  }
  touched_.clear();
  const auto t5 = Clock::now();
  // The controller's step: without the proposing of the next step's drafts, with this step's, less any backlog
  // that proposing caught up (a cost of starting to draft, which would otherwise price every drafting step).
  if (measured) {
    const double seconds =
        std::chrono::duration<double>(t5 - t0).count() - next_propose_seconds + propose_seconds_ - propose_backlog_;
    spec_controller_.record_step(static_cast<int>(out.seqs.size()), draft_limit, step_rows, seconds,
                                 propose_seconds_ - propose_backlog_);
  }
  // PEREGRINE_SPEC_TRACE=1: a line a step on stderr (measurements of the controller): the batch, the draft limit
  // (P: no proposer; M: a step with a prompt chunk, unmeasured), its rows, its time with its drafts' proposing, the
  // proposing, and the controller's predicted tokens/s per limit after it.
  static const bool trace = env_int("PEREGRINE_SPEC_TRACE", 0) == 1;
  if (trace) {
    const int b = static_cast<int>(out.seqs.size());
    const double ms = std::chrono::duration<double>(t5 - t0).count() * 1e3;
    if (!proposer_) {
      bool pure = true;  // a pure decode step, as `measured` above
      for (const ScheduledSeq& s : out.seqs)
        pure = pure && s.samples && s.num_new_tokens == 1 && s.seq->num_output_tokens() > 0;
      if (pure) std::fprintf(stderr, "spec b=%d lim=P rows=%d t=%.3fms prop=0ms |\n", b, b, ms);
    } else {
      const std::string lim = (measured ? "" : "M") + std::to_string(draft_limit);
      std::fprintf(stderr, "spec b=%d lim=%s rows=%d t=%.3fms prop=%.3fms backlog=%.3fms |", b, lim.c_str(), step_rows,
                   ms - (next_propose_seconds - propose_seconds_) * 1e3, propose_seconds_ * 1e3,
                   propose_backlog_ * 1e3);
      for (int l : spec_controller_.limits()) std::fprintf(stderr, " %d:%.0f", l, spec_controller_.predicted_rate(b, l));
      std::fprintf(stderr, "\n");
    }
  }
  if (proposer_) {
    propose_seconds_ = next_propose_seconds;
    propose_backlog_ = next_backlog;
  }

  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  ++stats_.num_steps;
  stats_.step_schedule_seconds += secs(t0, t1);
  stats_.step_prepare_seconds += secs(t1, t2);
  stats_.step_forward_seconds += secs(t2, t3);
  if (step_prompt_tokens > 0) {
    ++stats_.num_prompt_steps;
    stats_.prompt_step_seconds += secs(t0, t5);
    stats_.prompt_step_prompt_tokens += static_cast<uint64_t>(step_prompt_tokens);
  } else {
    ++stats_.num_decode_steps;
    stats_.decode_step_seconds += secs(t0, t5);
    stats_.decode_step_rows += out.seqs.size();
    stats_.decode_step_context += static_cast<uint64_t>(step_context);
  }
  // The prefill rate the disk tier weighs its reads against (steps of mostly prompt tokens, a moving average).
  if (host_tier_ && disk_skip_ && out.num_batched_tokens - out.num_decodes >= 1024 && secs(t2, t3) > 0) {
    const double rate = (out.num_batched_tokens - out.num_decodes) / secs(t2, t3);
    prefill_rate_ = prefill_rate_ > 0 ? 0.7 * prefill_rate_ + 0.3 * rate : rate;
    host_tier_->set_recompute_rate(prefill_rate_);
  }
  stats_.step_sample_seconds += secs(t3, t4);
  stats_.step_update_seconds += secs(t4, t5);
  if (t5 - device_memory_read_ >= std::chrono::milliseconds(500)) read_device_memory(t5);
}

void EngineCore::read_device_memory(std::chrono::steady_clock::time_point now) {
  device_memory_read_ = now;
  size_t free_bytes = 0, total_bytes = 0;
  if (!runner_->backend().device_memory(&free_bytes, &total_bytes)) return;
  stats_.device_memory_total_bytes = static_cast<int64_t>(total_bytes);
  stats_.device_memory_used_bytes = static_cast<int64_t>(total_bytes - std::min(free_bytes, total_bytes));
}

EngineStats EngineCore::stats() const {
  EngineStats s = stats_;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  const BlockPool& pool = scheduler_.kv().pool();
  s.num_kv_blocks = pool.num_blocks();
  s.num_free_kv_blocks = pool.num_free();
  s.num_used_kv_blocks = pool.num_used();
  s.kv_usage = pool.num_blocks() ? static_cast<double>(pool.num_used()) / pool.num_blocks() : 0.0;
  s.prefix_cache_queries = scheduler_.kv().num_queried_tokens();
  s.prefix_cache_hits = scheduler_.kv().num_hit_tokens();
  if (host_tier_) {
    const HostKvTier::Stats& h = host_tier_->stats();
    s.prefix_cache_host_hits = scheduler_.kv().num_lower_tier_hit_blocks() * static_cast<uint64_t>(config_.block_size);
    s.kv_offload_blocks_to_host = h.blocks_down;
    s.kv_offload_blocks_ahead = h.blocks_ahead;
    s.kv_offload_evicted_held = h.evicted_held;
    s.kv_evict_seconds = h.evict_seconds;
    s.kv_disk_load_seconds = h.disk_load_seconds;
    s.kv_offload_blocks_from_host = h.blocks_up;
    s.kv_offload_bytes_to_host = h.bytes_down;
    s.kv_offload_bytes_from_host = h.bytes_up;
    const ops::Backend::TransferTotals t = runner_->backend().transfer_totals();  // the tiers make every transfer
    s.kv_offload_seconds_to_host = t.seconds[static_cast<int>(ops::Backend::CopyDirection::kDeviceToHost)];
    s.kv_offload_seconds_from_host = t.seconds[static_cast<int>(ops::Backend::CopyDirection::kHostToDevice)];
    s.kv_offload_timed_bytes_to_host = t.bytes[static_cast<int>(ops::Backend::CopyDirection::kDeviceToHost)];
    s.kv_offload_timed_bytes_from_host = t.bytes[static_cast<int>(ops::Backend::CopyDirection::kHostToDevice)];
    s.host_kv_blocks = host_tier_->num_slots();
    s.host_kv_blocks_used = host_tier_->num_held();
    s.host_kv_blocks_pinned = host_tier_->num_pinned();
    if (const DiskKvStore* disk = host_tier_->disk()) {
      const DiskKvStore::Stats d = disk->stats();
      s.prefix_cache_disk_hits =
          scheduler_.kv().num_lower_tier_hit_blocks_from_below() * static_cast<uint64_t>(config_.block_size);
      s.kv_disk_blocks_past_host = h.past_host;
      s.kv_disk_blocks_skipped = h.disk_skipped;
      s.kv_disk_dropped_writes = d.dropped_full;
      s.kv_disk_wait_seconds = h.wait_seconds + d.put_wait_seconds;
      s.kv_disk_bytes_written = d.bytes_written;
      s.kv_disk_bytes_read = d.bytes_read;
      s.kv_disk_dropped_bad = d.dropped_bad;
      s.kv_disk_blocks = d.held_blocks;
      s.kv_disk_blocks_at_start = d.found_at_start;
      s.kv_disk_blocks_queued = d.queued_blocks;
      s.kv_disk_full = d.disk_full;
      s.kv_disk_bound_bytes = d.bound_bytes;
    }
  }
  s.kv_blocks_loading = scheduler_.kv().num_blocks_loading();
  s.num_preemptions = scheduler_.num_preemptions();
  return s;
}

}  // namespace peregrine::engine
