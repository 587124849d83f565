// The sampling op on the host (ops/host_sampling.h, the ref backend's and the oracle of the CUDA kernels): greedy
// ties, penalties, the kept sets of top-k/top-p/min-p, seeded reproducibility and frequencies against softmax.
#include <gtest/gtest.h>

#include "sampling_checks.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "ops/host_sampling.h"
#include "peregrine/error.h"

namespace peregrine::ops {
namespace {

TensorView view(std::vector<float>& v) { return TensorView(v.data(), DType::kF32, {static_cast<int64_t>(v.size())}); }
TensorView view(std::vector<int32_t>& v) { return TensorView(v.data(), DType::kI32, {static_cast<int64_t>(v.size())}); }
TensorView view(std::vector<int64_t>& v) { return TensorView(v.data(), DType::kI64, {static_cast<int64_t>(v.size())}); }

// Draws `batch` tokens from one row repeated, row b with seed 1000003 b + 17.
std::vector<int32_t> draw(const std::vector<float>& row, int batch, float temperature, int top_k, float top_p,
                          float min_p, int64_t offset = 0) {
  const int64_t vocab = static_cast<int64_t>(row.size());
  std::vector<float> logits;
  for (int b = 0; b < batch; ++b) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<float> t(batch, temperature), p(batch, top_p), m(batch, min_p);
  std::vector<int32_t> k(batch, top_k), out(batch, -1);
  std::vector<int64_t> seeds(batch), offsets(batch, offset);
  for (int b = 0; b < batch; ++b) seeds[b] = 1000003LL * b + 17;
  SampleParams s;
  s.logits = TensorView(logits.data(), DType::kF32, {batch, vocab});
  s.temperature = view(t);
  s.top_k = view(k);
  s.top_p = view(p);
  s.min_p = view(m);
  s.seeds = view(seeds);
  s.offsets = view(offsets);
  s.out_tokens = view(out);
  host_sample(s);
  return out;
}

using testing::expect_frequencies;
using testing::softmax;

const std::vector<float> kRow = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f, 0.0f, 2.5f, -3.0f};

TEST(HostSampling, TemperatureMatchesSoftmax) {
  expect_frequencies(draw(kRow, 8000, 1.0f, 0, 1.0f, 0.0f), softmax(kRow, 1.0f));
  expect_frequencies(draw(kRow, 8000, 0.5f, 0, 1.0f, 0.0f), softmax(kRow, 0.5f));
}

TEST(HostSampling, TopKTopPMinPKeepTheRightSets) {
  const std::vector<double> p = softmax(kRow, 1.0f);
  std::vector<double> k3(p.size(), 0);  // top-k 3 and min-p 0.3 both keep tokens 3, 6, 1
  for (int i : {3, 6, 1}) k3[static_cast<size_t>(i)] = p[static_cast<size_t>(i)];
  const double s = k3[3] + k3[6] + k3[1];
  for (double& v : k3) v /= s;
  expect_frequencies(draw(kRow, 8000, 1.0f, 3, 1.0f, 0.0f), k3);
  expect_frequencies(draw(kRow, 8000, 1.0f, 0, 1.0f, 0.3f), k3);
  std::vector<double> p6(p.size(), 0);  // top-p 0.6: tokens 3 (0.43) and 6 (0.26)
  p6[3] = p[3] / (p[3] + p[6]);
  p6[6] = p[6] / (p[3] + p[6]);
  expect_frequencies(draw(kRow, 8000, 1.0f, 0, 0.6f, 0.0f), p6);
}

TEST(HostSampling, SeedsAreReproducibleOffsetsMatterGreedyTakesTheLowestTie) {
  const std::vector<float> flat(1000, 0.0f);
  EXPECT_EQ(draw(flat, 64, 1.0f, 0, 1.0f, 0.0f, 5), draw(flat, 64, 1.0f, 0, 1.0f, 0.0f, 5));
  EXPECT_NE(draw(flat, 64, 1.0f, 0, 1.0f, 0.0f, 5), draw(flat, 64, 1.0f, 0, 1.0f, 0.0f, 6));
  std::vector<float> tie = kRow;
  tie[6] = 3.0f;  // ties token 3
  for (int32_t t : draw(tie, 4, 0.0f, 0, 1.0f, 0.0f)) EXPECT_EQ(t, 3);
  for (int32_t t : draw(tie, 4, 1.0f, 1, 1.0f, 0.0f)) EXPECT_EQ(t, 3);  // top_k 1 is greedy
}

TEST(HostSampling, PenaltiesAndLogprobs) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const int batch = 6, vocab = 300;
  std::vector<float> logits(batch * vocab), temp(batch, 0.0f), rep(batch), pres(batch), freq(batch), lp(batch);
  for (float& v : logits) v = dist(rng);
  std::vector<int32_t> prompt, poff{0}, output, ooff{0}, out(batch);
  for (int b = 0; b < batch; ++b) {
    rep[b] = b % 2 ? 1.5f : 1.0f;
    pres[b] = b % 3 == 0 ? 2.0f : 0.0f;
    freq[b] = b % 3 == 1 ? 1.0f : 0.0f;
    for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>(rng() % 60));
    poff.push_back(static_cast<int32_t>(prompt.size()));
    for (int i = 0; i < 20; ++i) output.push_back(static_cast<int32_t>(rng() % 30));
    ooff.push_back(static_cast<int32_t>(output.size()));
  }
  SampleParams s;
  s.logits = TensorView(logits.data(), DType::kF32, {batch, vocab});
  s.temperature = view(temp);
  s.repetition_penalty = view(rep);
  s.presence_penalty = view(pres);
  s.frequency_penalty = view(freq);
  s.prompt_tokens = view(prompt);
  s.prompt_offsets = view(poff);
  s.output_tokens = view(output);
  s.output_offsets = view(ooff);
  s.out_tokens = view(out);
  s.out_logprobs = view(lp);
  host_sample(s);
  for (int b = 0; b < batch; ++b) {
    std::map<int, int> n;
    std::vector<bool> seen(vocab, false);
    for (int i = poff[b]; i < poff[b + 1]; ++i) seen[static_cast<size_t>(prompt[static_cast<size_t>(i)])] = true;
    for (int i = ooff[b]; i < ooff[b + 1]; ++i) {
      seen[static_cast<size_t>(output[static_cast<size_t>(i)])] = true;
      ++n[output[static_cast<size_t>(i)]];
    }
    int best = -1;
    float best_z = -INFINITY;
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < vocab; ++i) mx = std::max<double>(mx, logits[static_cast<size_t>(b * vocab + i)]);
    for (int i = 0; i < vocab; ++i) {
      const float raw = logits[static_cast<size_t>(b * vocab + i)];
      sum += std::exp(raw - mx);
      float z = raw;
      const int c = n.count(i) ? n[i] : 0;
      if (seen[static_cast<size_t>(i)] && rep[b] != 1.0f) z = z > 0 ? z / rep[b] : z * rep[b];
      z -= freq[b] * static_cast<float>(c) + (c > 0 ? pres[b] : 0.0f);
      if (z > best_z) {
        best_z = z;
        best = i;
      }
    }
    EXPECT_EQ(out[b], best) << "row " << b;
    EXPECT_NEAR(lp[b], logits[static_cast<size_t>(b * vocab + best)] - mx - std::log(sum), 1e-4) << "row " << b;
  }
  output[3] = vocab;  // out of range
  EXPECT_THROW(host_sample(s), Error);
}

// A token mask is the same as -inf logits for the refused tokens (penalties, top-k/top-p/min-p and the draw all see
// it), leaves logprobs of the raw logits, allows only its tokens, and gives token 0 when it allows nothing.
TEST(HostSampling, TokenMasksActAsMinusInfinityLogits) {
  testing::MaskedBatch m(40, 1000, 11);
  std::vector<int32_t> got(40), want(40);
  std::vector<float> got_lp(40), want_lp(40);
  host_sample(m.host_params(m.logits.data(), got.data(), got_lp.data(), true));
  std::vector<float> masked = m.masked_logits();
  host_sample(m.host_params(masked.data(), want.data(), want_lp.data(), false));
  std::vector<float> raw = m.logits;
  std::vector<int32_t> unmasked(40);
  std::vector<float> raw_lp(40);
  host_sample(m.host_params(raw.data(), unmasked.data(), raw_lp.data(), false));
  int constrained_changed = 0;
  for (int r = 0; r < 40; ++r) {
    EXPECT_EQ(got[r], want[r]) << "row " << r;
    if (r == 2) {
      EXPECT_EQ(got[r], 0) << "a mask that allows nothing";
    } else {
      EXPECT_TRUE(m.allows(r, got[r])) << "row " << r << " drew refused token " << got[r];
    }
    if (m.index[static_cast<size_t>(r)] < 0) {
      EXPECT_EQ(got[r], unmasked[r]) << "unconstrained row " << r;
    }
    if (m.index[static_cast<size_t>(r)] > 0 && got[r] != unmasked[r]) ++constrained_changed;
  }
  EXPECT_GT(constrained_changed, 10);
  // Logprobs stay those of the raw logits.
  for (int r = 0; r < 40; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < 1000; ++i) mx = std::max<double>(mx, m.logits[static_cast<size_t>(r * 1000 + i)]);
    for (int i = 0; i < 1000; ++i) sum += std::exp(m.logits[static_cast<size_t>(r * 1000 + i)] - mx);
    EXPECT_NEAR(got_lp[r], m.logits[static_cast<size_t>(r * 1000 + got[r])] - mx - std::log(sum), 1e-4) << "row " << r;
  }
  // Bad masks are refused.
  ops::SampleParams p = m.host_params(m.logits.data(), got.data(), got_lp.data(), true);
  m.index[7] = m.masks;
  EXPECT_THROW(host_sample(p), Error);
  m.index[7] = 1;
  p.allowed_tokens = TensorView(m.allowed.data(), DType::kI32, {m.masks * m.words / 32, 16});
  EXPECT_THROW(host_sample(p), Error);
  p.allowed_tokens = TensorView();
  EXPECT_THROW(host_sample(p), Error);
}

}  // namespace
}  // namespace peregrine::ops
