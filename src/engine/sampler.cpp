// Sampler implementation: filters applied in vLLM's order (temperature, top-k, top-p, min-p), then one draw.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace peregrine::engine {

double Sampler::log_sum_exp(const float* logits, int32_t vocab) {
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < vocab; ++i) m = std::max(m, logits[i]);
  if (!std::isfinite(m)) return m;
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
  return m + std::log(sum);
}

std::vector<std::pair<int32_t, float>> Sampler::top_logprobs(const float* logits, int32_t vocab, int k, double lse) {
  std::vector<std::pair<int32_t, float>> out;
  if (k <= 0) return out;
  k = std::min<int>(k, vocab);
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) idx[static_cast<size_t>(i)] = i;
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  for (int i = 0; i < k; ++i) {
    int32_t id = idx[static_cast<size_t>(i)];
    out.emplace_back(id, static_cast<float>(logits[id] - lse));
  }
  return out;
}

SampledToken Sampler::sample(const float* logits, int32_t vocab, const SamplerParams& p, SamplerRng& rng) {
  SampledToken result;
  if (p.temperature <= 0.0f || p.top_k == 1) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    result.token = best;
  } else {
    // Candidates sorted by logit (desc), truncated by top-k.
    candidates_.clear();
    candidates_.reserve(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) candidates_.emplace_back(logits[i], i);
    auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t keep = candidates_.size();
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
      keep = static_cast<size_t>(p.top_k);
      std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<long>(keep), candidates_.end(), better);
    } else {
      std::sort(candidates_.begin(), candidates_.end(), better);
    }
    candidates_.resize(keep);
    // Probabilities at this temperature.
    const double inv_t = 1.0 / p.temperature;
    const double top = candidates_[0].first * inv_t;
    std::vector<double> probs(keep);
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += probs[i] = std::exp(candidates_[i].first * inv_t - top);
    for (double& q : probs) q /= total;
    // top-p: the smallest prefix whose mass reaches p (always at least one token).
    if (p.top_p < 1.0f) {
      double cum = 0;
      size_t n = 0;
      while (n < keep) {
        cum += probs[n++];
        if (cum >= p.top_p) break;
      }
      keep = std::max<size_t>(1, n);
    }
    // min-p: drop tokens below min_p times the best probability.
    if (p.min_p > 0.0f) {
      size_t n = 1;
      while (n < keep && probs[n] >= p.min_p * probs[0]) ++n;
      keep = n;
    }
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) mass += probs[i];
    double u = rng.uniform() * mass;
    size_t chosen = keep - 1;
    for (size_t i = 0; i < keep; ++i) {
      u -= probs[i];
      if (u < 0) {
        chosen = i;
        break;
      }
    }
    result.token = candidates_[chosen].second;
  }
  if (p.num_logprobs >= 0) {
    double lse = log_sum_exp(logits, vocab);
    result.logprob = static_cast<float>(logits[result.token] - lse);
    result.top_logprobs = top_logprobs(logits, vocab, p.num_logprobs, lse);
  }
  return result;
}

}  // namespace peregrine::engine
