// Sampler: turns one row of logits into a token for one request: greedy, temperature, top-k, top-p, min-p,
// with a per-request random stream (seeded for reproducibility), and the logprobs users ask for.
// Logprobs are those of the model's raw distribution (log_softmax of the logits), as vLLM reports by default.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
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

  // Speculative verification at one position: the token to emit there, given the draft tokens proposed for it
  // (distinct, in order of preference). Greedy: the argmax (the caller sees which draft, if any, it equals).
  // Sampling: drafts are accepted by multi-draft rejection with point-mass proposals, so the result has exactly
  // the distribution sample() draws from (other random draws than sample(), so seeded outputs differ).
  SampledToken verify(const float* logits, int32_t vocab, const SamplerParams& params, SamplerRng& rng,
                      std::span<const int32_t> drafts);

  // log_softmax helpers, exposed for prompt logprobs and tests.
  static double log_sum_exp(const float* logits, int32_t vocab);
  // The first index of the largest logit (NaNs skipped; a NaN at index 0 gives 0); vectorized where AVX2 exists.
  static int32_t argmax(const float* logits, int32_t vocab);
  static std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int32_t vocab, int k, double lse);

 private:
  int32_t sample_filtered(const float* logits, int32_t vocab, const SamplerParams& params, SamplerRng& rng);
  size_t filter(const float* logits, int32_t vocab, const SamplerParams& params, double& mass);

  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
  std::vector<double> probs_;                          // scratch
  std::vector<int32_t> removed_;                       // scratch: rejected drafts
};

}  // namespace peregrine::engine
