// StopMatcher against a brute-force reference (random stop sets and texts fed in random pieces), its linear work
// bound on adversarial stop strings (the engine-stall defect: 64 long stop strings used to cost O(text x stop
// length) per token), and the stop-string limits in SamplingParams::validate.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "core/status.h"
#include "engine/stop_matcher.h"
#include "peregrine/sampling_params.h"

namespace peregrine::engine {
namespace {

// The stop string that ends in text[from, end) and starts first (then ends first), by brute force.
std::optional<StopMatcher::Match> reference_match(const std::string& text, size_t from,
                                                  const std::vector<std::string>& stops) {
  std::optional<StopMatcher::Match> best;
  for (size_t end = from + 1; end <= text.size(); ++end) {
    size_t longest = 0, which = 0;
    for (size_t s = 0; s < stops.size(); ++s) {
      const std::string& stop = stops[s];
      if (stop.size() <= end && stop.size() > longest && text.compare(end - stop.size(), stop.size(), stop) == 0) {
        longest = stop.size();
        which = s;
      }
    }
    if (longest > 0 && (!best || end - longest < best->start)) best = StopMatcher::Match{end - longest, which};
  }
  return best;
}

// The longest suffix of text that is a prefix of a stop string (whole stop strings included).
size_t reference_held(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& stop : stops) {
    for (size_t k = std::min(stop.size(), text.size()); k > best; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        best = k;
        break;
      }
    }
  }
  return best;
}

TEST(StopMatcher, AgreesWithBruteForceOnRandomInputs) {
  std::mt19937 rng(11);
  for (int round = 0; round < 400; ++round) {
    const std::string alphabet = round % 2 ? "ab" : "abc";
    auto random_string = [&](size_t max_len) {
      std::string s(1 + rng() % max_len, 'a');
      for (char& c : s) c = alphabet[rng() % alphabet.size()];
      return s;
    };
    std::vector<std::string> stops;
    const size_t num_stops = 1 + rng() % 5;
    for (size_t i = 0; i < num_stops; ++i) stops.push_back(random_string(6));
    const StopMatcher matcher(stops);
    uint32_t state = 0;
    std::string text;
    for (int piece = 0; piece < 30; ++piece) {
      const std::string delta = random_string(4);
      const size_t from = text.size();
      const auto got = matcher.feed(state, delta, from);
      text += delta;
      const auto want = reference_match(text, from, stops);
      ASSERT_EQ(got.has_value(), want.has_value()) << "round " << round << " text '" << text << "'";
      if (got) {
        EXPECT_EQ(got->start, want->start) << "text '" << text << "'";
        EXPECT_EQ(stops[got->stop_index], stops[want->stop_index]);
        break;  // the sequence would stop here
      }
      ASSERT_EQ(matcher.held_back(state), reference_held(text, stops)) << "text '" << text << "'";
    }
  }
}

TEST(StopMatcher, FindsAStopStringSplitAcrossDeltasAndTheEarliestOfSeveral) {
  const StopMatcher m({"world", "lo w", "zz"});
  uint32_t state = 0;
  EXPECT_FALSE(m.feed(state, "hello", 0));
  EXPECT_EQ(m.held_back(state), 2u);  // "lo" may begin "lo w"
  auto match = m.feed(state, " world", 5);
  ASSERT_TRUE(match);
  EXPECT_EQ(match->stop_index, 1u);  // "lo w" starts before "world"
  EXPECT_EQ(match->start, 3u);
  const StopMatcher dup({"ab", "ab"});
  state = 0;
  match = dup.feed(state, "xab", 0);
  ASSERT_TRUE(match);
  EXPECT_EQ(match->stop_index, 0u);
}

// The defect: 64 stop strings of the longest allowed length that the output keeps almost matching. The work
// must stay linear in the output, not grow with the stop strings' length.
TEST(StopMatcher, AdversarialStopStringsCostLinearWork) {
  std::vector<std::string> stops;
  for (int i = 0; i < SamplingParams::kMaxStopStrings; ++i) {
    // Totals beyond kMaxStopBytesTotal are refused by validate(); the matcher itself does not care.
    std::string s(SamplingParams::kMaxStopStringBytes - 1, 'a');
    s += static_cast<char>('b' + i % 20);
    stops.push_back(s);
  }
  const StopMatcher m(stops);
  EXPECT_LE(m.num_states(), 64u * SamplingParams::kMaxStopStringBytes + 1);
  uint32_t state = 0;
  size_t steps = 0, fed = 0;
  const std::string token = "aaaaaaa";  // never completes a stop string
  for (int t = 0; t < 200000; ++t) {
    ASSERT_FALSE(m.feed(state, token, fed, &steps));
    fed += token.size();
  }
  EXPECT_LE(steps, 2 * fed);
  EXPECT_EQ(m.held_back(state), SamplingParams::kMaxStopStringBytes - 1);
  // Text that keeps falling back (a prefix, then a mismatch) is linear too.
  uint32_t s2 = 0;
  size_t steps2 = 0, fed2 = 0;
  std::string burst(SamplingParams::kMaxStopStringBytes - 2, 'a');
  burst += "x";
  for (int t = 0; t < 300; ++t) {
    ASSERT_FALSE(m.feed(s2, burst, fed2, &steps2));
    fed2 += burst.size();
  }
  EXPECT_LE(steps2, 2 * fed2);
  EXPECT_EQ(m.held_back(s2), 0u);
}

TEST(StopMatcher, ValidateBoundsStopStrings) {
  SamplingParams p;
  p.stop = std::vector<std::string>(64, std::string(256, 'x'));  // 16 KiB in all: allowed
  EXPECT_NO_THROW(p.validate(100));
  p.stop.push_back("y");  // 65 strings
  EXPECT_THROW(p.validate(100), Error);
  p.stop = {std::string(SamplingParams::kMaxStopStringBytes + 1, 'x')};
  EXPECT_THROW(p.validate(100), Error);
  p.stop = std::vector<std::string>(5, std::string(4000, 'x'));  // 20,000 bytes in all
  EXPECT_THROW(p.validate(100), Error);
  // The request: 64 stop strings of 70 KB.
  p.stop = std::vector<std::string>(64, std::string(70000, 'x'));
  try {
    p.validate(100);
    FAIL() << "accepted 64 x 70 KB of stop strings";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("stop"), std::string::npos);
  }
}

}  // namespace
}  // namespace peregrine::engine
