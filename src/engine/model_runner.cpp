// ModelRunner: flattening a step into a ForwardBatch and running it (see model_runner.h).
#include "engine/model_runner.h"

#include <algorithm>

#include "core/status.h"

namespace peregrine::engine {

ModelRunner::ModelRunner(model::Model& model)
    : model_(model),
      vocab_(static_cast<int>(model.config().vocab_size)),
      block_size_(model.kv_cache_spec().block_size) {}

void ModelRunner::prepare(const SchedulerOutput& output, std::span<const uint8_t> want_prompt_rows,
                          LogitsRows& rows) {
  model::ForwardBatch& b = batch_;
  b.token_ids.clear();
  b.positions.clear();
  b.slot_mapping.clear();
  b.query_start_loc.assign(1, 0);
  b.seq_lens.clear();
  b.block_tables.clear();
  b.logits_indices.clear();
  const size_t num_seqs = output.seqs.size();
  rows.sample_row.assign(num_seqs, -1);
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
    const int begin = seq.num_computed_tokens;
    const int end = begin + s.num_new_tokens;
    PEREGRINE_CHECK(end <= seq.num_tokens(), "scheduled past the sequence's tokens");
    PEREGRINE_CHECK(static_cast<int>(seq.block_table.size()) * block_size_ >= end, "block table too short");
    const int row0 = static_cast<int>(b.token_ids.size());
    for (int p = begin; p < end; ++p) {
      b.token_ids.push_back(seq.token_ids[static_cast<size_t>(p)]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(seq.block_table[static_cast<size_t>(p / block_size_)] * block_size_ + p % block_size_);
    }
    b.query_start_loc.push_back(static_cast<int>(b.token_ids.size()));
    b.seq_lens.push_back(end);
    std::copy(seq.block_table.begin(), seq.block_table.end(),
              b.block_tables.begin() + static_cast<ptrdiff_t>(i) * max_blocks);

    // Logits rows: prompt positions first (when asked), then the sampling row unless already among them.
    if (!want_prompt_rows.empty() && want_prompt_rows[i] && begin < seq.num_prompt_tokens) {
      const int count = std::min(end, seq.num_prompt_tokens) - begin;
      rows.prompt_row_begin[i] = static_cast<int>(b.logits_indices.size());
      rows.prompt_row_count[i] = count;
      for (int k = 0; k < count; ++k) b.logits_indices.push_back(row0 + k);
      if (s.samples && end == seq.num_prompt_tokens) rows.sample_row[i] = rows.prompt_row_begin[i] + count - 1;
    }
    if (s.samples && rows.sample_row[i] < 0) {
      rows.sample_row[i] = static_cast<int>(b.logits_indices.size());
      b.logits_indices.push_back(row0 + s.num_new_tokens - 1);
    }
  }
  rows.num_rows = static_cast<int>(b.logits_indices.size());
}

void ModelRunner::forward(std::vector<float>& logits) {
  if (batch_.token_ids.empty()) {
    logits.clear();
    return;
  }
  model_.forward(batch_, logits);
  PEREGRINE_CHECK(logits.size() == batch_.logits_indices.size() * static_cast<size_t>(vocab_),
                  "model returned the wrong number of logits");
}

}  // namespace peregrine::engine
