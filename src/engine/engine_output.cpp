// EngineCore's output side: appending a sampled token, detokenizing it, checking every stop condition
// (eos, stop_token_ids, stop strings, max_tokens, the context end), and building the per-request deltas.
// Stop strings: text that might be the start of a stop string is held back from streams until it is not.
#include <algorithm>

#include "core/status.h"
#include "engine/engine_core.h"
#include "engine/engine_stats.h"

namespace peregrine::engine {

void EngineCore::finish_seq(RequestState& req, SeqState& ss, FinishReason reason) {
  if (ss.finished()) return;
  ss.finish_reason = reason;
  scheduler_.finish(&ss.seq);
  if (proposer_) proposer_->forget(ss.seq);
  ++req.num_finished;
  switch (reason) {
    case FinishReason::kStop: ++stats_.requests_finished_stop; break;
    case FinishReason::kLength: ++stats_.requests_finished_length; break;
    case FinishReason::kAbort: ++stats_.requests_finished_abort; break;
    case FinishReason::kNone: break;
  }
  if (!req.touched) {
    req.touched = true;
    touched_.push_back(&req);
  }
}

void EngineCore::process_token(RequestState& req, SeqState& ss, int32_t token, double t_now) {
  const SamplingParams& p = req.params;
  Sequence& seq = ss.seq;
  seq.token_ids.push_back(token);
  if (req.grammar) ss.grammar_state = req.grammar->advance(ss.grammar_state, token);
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    ++ss.output_counts[token];
  }
  ++stats_.generation_tokens;
  if (req.timings.first_token == 0.0) {
    req.timings.first_token = t_now;
    observe(stats_.ttft_seconds, t_now - req.timings.arrival);
  }
  if (ss.last_token_time > 0.0) observe(stats_.inter_token_seconds, t_now - ss.last_token_time);
  ss.last_token_time = t_now;
  if (!req.touched) {
    req.touched = true;
    touched_.push_back(&req);
  }

  const int num_output = seq.num_output_tokens();
  const bool may_stop = num_output > p.min_tokens;
  bool stopped_by_token = false;
  if (may_stop && !p.ignore_eos &&
      std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), token) != config_.eos_token_ids.end()) {
    stopped_by_token = true;
  } else if (may_stop && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
    stopped_by_token = true;
    ss.stop_token_id = token;
  }
  // A stop token's own text is left out unless include_stop_str_in_output.
  if (!stopped_by_token || p.include_stop_str_in_output) {
    const std::string delta = ss.detokenizer->push(token);
    if (!delta.empty()) {
      const size_t old_size = ss.text.size();
      ss.text += delta;
      if (!p.stop.empty()) {
        // Incremental: only the new bytes are scanned, whatever the stop strings (engine/stop_matcher.h).
        if (!req.stop_matcher) req.stop_matcher = std::make_unique<StopMatcher>(p.stop);
        const auto match = req.stop_matcher->feed(ss.stop_state, delta, old_size);
        // Before min_tokens a stop string does not count; the automaton still follows the text.
        if (match && may_stop) {
          const std::string& stop = p.stop[match->stop_index];
          ss.text.resize(match->start + (p.include_stop_str_in_output ? stop.size() : 0));
          ss.stop_string = stop;
          finish_seq(req, ss, FinishReason::kStop);
          return;
        }
      }
    }
  }
  const bool at_length = seq.num_tokens() >= req.max_total_tokens || seq.num_tokens() >= config_.max_model_len;
  if (stopped_by_token || at_length) {
    ss.text += ss.detokenizer->flush();  // whatever the detokenizer still held back
    finish_seq(req, ss, stopped_by_token ? FinishReason::kStop : FinishReason::kLength);
  }
}

void EngineCore::emit(RequestState& req) {
  req.touched = false;
  RequestOutput out;
  out.request_id = req.id;
  out.num_prompt_tokens = static_cast<int>(req.prompt.size());
  out.num_cached_tokens = req.seqs[0]->seq.num_prefix_hit_tokens;
  const bool all_finished = req.num_finished == static_cast<int>(req.seqs.size());
  for (auto& ssp : req.seqs) {
    SeqState& ss = *ssp;
    if (ss.finish_reported) continue;
    // Text that could still be the start of a stop string is held back (O(1): the matcher's state says how much).
    const size_t held = ss.finished() || !req.stop_matcher ? 0 : req.stop_matcher->held_back(ss.stop_state);
    const size_t safe = std::max(ss.text.size() - std::min(held, ss.text.size()), ss.text_sent);
    const bool has_text = safe > ss.text_sent;
    if (!has_text && !ss.finished()) continue;
    CompletionOutput c;
    c.index = ss.seq.index;
    c.text = ss.text.substr(ss.text_sent, safe - ss.text_sent);
    ss.text_sent = safe;
    const size_t num_output = static_cast<size_t>(ss.seq.num_output_tokens());
    c.token_ids.assign(ss.seq.token_ids.begin() + ss.seq.num_prompt_tokens + static_cast<ptrdiff_t>(ss.tokens_sent),
                       ss.seq.token_ids.end());
    ss.tokens_sent = num_output;
    c.logprobs = std::move(ss.pending_logprobs);
    ss.pending_logprobs.clear();
    c.cumulative_logprob = ss.cumulative_logprob;
    c.finish_reason = ss.finish_reason;
    c.stop_string = ss.stop_string;
    c.stop_token_id = ss.stop_token_id;
    c.num_output_tokens = static_cast<int>(num_output);
    c.num_draft_tokens = ss.num_draft_tokens;
    c.num_accepted_tokens = ss.num_accepted_tokens;
    if (ss.finished()) ss.finish_reported = true;
    out.outputs.push_back(std::move(c));
  }
  if (out.outputs.empty() && !all_finished) return;
  if (!req.header_sent) {
    out.prompt_token_ids = req.prompt;
    out.prompt_logprobs = std::move(req.prompt_logprobs);
    req.header_sent = true;
  }
  out.finished = all_finished;
  out.error = req.error;
  if (all_finished) {
    req.timings.finished = now();
    observe(stats_.e2e_seconds, req.timings.finished - req.timings.arrival);
    const int generated = req.seqs[0]->seq.num_output_tokens();
    if (generated > 1 && req.timings.first_token > 0.0) {
      observe(stats_.time_per_output_token_seconds, (req.timings.finished - req.timings.first_token) / (generated - 1));
    }
    release_queued(req);
  }
  out.timings = req.timings;
  OutputCallback callback = all_finished ? std::move(req.callback) : req.callback;
  if (all_finished) {
    // Nothing may point at the request once it is gone: an abort between steps lists it in touched_ (finish_seq)
    // and would otherwise leave a dangling entry for the next step's delivery loop.
    std::replace(touched_.begin(), touched_.end(), &req, static_cast<RequestState*>(nullptr));
    const std::string id = req.id;
    requests_.erase(id);  // NOTE: req is gone from here on
  }
  if (callback) {
    try {
      callback(std::move(out));
    } catch (...) {
      // A callback must not throw; if one does, the engine keeps going for every other request.
    }
  }
}

}  // namespace peregrine::engine
