// The one step builder: SchedulerOutput → ForwardBatch, the flattened step on the host (token ids, positions,
// slot mapping, ragged rows per sequence, context lengths, block tables, and the token rows whose logits are
// wanted). The engine's steps, the model runner's warm-up and every generation path build their batches here.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler.h"

namespace peregrine::engine {

// One step, flattened on the host. S sequences, T tokens in all, R logits rows wanted.
struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [T]
  std::vector<int32_t> positions;        // [T] position of each token in its sequence
  std::vector<int32_t> slot_mapping;     // [T] KV slot (block * block_size + offset) each token writes; -1 = none
  std::vector<int32_t> query_start_loc;  // [S + 1] token rows of sequence s: [qsl[s], qsl[s+1])
  std::vector<int32_t> seq_lens;         // [S] context length of s after this step (cached + new)
  std::vector<int32_t> block_tables;     // [S * max_blocks_per_seq], 0 padded
  int max_blocks_per_seq = 0;
  std::vector<int32_t> logits_indices;   // [R] token rows whose logits are returned, in order
  // [T] when some sequence verifies a token tree: each row's parent row within its sequence (-1 for the first),
  // with chains as parents i - 1 (ops.h AttentionParams::tree_parents); empty otherwise.
  std::vector<int32_t> tree_parents;
  // [S] 1 where the sequence's rows end with drafts to verify (the runner may lay those rows out row-exact:
  // ops::Backend::row_exact_layout), 0 elsewhere; may be empty (no sequence verifies).
  std::vector<uint8_t> verifying;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  void clear();
};

// Which logits rows a scheduled sequence wants, beside the batch order of SchedulerOutput::seqs.
struct LogitsRequest {
  // Rows for every prompt position the step computes (prompt logprobs).
  bool prompt_rows = false;
  // When the sequence samples: rows for its last `sample_rows` scheduled positions (1 = the next token only;
  // k + 1 verifies k drafted tokens).
  int sample_rows = 1;
};

// Where each scheduled sequence's logits rows landed; indices follow SchedulerOutput::seqs.
struct LogitsRows {
  std::vector<int> sample_row;        // first of the sampling rows, or -1 when the sequence does not sample
  std::vector<int> sample_row_count;  // rows for positions [end - count, end) of the scheduled chunk
  std::vector<int> prompt_row_begin;  // first prompt-logprob row, or -1
  std::vector<int> prompt_row_count;  // rows for positions [num_computed, num_computed + count)
  int num_rows = 0;
};

// Flattens the scheduled sequences into `batch` (its buffers are reused). requests may be empty (one sampling
// row per sampling sequence). write_kv false gives every token slot -1 (warm-up runs that must write no KV).
// Throws Error(kInternal) when a sequence's block table cannot hold the scheduled tokens.
void build_forward_batch(const SchedulerOutput& output, std::span<const LogitsRequest> requests, int block_size,
                         ForwardBatch& batch, LogitsRows& rows, bool write_kv = true);

}  // namespace peregrine::engine
