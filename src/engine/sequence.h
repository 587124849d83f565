// Sequence: one stream of tokens the scheduler runs (a request with n completions owns n sequences).
// It carries what scheduling and the KV cache need: tokens, how many have KV, the block table and the
// prefix-cache hashes of its full blocks. Sampling and output state live with the request (engine_core.h).
#pragma once

#include <cstdint>
#include <vector>

namespace peregrine::engine {

struct RequestState;

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t id = 0;  // unique and increasing with arrival: the largest id is the newest
  RequestState* request = nullptr;  // owner (null in scheduler tests)
  int index = 0;                    // completion index within the request

  std::vector<int32_t> token_ids;  // prompt followed by generated tokens
  int num_prompt_tokens = 0;
  // Tokens whose KV is in the cache. The rest, [num_computed_tokens, num_tokens()), are computed next.
  int num_computed_tokens = 0;
  std::vector<int> block_table;        // KV blocks, block i holds positions [i*bs, (i+1)*bs)
  std::vector<uint64_t> block_hashes;  // prefix-cache chain hashes of the first full blocks (memoized)
  int num_cached_blocks = 0;           // leading blocks of block_table registered in the prefix cache
  int num_prefix_hit_tokens = 0;       // prompt tokens found in the prefix cache at first admission

  SeqStatus status = SeqStatus::kWaiting;
  bool skip_prefix_cache = false;  // prompt_logprobs needs every prompt row computed
  // n > 1: siblings wait for the first sequence's prompt, then share its full prompt blocks (fork).
  Sequence* fork_leader = nullptr;       // set on a sibling while it waits
  std::vector<Sequence*> fork_waiters;   // set on the leader
  int num_preemptions = 0;

  // Speculative decoding: tokens proposed to follow token_ids, verified by the next step (never part of
  // token_ids until accepted). draft_parents[i] is the index of draft i's parent in draft_tokens, -1 for the
  // last real token (a chain has parents -1, 0, 1, ...; a token tree branches). Cleared when scheduled or preempted.
  std::vector<int32_t> draft_tokens;
  std::vector<int32_t> draft_parents;
  bool is_draft_chain() const {
    for (size_t i = 0; i < draft_parents.size(); ++i)
      if (draft_parents[i] != static_cast<int32_t>(i) - 1) return false;
    return true;
  }

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool prompt_done() const { return num_computed_tokens >= num_prompt_tokens; }
};

}  // namespace peregrine::engine
