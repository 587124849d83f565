// Tests of the Sampler: greedy and its ties, seeded reproducibility, the sampled distribution against softmax,
// top-k / top-p / min-p truncation, and logprobs equal to log_softmax of the raw logits.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "engine/sampler.h"

using namespace peregrine::engine;

namespace {

std::vector<float> random_logits(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  double m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp((logits[i] - m) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

TEST(Sampler, GreedyPicksTheArgmaxAndBreaksTiesByLowerId) {
  Sampler s;
  SamplerRng rng(1);
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f};
  SamplerParams p;
  p.temperature = 0;
  EXPECT_EQ(s.sample(logits.data(), 4, p, rng).token, 1);
  p.temperature = 1;
  p.top_k = 1;
  EXPECT_EQ(s.sample(logits.data(), 4, p, rng).token, 1);
}

// The vectorized argmax against the plain first-maximum loop: random sizes (vector tails), ties placed across
// vector lanes, NaNs, infinities, signed zeros, all -inf.
TEST(Sampler, ArgmaxEqualsTheFirstMaximumLoop) {
  auto plain = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(v.size()); ++i)
      if (v[static_cast<size_t>(i)] > v[static_cast<size_t>(best)]) best = i;
    return best;
  };
  std::mt19937 rng(7);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % 3000);
    std::vector<float> v = random_logits(vocab, static_cast<uint32_t>(trial));
    switch (trial % 8) {
      case 1:  // a tie for the maximum, the second copy in a later lane or vector
        v[rng() % v.size()] = 50.0f, v[rng() % v.size()] = 50.0f;
        break;
      case 2:  // NaNs sprinkled (never at 0)
        for (int k = 0; k < 5 && v.size() > 1; ++k) v[1 + rng() % (v.size() - 1)] = nan;
        break;
      case 3:
        v[0] = nan;
        break;
      case 4:
        v[rng() % v.size()] = inf;
        break;
      case 5:
        std::fill(v.begin(), v.end(), -inf);
        break;
      case 6:  // the maximum is a signed zero
        for (float& x : v) x = -std::fabs(x) - 1.0f;
        v[rng() % v.size()] = -0.0f, v[rng() % v.size()] = 0.0f;
        break;
      case 7:
        std::fill(v.begin(), v.end(), nan);
        break;
      default:
        break;
    }
    ASSERT_EQ(Sampler::argmax(v.data(), vocab), plain(v)) << "trial " << trial << " vocab " << vocab;
    ++checked;
  }
  EXPECT_EQ(checked, 400);
}

TEST(Sampler, SeededStreamsRepeat) {
  Sampler s;
  auto logits = random_logits(1000, 7);
  SamplerParams p;
  p.temperature = 0.9f;
  SamplerRng a(42), b(42), c(43);
  std::vector<int> ta, tb, tc;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(s.sample(logits.data(), 1000, p, a).token);
    tb.push_back(s.sample(logits.data(), 1000, p, b).token);
    tc.push_back(s.sample(logits.data(), 1000, p, c).token);
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, FrequenciesFollowTemperatureSoftmax) {
  Sampler s;
  auto logits = random_logits(8, 3);
  SamplerParams p;
  p.temperature = 0.7f;
  SamplerRng rng(5);
  const int draws = 40000;
  std::vector<int> counts(8);
  for (int i = 0; i < draws; ++i) counts[static_cast<size_t>(s.sample(logits.data(), 8, p, rng).token)]++;
  auto expected = softmax(logits, 0.7);
  for (int i = 0; i < 8; ++i) {
    double sd = std::sqrt(expected[i] * (1 - expected[i]) / draws);
    EXPECT_NEAR(counts[i] / static_cast<double>(draws), expected[i], 5 * sd + 1e-4) << "token " << i;
  }
}

TEST(Sampler, TopKTopPMinPKeepOnlyTheirSets) {
  Sampler s;
  std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f, -2.0f, 1.5f};
  auto probs = softmax(logits, 1.0);  // order: 0 (0.39), 5, 1, 2, 3, 4
  SamplerRng rng(9);
  auto seen = [&](SamplerParams p) {
    std::map<int, int> c;
    for (int i = 0; i < 3000; ++i) c[s.sample(logits.data(), 6, p, rng).token]++;
    return c;
  };
  SamplerParams k;
  k.top_k = 2;
  auto ck = seen(k);
  EXPECT_EQ(ck.size(), 2u);
  EXPECT_TRUE(ck.count(0) && ck.count(5));
  SamplerParams tp;
  tp.top_p = static_cast<float>(probs[0] + probs[5] - 1e-3);  // the first two reach p
  auto cp = seen(tp);
  EXPECT_EQ(cp.size(), 2u);
  SamplerParams mp;
  mp.min_p = static_cast<float>(probs[1] / probs[0] - 1e-3);  // keeps 0, 5, 1
  auto cm = seen(mp);
  EXPECT_EQ(cm.size(), 3u);
  EXPECT_TRUE(cm.count(1));
}

TEST(Sampler, LogprobsAreLogSoftmaxOfRawLogits) {
  Sampler s;
  auto logits = random_logits(500, 11);
  SamplerParams p;
  p.temperature = 0;
  p.num_logprobs = 5;
  SamplerRng rng(1);
  SampledToken t = s.sample(logits.data(), 500, p, rng);
  auto probs = softmax(logits, 1.0);
  EXPECT_NEAR(t.logprob, std::log(probs[static_cast<size_t>(t.token)]), 1e-5);
  ASSERT_EQ(t.top_logprobs.size(), 5u);
  EXPECT_EQ(t.top_logprobs[0].first, t.token);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(t.top_logprobs[i].second, std::log(probs[static_cast<size_t>(t.top_logprobs[i].first)]), 1e-5);
    if (i) {
      EXPECT_GE(t.top_logprobs[i - 1].second, t.top_logprobs[i].second);
    }
  }
}

}  // namespace

// Large vocabularies: top-p and min-p sort only a growing prefix; the kept set must still be exact.
TEST(Sampler, TopPAndMinPOnALargeFlatVocabularyKeepExactlyTheirSets) {
  const int vocab = 20000;
  auto logits = random_logits(vocab, 11);
  for (float& x : logits) x *= 0.05f;  // nearly flat: the kept sets run to thousands of tokens
  auto probs = softmax(logits, 1.0);
  std::vector<int> order(vocab);
  for (int i = 0; i < vocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (auto [top_p, min_p] : {std::pair{0.5f, 0.0f}, std::pair{1.0f, 0.7f}, std::pair{0.4f, 0.75f}}) {
    // Reference kept set: the prefix reaching top_p, then those within min_p of the best.
    double cum = 0;
    size_t n = 0;
    if (top_p < 1.0f) {
      while (n < order.size()) {
        cum += probs[order[n++]];
        if (cum >= top_p) break;
      }
    } else {
      n = order.size();
    }
    size_t m = 1;
    while (m < n && probs[order[m]] >= min_p * probs[order[0]]) ++m;
    if (min_p > 0) n = m;
    std::vector<bool> kept(vocab, false);
    for (size_t i = 0; i < n; ++i) kept[order[i]] = true;
    Sampler s;
    SamplerRng rng(5);
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    p.min_p = min_p;
    std::vector<int> rank(vocab);
    for (int i = 0; i < vocab; ++i) rank[order[i]] = i;
    int deepest = 0;
    for (int draw = 0; draw < 300; ++draw) {
      const int32_t t = s.sample(logits.data(), vocab, p, rng).token;
      ASSERT_TRUE(kept[t]) << "token outside the kept set, top_p " << top_p << " min_p " << min_p;
      deepest = std::max(deepest, rank[t]);
    }
    // The kept set is much larger than the first sorted prefix (256), and draws reach deep into it.
    EXPECT_GT(n, 1000u);
    EXPECT_GT(deepest, 256);
  }
}
