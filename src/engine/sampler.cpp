// Sampler implementation: filters applied in vLLM's order (temperature, top-k, top-p, min-p), then one draw;
// only the candidates a filter can keep are sorted.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"

namespace peregrine::engine {
namespace {

// The first index of the largest logit, NaNs skipped (a NaN at 0 gives 0): what the plain loop below returns.
int32_t argmax_scalar(const float* logits, int32_t vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

#if defined(__x86_64__)
// Same result, one pass: each lane keeps its largest value and the first index holding it (a strict greater-than
// never takes a NaN or a later tie); two sets of lanes take alternate vectors, then lanes merge, ties to the lower
// index.
__attribute__((target("avx2"))) int32_t argmax_avx2(const float* logits, int32_t vocab) {
  if (vocab < 64 || std::isnan(logits[0])) return argmax_scalar(logits, vocab);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 best0 = neg_inf, best1 = neg_inf;
  __m256i at0 = _mm256_setzero_si256(), at1 = _mm256_setzero_si256();
  __m256i idx0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i idx1 = _mm256_add_epi32(idx0, _mm256_set1_epi32(8));
  const __m256i step = _mm256_set1_epi32(16);
  int32_t i = 0;
  for (; i + 16 <= vocab; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(logits + i), x1 = _mm256_loadu_ps(logits + i + 8);
    const __m256 gt0 = _mm256_cmp_ps(x0, best0, _CMP_GT_OQ), gt1 = _mm256_cmp_ps(x1, best1, _CMP_GT_OQ);
    best0 = _mm256_blendv_ps(best0, x0, gt0);
    best1 = _mm256_blendv_ps(best1, x1, gt1);
    at0 = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(at0), _mm256_castsi256_ps(idx0), gt0));
    at1 = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(at1), _mm256_castsi256_ps(idx1), gt1));
    idx0 = _mm256_add_epi32(idx0, step);
    idx1 = _mm256_add_epi32(idx1, step);
  }
  alignas(32) float v0[8], v1[8];
  alignas(32) int32_t a0[8], a1[8];
  _mm256_store_ps(v0, best0);
  _mm256_store_ps(v1, best1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(a0), at0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(a1), at1);
  float m = v0[0];
  int32_t arg = a0[0];
  auto take = [&](float v, int32_t at) {
    if (v > m || (v == m && at < arg)) m = v, arg = at;
  };
  for (int k = 1; k < 8; ++k) take(v0[k], a0[k]);
  for (int k = 0; k < 8; ++k) take(v1[k], a1[k]);
  if (m == -std::numeric_limits<float>::infinity()) arg = 0;  // nothing above -inf yet: the first element stands
  for (; i < vocab; ++i)
    if (logits[i] > m) m = logits[i], arg = i;
  return arg;
}
#endif

}  // namespace

int32_t Sampler::argmax(const float* logits, int32_t vocab) {
#if defined(__x86_64__)
  static const bool avx2 = cpu_features().avx2;
  if (avx2) return argmax_avx2(logits, vocab);
#endif
  return argmax_scalar(logits, vocab);
}

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
    result.token = argmax(logits, vocab);
  } else {
    result.token = sample_filtered(logits, vocab, p, rng);
  }
  if (p.num_logprobs >= 0) {
    double lse = log_sum_exp(logits, vocab);
    result.logprob = static_cast<float>(logits[result.token] - lse);
    result.top_logprobs = top_logprobs(logits, vocab, p.num_logprobs, lse);
  }
  return result;
}

// Temperature, then top-k, top-p and min-p over candidates sorted by logit (desc, ties by lower id), then one
// draw. Only as many candidates as the filters can keep are sorted: top-k selects k; top-p and min-p grow a
// selected prefix until it provably holds every token they keep; plain temperature sorts nothing.
int32_t Sampler::sample_filtered(const float* logits, int32_t vocab, const SamplerParams& p, SamplerRng& rng) {
  const double inv_t = 1.0 / p.temperature;
  float max_logit = logits[0];
  for (int32_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  const double top = max_logit * inv_t;
  const bool by_k = p.top_k > 0 && p.top_k < vocab;
  const bool by_p = p.top_p < 1.0f;
  const bool by_min_p = p.min_p > 0.0f;
  if (!by_k && !by_p && !by_min_p) {
    // Inverse CDF over the unsorted distribution: the same distribution, no sort.
    double total = 0;
    for (int32_t i = 0; i < vocab; ++i) total += std::exp(logits[i] * inv_t - top);
    double u = rng.uniform() * total;
    for (int32_t i = 0; i < vocab; ++i) {
      u -= std::exp(logits[i] * inv_t - top);
      if (u < 0) return i;
    }
    return vocab - 1;
  }
  double mass = 0;
  const size_t keep = filter(logits, vocab, p, mass);
  double u = rng.uniform() * mass;
  for (size_t i = 0; i < keep; ++i) {
    u -= probs_[i];
    if (u < 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

// candidates_[0, keep) and probs_[0, keep): the tokens the filters keep, best first, with their probabilities at
// this temperature (not renormalized; `mass` is their sum). Without any filter every token is kept, unsorted.
size_t Sampler::filter(const float* logits, int32_t vocab, const SamplerParams& p, double& mass) {
  const double inv_t = 1.0 / p.temperature;
  float max_logit = logits[0];
  for (int32_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  const double top = max_logit * inv_t;
  const bool by_k = p.top_k > 0 && p.top_k < vocab;
  const bool by_p = p.top_p < 1.0f;
  const bool by_min_p = p.min_p > 0.0f;
  candidates_.clear();
  candidates_.reserve(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) candidates_.emplace_back(logits[i], i);
  if (!by_k && !by_p && !by_min_p) {  // every token, unsorted
    probs_.resize(static_cast<size_t>(vocab));
    mass = 0;
    for (int32_t i = 0; i < vocab; ++i) mass += probs_[static_cast<size_t>(i)] = std::exp(logits[i] * inv_t - top);
    return static_cast<size_t>(vocab);
  }
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  // Normalizer over all candidates (top-k renormalizes over its k below).
  double total_all = 0;
  if (!by_k) {
    for (int32_t i = 0; i < vocab; ++i) total_all += std::exp(logits[i] * inv_t - top);
  }
  size_t keep = static_cast<size_t>(vocab);
  if (by_k) {
    keep = static_cast<size_t>(p.top_k);
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<long>(keep) - 1, candidates_.end(), better);
    std::sort(candidates_.begin(), candidates_.begin() + static_cast<long>(keep), better);
  } else {
    // Grow a sorted prefix until top-p's mass is reached and min-p's cut is inside it.
    size_t k = std::min<size_t>(256, candidates_.size());
    for (;;) {
      std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<long>(k) - 1, candidates_.end(), better);
      double prefix = 0;
      for (size_t i = 0; i < k; ++i) prefix += std::exp(candidates_[i].first * inv_t - top);
      prefix /= total_all;
      float kth_logit = candidates_[0].first;
      for (size_t i = 0; i < k; ++i) kth_logit = std::min(kth_logit, candidates_[i].first);
      const bool p_done = !by_p || prefix >= p.top_p;
      const bool min_p_done = !by_min_p || std::exp((kth_logit - max_logit) * inv_t) < p.min_p;
      if ((p_done && min_p_done) || k == candidates_.size()) break;
      k = std::min(candidates_.size(), k * 4);
    }
    std::sort(candidates_.begin(), candidates_.begin() + static_cast<long>(k), better);
    keep = k;
  }
  // Probabilities at this temperature (over the top-k when top-k is on, else over the whole vocabulary).
  probs_.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += probs_[i] = std::exp(candidates_[i].first * inv_t - top);
  const double norm = by_k ? total : total_all;
  for (double& q : probs_) q /= norm;
  if (by_p) {  // the smallest prefix whose mass reaches top_p (always at least one token)
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      cum += probs_[n++];
      if (cum >= p.top_p) break;
    }
    keep = std::max<size_t>(1, n);
  }
  if (by_min_p) {  // drop tokens below min_p times the best probability
    size_t n = 1;
    while (n < keep && probs_[n] >= p.min_p * probs_[0]) ++n;
    keep = n;
  }
  mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += probs_[i];
  return keep;
}

SampledToken Sampler::verify(const float* logits, int32_t vocab, const SamplerParams& p, SamplerRng& rng,
                             std::span<const int32_t> drafts) {
  SampledToken result;
  if (p.temperature <= 0.0f || p.top_k == 1) {
    result.token = argmax(logits, vocab);
  } else {
    double mass = 0;
    const size_t keep = filter(logits, vocab, p, mass);
    // Multi-draft rejection with point-mass proposals: draft c is accepted with probability p'(c), p' being the
    // filtered distribution without the drafts already rejected; otherwise a token is drawn from what is left.
    // The output has exactly the distribution sample() draws from.
    removed_.clear();
    double remaining = mass;
    int32_t token = -1;
    for (int32_t c : drafts) {
      double pc = 0;
      for (size_t i = 0; i < keep; ++i) {
        if (candidates_[i].second == c) {
          pc = probs_[i];
          break;
        }
      }
      if (std::find(removed_.begin(), removed_.end(), c) != removed_.end()) pc = 0;
      if (pc > 0 && rng.uniform() * remaining < pc) {
        token = c;
        break;
      }
      if (pc > 0) {
        remaining -= pc;
        removed_.push_back(c);
      }
    }
    if (token < 0) {
      double u = rng.uniform() * remaining;
      for (size_t i = 0; i < keep && token < 0; ++i) {
        if (std::find(removed_.begin(), removed_.end(), candidates_[i].second) != removed_.end()) continue;
        u -= probs_[i];
        if (u < 0) token = candidates_[i].second;
      }
      if (token < 0) {  // rounding at the very end of the distribution: the last token still left
        for (size_t i = keep; i-- > 0;) {
          if (std::find(removed_.begin(), removed_.end(), candidates_[i].second) == removed_.end()) {
            token = candidates_[i].second;
            break;
          }
        }
        if (token < 0) token = drafts.empty() ? candidates_[0].second : drafts.back();
      }
    }
    result.token = token;
  }
  if (p.num_logprobs >= 0) {
    double lse = log_sum_exp(logits, vocab);
    result.logprob = static_cast<float>(logits[result.token] - lse);
    result.top_logprobs = top_logprobs(logits, vocab, p.num_logprobs, lse);
  }
  return result;
}

}  // namespace peregrine::engine
