// SpecController (see spec_controller.h).
#include "engine/spec/spec_controller.h"

#include <algorithm>

namespace peregrine::engine {
namespace {
constexpr double kStepDecay = 0.9;     // the slope forgets a step with drafts in ~10 of them
constexpr double kPlainWeight = 0.2;   // the plain step time over its first few steps: a running average ...
constexpr double kPlainClip = 1.5;     // ... each step counted at most this many times the average so far
constexpr uint64_t kPlainStale = 32;   // decisions without a plain step after which a trial measures one
constexpr double kMinRowSpread = 0.01;  // variance of draft rows, relative to their mean squared, to fit a line
constexpr double kGainDecay = 0.98;    // the gain forgets a verification in ~50 pure decode steps
constexpr double kPriorWeight = 2.0;   // verifications the prior of an arm's increment counts as
constexpr double kPriorAcceptance = 0.5;  // accepted per drafted row before anything is measured
}  // namespace

SpecController::SpecController(int max_drafts) {
  max_drafts = std::max(1, max_drafts);
  limits_.push_back(0);
  for (int l = 1; l < max_drafts; l *= 2) limits_.push_back(l);
  limits_.push_back(max_drafts);
  gain_.assign(limits_.size(), Gain{});
}

size_t SpecController::bucket(int batch) {
  size_t b = 0;
  while ((1 << b) < batch && b + 1 < 16) ++b;
  return b;
}

int SpecController::arm_of(int limit) const {
  const auto it = std::find(limits_.begin(), limits_.end(), limit);
  return it == limits_.end() ? -1 : static_cast<int>(it - limits_.begin());
}

void SpecController::estimate(size_t arm, double& accepted, double& rows) const {
  accepted = 0;
  rows = 0;
  for (size_t a = 1; a <= arm; ++a) {
    const Gain& g = gain_[a];
    const double width = limits_[a] - limits_[a - 1];
    const double drows = g.n > 0.5 ? g.rows / g.n : width;
    const double rate = rows > 0 ? accepted / rows : kPriorAcceptance;
    accepted += (g.accepted + kPriorWeight * rate * drows) / (g.n + kPriorWeight);
    rows += drows;
  }
}

double SpecController::mean_accepted(int limit) const {
  const int a = arm_of(limit);
  if (a < 0) return 0.0;
  double accepted, rows;
  estimate(static_cast<size_t>(a), accepted, rows);
  return accepted;
}

double SpecController::predict(const Bucket& b, int batch, size_t arm) const {
  if (b.plain_seconds <= 0) return 0.0;
  double accepted, rows_per_seq;
  estimate(arm, accepted, rows_per_seq);
  if (arm == 0) return batch / (b.plain_fast > 0 ? b.plain_fast : b.plain_seconds);
  // Steps with drafts: the fitted line where their rows spread enough, else a line through the plain step's time.
  double intercept = b.plain_seconds, slope = 0.0;
  if (b.sw > 0) {
    const double mean_d = b.sd / b.sw, mean_t = b.st / b.sw;
    const double var = b.sdd / b.sw - mean_d * mean_d;
    if (var >= kMinRowSpread * mean_d * mean_d && var > 0) {
      slope = std::max(0.0, (b.std / b.sw - mean_d * mean_t) / var);
      intercept = std::max(0.0, mean_t - slope * mean_d);
    } else if (b.sdd > 0) {
      slope = std::max(0.0, (b.std - b.plain_seconds * b.sd) / b.sdd);
    }
  }
  const double propose_per_row = b.propose_rows > 0 ? b.propose_seconds / b.propose_rows : 0.0;
  const double seconds = intercept + slope * batch * rows_per_seq + propose_per_row * rows_per_seq;
  return seconds > 0 ? batch * (1 + accepted) / seconds : 0.0;
}

int SpecController::best_arm(const Bucket& b, int batch) const {
  int best = 0;
  double best_rate = predict(b, batch, 0);
  for (size_t a = 1; a < limits_.size(); ++a) {
    const double r = predict(b, batch, a);
    if (r > best_rate) {
      best = static_cast<int>(a);
      best_rate = r;
    }
  }
  return best;
}

double SpecController::predicted_rate(int batch, int limit) const {
  const int a = arm_of(limit);
  return a < 0 ? 0.0 : predict(buckets_[bucket(batch)], batch, static_cast<size_t>(a));
}

int SpecController::best_limit(int batch) const {
  return limits_[static_cast<size_t>(best_arm(buckets_[bucket(batch)], batch))];
}

int SpecController::draft_limit(int batch) {
  Bucket& b = buckets_[bucket(batch)];
  ++b.decisions;
  drafting_trial_ = false;
  const size_t top = limits_.size() - 1;
  if (b.steps_at_one == 0) return limits_[1];
  if (b.steps_at_zero == 0) return 0;
  // A second limit with drafts tells the cost line's intercept (switching to a verify step) from its slope.
  if (b.steps_at_two == 0 && top >= 2) return limits_[2];
  const int best = best_arm(b, batch);
  if (b.decisions >= b.next_trial) {
    const bool changed = best != b.last_best;
    b.last_best = best;
    b.interval = changed ? kExploreEvery : std::min(kExploreMax, 2 * b.interval);
    b.next_trial = b.decisions + static_cast<uint64_t>(b.interval);
    // Nothing but a step without drafts measures the plain step's time; while drafting is chosen, a trial takes
    // one when the last is kPlainStale decisions old (else one slow early step could hold the choice on drafts
    // that do not pay).
    if (best > 0 && b.decisions - b.last_plain >= kPlainStale) return 0;
    if (static_cast<size_t>(best) < top) {
      drafting_trial_ = best == 0;
      return limits_[static_cast<size_t>(best) + 1];
    }
  }
  return limits_[static_cast<size_t>(best)];
}

void SpecController::record_verify(int limit, std::span<const int32_t> path, int num_drafts) {
  int below_accepted = 0, below_rows = 0;
  for (size_t a = 1; a < limits_.size() && limits_[a] <= limit; ++a) {
    const int l = limits_[a];
    int accepted = 0;
    while (accepted < static_cast<int>(path.size()) && path[static_cast<size_t>(accepted)] < l) ++accepted;
    const int rows = std::min(num_drafts, l);
    gain_[a].n += 1;
    gain_[a].accepted += accepted - below_accepted;
    gain_[a].rows += rows - below_rows;
    below_accepted = accepted;
    below_rows = rows;
  }
}

void SpecController::record_step(int batch, int limit, int rows, double seconds, double propose_seconds) {
  if (seconds <= 0 || rows <= 0 || batch <= 0) return;
  for (Gain& g : gain_) {
    g.n *= kGainDecay;
    g.accepted *= kGainDecay;
    g.rows *= kGainDecay;
  }
  Bucket& b = buckets_[bucket(batch)];
  if (limit == limits_[1]) ++b.steps_at_one;
  if (limits_.size() > 2 && limit == limits_[2]) ++b.steps_at_two;
  if (limit == 0) ++b.steps_at_zero;
  const double t = seconds - propose_seconds, d = rows - batch;
  if (limit == 0 || d <= 0) {
    // The first two such steps: the faster (a bucket's first step is often slow: a cold cache, a new batch); then
    // an average in which a step far slower than it counts as kPlainClip times as slow; from the fifth on, the
    // median of the last five, so two stalls in a row do not move it (on the CPU at c 8 two plain steps of 2x and
    // 1.5x had lifted the average by 15% and switched the bucket to drafts that lost 8%), while a lasting change
    // shows after three steps.
    b.last_plain = b.decisions;
    b.plain_recent[static_cast<size_t>(b.plain_steps % 5)] = t;
    ++b.plain_steps;
    if (b.plain_steps <= 2) {
      b.plain_seconds = b.plain_steps == 1 ? t : std::min(t, b.plain_seconds);
    } else if (b.plain_steps < 5) {
      b.plain_seconds = (1 - kPlainWeight) * b.plain_seconds + kPlainWeight * std::min(t, kPlainClip * b.plain_seconds);
    } else {
      std::array<double, 5> v = b.plain_recent;
      std::nth_element(v.begin(), v.begin() + 2, v.end());
      b.plain_seconds = v[2];
    }
    // What a step without drafts costs when nothing stalls it: the second fastest of the last five (of the three
    // or four so far). Arm 0 is predicted from it, so slow plain steps cannot make drafts that do not pay look
    // better than none (at c 4 on the CPU, three of a bucket's first five plain steps ran 1.35-2.3x slow just after
    // its prompts' prefill; the median held the estimate ~40% high for ~120 steps of drafts that lost 7%, plain
    // steps coming only as trials). The cost line of steps with drafts keeps the estimate above, which is not
    // biased low.
    if (b.plain_steps >= 3) {
      std::array<double, 5> v = b.plain_recent;
      const auto end = v.begin() + std::min(b.plain_steps, 5);
      std::nth_element(v.begin(), v.begin() + 1, end);
      b.plain_fast = v[1];
    } else {
      b.plain_fast = b.plain_seconds;
    }
    return;
  }
  b.sw = kStepDecay * b.sw + 1;
  b.st = kStepDecay * b.st + t;
  b.sd = kStepDecay * b.sd + d;
  b.sdd = kStepDecay * b.sdd + d * d;
  b.std = kStepDecay * b.std + t * d;
  b.propose_seconds = kStepDecay * b.propose_seconds + propose_seconds;
  b.propose_rows = kStepDecay * b.propose_rows + d / batch;
}

}  // namespace peregrine::engine
