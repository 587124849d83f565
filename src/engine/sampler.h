// Sampler: turns one row of logits into a token for one request: greedy, temperature, top-k, top-p, min-p,
// with a per-request random stream (seeded for reproducibility), and the logprobs users ask for.
// Logprobs are those of the model's raw distribution (log_softmax of the logits), as vLLM reports by default.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

namespace peregrine::engine {

struct SamplerParams {
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // 0 or -1 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  int num_logprobs = -1;     // -1: none; k >= 0: the sampled token's logprob plus the top k
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;                                 // of the sampled token (when asked)
  std::vector<std::pair<int32_t, float>> top_logprobs;  // best first, ties by lower id
};

// A request's random stream. Seeded streams give the same tokens whatever else runs in the batch.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed) : engine_(seed) {}
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }

 private:
  std::mt19937_64 engine_;
};

class Sampler {
 public:
  // logits: [vocab] f32 (not modified). Thread-compatible: one call per row, any thread.
  SampledToken sample(const float* logits, int32_t vocab, const SamplerParams& params, SamplerRng& rng);

  // log_softmax helpers, exposed for prompt logprobs and tests.
  static double log_sum_exp(const float* logits, int32_t vocab);
  // The first index of the largest logit (NaNs skipped; a NaN at index 0 gives 0); vectorized where AVX2 exists.
  static int32_t argmax(const float* logits, int32_t vocab);
  static std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t vocab, int k, double lse);

 private:
  int32_t sample_filtered(const float* logits, int32_t vocab, const SamplerParams& params, SamplerRng& rng);

  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
  std::vector<double> probs_;                          // scratch
};

}  // namespace peregrine::engine
