// Checks shared by the host and CUDA sampling tests: softmax of a row at a temperature, and empirical token
// frequencies against probabilities.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/ops.h"

namespace peregrine::testing {

inline std::vector<double> softmax(const std::vector<float>& z, float t) {
  const double mx = *std::max_element(z.begin(), z.end());
  std::vector<double> p(z.size());
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += (p[i] = std::exp((z[i] - mx) / t));
  for (double& v : p) v /= sum;
  return p;
}

// Empirical frequencies of `tokens` within 5 sigma (+0.005) of `probs`; tokens with p = 0 must not appear.
inline void expect_frequencies(const std::vector<int32_t>& tokens, const std::vector<double>& probs) {
  std::vector<double> count(probs.size(), 0);
  for (int32_t t : tokens) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, static_cast<int32_t>(probs.size()));
    count[static_cast<size_t>(t)] += 1;
  }
  const double n = static_cast<double>(tokens.size());
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(count[i], 0) << "token " << i << " must be filtered";
      continue;
    }
    const double sigma = std::sqrt(probs[i] * (1 - probs[i]) / n);
    EXPECT_NEAR(count[i] / n, probs[i], 5 * sigma + 0.005) << "token " << i;
  }
}

// A batch for the token-mask checks: random logits and parameters of every kind (greedy and sampled rows, top-k,
// top-p, min-p, penalties), rows constrained by masks of a few allowed tokens, by a dense mask, by a mask that allows
// nothing (row 2), and unconstrained rows (index -1). Two rows share one mask.
struct MaskedBatch {
  int batch = 0, vocab = 0, words = 0, masks = 0;
  std::vector<float> logits, temperature, top_p, min_p, repetition, presence, frequency;
  std::vector<int32_t> top_k, prompt, prompt_offsets{0}, output, output_offsets{0}, allowed, index;
  std::vector<int64_t> seeds, offsets;

  MaskedBatch(int b, int v, uint32_t seed) : batch(b), vocab(v), words((v + 31) / 32 + 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 3.0f);
    logits.resize(static_cast<size_t>(b) * v);
    for (float& x : logits) x = dist(rng);
    masks = b / 2 + 1;
    allowed.assign(static_cast<size_t>(masks) * words, 0);
    for (int m = 0; m < masks; ++m) {
      auto* row = reinterpret_cast<uint32_t*>(allowed.data() + static_cast<size_t>(m) * words);
      if (m == 0) continue;  // allows nothing
      const bool dense = m % 3 == 0;
      for (int i = 0; i < v; ++i) {
        if (dense ? rng() % 4 != 0 : rng() % 97 == 0) row[i / 32] |= 1u << (i % 32);
      }
      row[(m * 7919) % v / 32] |= 1u << ((m * 7919) % v % 32);  // at least one
    }
    for (int r = 0; r < b; ++r) {
      temperature.push_back(r % 5 == 0 ? 0.0f : 0.4f + 0.1f * static_cast<float>(r % 7));
      top_k.push_back(r % 3 == 0 ? 0 : 1 + r % 30);
      top_p.push_back(r % 4 == 0 ? 1.0f : 0.6f + 0.05f * static_cast<float>(r % 8));
      min_p.push_back(r % 6 == 0 ? 0.05f : 0.0f);
      repetition.push_back(r % 2 ? 1.3f : 1.0f);
      presence.push_back(r % 3 == 1 ? 1.0f : 0.0f);
      frequency.push_back(r % 4 == 1 ? 0.5f : 0.0f);
      for (int i = 0; i < 10; ++i) prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(v)));
      prompt_offsets.push_back(static_cast<int32_t>(prompt.size()));
      for (int i = 0; i < 6; ++i) output.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(v)));
      output_offsets.push_back(static_cast<int32_t>(output.size()));
      seeds.push_back(static_cast<int64_t>(rng()));
      offsets.push_back(r);
      index.push_back(r == 2 ? 0 : r % 4 == 3 ? -1 : r == 5 ? 1 : 1 + r % (masks - 1));
    }
  }
  bool allows(int r, int token) const {
    const int32_t m = index[static_cast<size_t>(r)];
    if (m < 0) return true;
    const auto w = static_cast<uint32_t>(allowed[static_cast<size_t>(m) * words + static_cast<size_t>(token / 32)]);
    return (w >> (token % 32)) & 1u;
  }
  // The logits with every refused token at -inf (what the mask must be equivalent to).
  std::vector<float> masked_logits() const {
    std::vector<float> out = logits;
    for (int r = 0; r < batch; ++r)
      for (int i = 0; i < vocab; ++i)
        if (!allows(r, i)) out[static_cast<size_t>(r) * vocab + static_cast<size_t>(i)] = -INFINITY;
    return out;
  }
  // Host views of everything (logits: the given row-major [batch, vocab] array; with_mask: the mask views too).
  ops::SampleParams host_params(float* logits_data, int32_t* out, float* logprobs, bool with_mask) {
    auto f = [](std::vector<float>& v) { return TensorView(v.data(), DType::kF32, {static_cast<int64_t>(v.size())}); };
    auto i = [](std::vector<int32_t>& v) { return TensorView(v.data(), DType::kI32, {static_cast<int64_t>(v.size())}); };
    auto l = [](std::vector<int64_t>& v) { return TensorView(v.data(), DType::kI64, {static_cast<int64_t>(v.size())}); };
    ops::SampleParams p;
    p.logits = TensorView(logits_data, DType::kF32, {batch, vocab});
    p.temperature = f(temperature);
    p.top_k = i(top_k);
    p.top_p = f(top_p);
    p.min_p = f(min_p);
    p.repetition_penalty = f(repetition);
    p.presence_penalty = f(presence);
    p.frequency_penalty = f(frequency);
    p.prompt_tokens = i(prompt);
    p.prompt_offsets = i(prompt_offsets);
    p.output_tokens = i(output);
    p.output_offsets = i(output_offsets);
    p.seeds = l(seeds);
    p.offsets = l(offsets);
    p.out_tokens = TensorView(out, DType::kI32, {batch});
    p.out_logprobs = TensorView(logprobs, DType::kF32, {batch});
    if (with_mask) {
      p.allowed_tokens = TensorView(allowed.data(), DType::kI32, {masks, words});
      p.allowed_index = i(index);
    }
    return p;
  }
};

}  // namespace peregrine::testing
