// Checks shared by the host and CUDA sampling tests: softmax of a row at a temperature, and empirical token
// frequencies against probabilities.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

}  // namespace peregrine::testing
