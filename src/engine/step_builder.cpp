// build_forward_batch: every step's ForwardBatch is made here (see step_builder.h).
#include "engine/step_builder.h"

#include <algorithm>

#include "core/status.h"

namespace peregrine::engine {

void ForwardBatch::clear() {
  token_ids.clear();
  positions.clear();
  slot_mapping.clear();
  query_start_loc.assign(1, 0);
  seq_lens.clear();
  block_tables.clear();
  max_blocks_per_seq = 0;
  logits_indices.clear();
  tree_parents.clear();
  verifying.clear();
}

void build_forward_batch(const SchedulerOutput& output, std::span<const LogitsRequest> requests, int block_size,
                         ForwardBatch& b, LogitsRows& rows, bool write_kv) {
  PEREGRINE_CHECK(requests.empty() || requests.size() == output.seqs.size(), "one logits request per sequence");
  b.clear();
  const size_t num_seqs = output.seqs.size();
  rows.sample_row.assign(num_seqs, -1);
  rows.sample_row_count.assign(num_seqs, 0);
  rows.prompt_row_begin.assign(num_seqs, -1);
  rows.prompt_row_count.assign(num_seqs, 0);

  int max_blocks = 1;
  for (const ScheduledSeq& s : output.seqs) {
    max_blocks = std::max(max_blocks, static_cast<int>(s.seq->block_table.size()));
  }
  b.max_blocks_per_seq = max_blocks;
  b.block_tables.assign(num_seqs * static_cast<size_t>(max_blocks), 0);

  for (size_t i = 0; i < num_seqs; ++i) {
    const ScheduledSeq& s = output.seqs[i];
    const Sequence& seq = *s.seq;
    const LogitsRequest req = requests.empty() ? LogitsRequest{} : requests[i];
    const int begin = seq.num_computed_tokens;
    const int end = begin + s.num_new_tokens;
    PEREGRINE_CHECK(s.num_new_tokens > 0, "a scheduled sequence computes no token");
    PEREGRINE_CHECK(s.num_draft_tokens <= static_cast<int>(seq.draft_tokens.size()), "scheduled drafts missing");
    PEREGRINE_CHECK(s.num_draft_tokens == 0 || begin + s.num_new_tokens - s.num_draft_tokens == seq.num_tokens(),
                    "drafts scheduled without the sequence's last token");
    PEREGRINE_CHECK(end <= seq.num_tokens() + s.num_draft_tokens, "scheduled past the sequence's tokens");
    PEREGRINE_CHECK(static_cast<int>(seq.block_table.size()) * block_size >= end, "block table too short");
    // A token tree: drafts whose parents are not simply the previous draft.
    bool tree = false;
    for (int d = 0; d < s.num_draft_tokens; ++d) tree = tree || seq.draft_parents[static_cast<size_t>(d)] != d - 1;
    if (tree && b.tree_parents.empty()) {
      // The step's first tree: the rows before it are chains.
      for (size_t j = 0; j + 1 < b.query_start_loc.size(); ++j)
        for (int32_t r = b.query_start_loc[j]; r < b.query_start_loc[j + 1]; ++r)
          b.tree_parents.push_back(r - b.query_start_loc[j] - 1);
    }
    const bool parents_wanted = tree || !b.tree_parents.empty();
    const int row0 = static_cast<int>(b.token_ids.size());
    const int real = seq.num_tokens();
    std::vector<int> depth(static_cast<size_t>(s.num_draft_tokens), 0);
    for (int p = begin; p < end; ++p) {
      // Drafts follow the real tokens, one KV slot each (slot index p); a tree node's RoPE position is its depth
      // past the last real token, and its parent row is its parent draft's (the last real token's for -1).
      const int d = p - real;  // draft index, < 0 for real tokens
      b.token_ids.push_back(d < 0 ? seq.token_ids[static_cast<size_t>(p)] : seq.draft_tokens[static_cast<size_t>(d)]);
      int position = p;
      int32_t parent_row = p - begin - 1;
      if (tree && d >= 0) {
        const int32_t parent = seq.draft_parents[static_cast<size_t>(d)];
        PEREGRINE_CHECK(parent >= -1 && parent < d, "draft parents must precede their children");
        depth[static_cast<size_t>(d)] = parent < 0 ? 1 : depth[static_cast<size_t>(parent)] + 1;
        position = real - 1 + depth[static_cast<size_t>(d)];
        parent_row = (real - 1 - begin) + (parent + 1);
      }
      b.positions.push_back(position);
      if (parents_wanted) b.tree_parents.push_back(parent_row);
      b.slot_mapping.push_back(
          write_kv ? seq.block_table[static_cast<size_t>(p / block_size)] * block_size + p % block_size : -1);
    }
    b.query_start_loc.push_back(static_cast<int>(b.token_ids.size()));
    b.seq_lens.push_back(end);
    if (s.num_draft_tokens > 0) {
      b.verifying.resize(num_seqs, 0);
      b.verifying[i] = 1;
    }
    std::copy(seq.block_table.begin(), seq.block_table.end(),
              b.block_tables.begin() + static_cast<ptrdiff_t>(i) * max_blocks);

    // Logits rows: the sorted union of the prompt positions (when asked) and the last sample_rows positions
    // (when sampling). Each of the two is a contiguous run of that union.
    const int prompt_end = req.prompt_rows ? std::clamp(seq.num_prompt_tokens, begin, end) : begin;
    const int k = s.samples ? std::clamp(req.sample_rows, 1, s.num_new_tokens) : 0;
    const int sample_begin = end - k;
    const int first_row = static_cast<int>(b.logits_indices.size());
    auto emit = [&](int from, int to) {
      for (int p = from; p < to; ++p) b.logits_indices.push_back(row0 + (p - begin));
    };
    if (prompt_end > begin) {
      emit(begin, prompt_end);
      rows.prompt_row_begin[i] = first_row;
      rows.prompt_row_count[i] = prompt_end - begin;
    }
    if (k > 0) {
      // Sampling rows that are prompt rows too are shared; the rest follow the prompt rows.
      rows.sample_row[i] = first_row + (std::min(sample_begin, prompt_end) - begin);
      rows.sample_row_count[i] = k;
      emit(std::max(sample_begin, prompt_end), end);
    }
  }
  rows.num_rows = static_cast<int>(b.logits_indices.size());
}

}  // namespace peregrine::engine
