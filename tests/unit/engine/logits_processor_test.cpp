// Tests of LogitsEdits: repetition/presence/frequency penalties, logit_bias and min_tokens suppression on a known
// row, and that restore() puts back every original value (so logprobs stay raw).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/logits_processor.h"

namespace peregrine::engine {
namespace {

TEST(LogitsEdits, PenaltiesBiasAndMinTokens) {
  RequestState req;
  req.prompt_unique_tokens = {1, 2};  // sorted
  SeqState ss(0);
  ss.seq.token_ids = {1, 2, 3, 3, 4};  // prompt 1 2, output 3 3 4
  ss.seq.num_prompt_tokens = 2;
  ss.output_counts = {{3, 2}, {4, 1}};
  std::vector<float> row{1.0f, 2.0f, -2.0f, 4.0f, 0.5f, 3.0f};
  const std::vector<float> original = row;
  const std::vector<int32_t> eos{5};
  LogitsEdits edits;

  req.params.repetition_penalty = 2.0f;
  edits.apply(row.data(), 6, req, ss, eos);
  EXPECT_FLOAT_EQ(row[0], 1.0f);   // never seen
  EXPECT_FLOAT_EQ(row[1], 1.0f);   // prompt token, positive: divided
  EXPECT_FLOAT_EQ(row[2], -4.0f);  // prompt token, negative: multiplied
  EXPECT_FLOAT_EQ(row[3], 2.0f);   // output token
  EXPECT_FLOAT_EQ(row[4], 0.25f);
  edits.restore(row.data());
  EXPECT_EQ(row, original);

  req.params = SamplingParams{};
  req.params.presence_penalty = 0.5f;
  req.params.frequency_penalty = 0.25f;
  req.params.logit_bias = {{0, 10.0f}, {3, -1.0f}};
  edits.apply(row.data(), 6, req, ss, eos);
  EXPECT_FLOAT_EQ(row[0], 11.0f);
  EXPECT_FLOAT_EQ(row[1], 2.0f);                       // prompt tokens are not output tokens
  EXPECT_FLOAT_EQ(row[3], 4.0f - 0.5f - 0.5f - 1.0f);  // presence, 2 x frequency, bias
  EXPECT_FLOAT_EQ(row[4], 0.5f - 0.5f - 0.25f);
  edits.restore(row.data());
  EXPECT_EQ(row, original);

  req.params = SamplingParams{};
  req.params.min_tokens = 5;  // 3 output tokens so far: eos and stop tokens are suppressed
  req.params.stop_token_ids = {2};
  edits.apply(row.data(), 6, req, ss, eos);
  EXPECT_EQ(row[5], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(row[2], -std::numeric_limits<float>::infinity());
  EXPECT_FLOAT_EQ(row[0], 1.0f);
  edits.restore(row.data());
  EXPECT_EQ(row, original);
  req.params.min_tokens = 3;  // reached: nothing suppressed
  edits.apply(row.data(), 6, req, ss, eos);
  EXPECT_EQ(row, original);
  EXPECT_TRUE(needs_logits_edits(req.params));
  EXPECT_FALSE(needs_logits_edits(SamplingParams{}));
}

}  // namespace
}  // namespace peregrine::engine
