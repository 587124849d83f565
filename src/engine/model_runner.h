// ModelRunner: turns a SchedulerOutput into one flat model::ForwardBatch (token ids, positions, slot mapping,
// block tables, sequence lengths), runs the model, and says which logits row belongs to which sequence.
// It keeps its buffers across steps so a step allocates nothing once warm.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "model/model.h"

namespace peregrine::engine {

// Where a scheduled sequence's logits landed; indices follow SchedulerOutput::seqs.
struct LogitsRows {
  std::vector<int> sample_row;         // row to sample the next token from, or -1
  std::vector<int> prompt_row_begin;   // first row of the prompt-logprob rows, or -1
  std::vector<int> prompt_row_count;   // rows for positions [num_computed, num_computed + count)
  int num_rows = 0;
};

class ModelRunner {
 public:
  explicit ModelRunner(model::Model& model);

  int vocab_size() const { return vocab_; }
  // Builds the batch. want_prompt_rows[i] != 0 asks logits for every prompt position sequence i computes
  // this step (prompt logprobs); otherwise only the sampling row is returned.
  void prepare(const SchedulerOutput& output, std::span<const uint8_t> want_prompt_rows, LogitsRows& rows);
  // Runs the prepared batch; logits becomes [rows.num_rows * vocab].
  void forward(std::vector<float>& logits);
  const model::ForwardBatch& batch() const { return batch_; }

 private:
  model::Model& model_;
  int vocab_;
  int block_size_;
  model::ForwardBatch batch_;
};

}  // namespace peregrine::engine
