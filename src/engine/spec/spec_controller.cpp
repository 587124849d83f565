// SpecController (see spec_controller.h).
#include "engine/spec/spec_controller.h"

#include <algorithm>

namespace peregrine::engine {

SpecController::SpecController(int max_drafts) {
  max_drafts = std::max(1, max_drafts);
  limits_.push_back(0);
  for (int l = 1; l < max_drafts; l *= 2) limits_.push_back(l);
  limits_.push_back(max_drafts);
  for (Bucket& b : buckets_) {
    b.rate.assign(limits_.size(), 0.0);
    b.samples.assign(limits_.size(), 0);
  }
}

size_t SpecController::bucket(int batch) {
  size_t b = 0;
  while ((1 << b) < batch && b + 1 < 16) ++b;
  return b;
}

SpecController::Bucket& SpecController::at(int batch) { return buckets_[bucket(batch)]; }

int SpecController::arm_of(int limit) const {
  const auto it = std::find(limits_.begin(), limits_.end(), limit);
  return it == limits_.end() ? -1 : static_cast<int>(it - limits_.begin());
}

int SpecController::best_arm(const Bucket& b) {
  int best = -1;
  for (size_t a = 0; a < b.rate.size(); ++a) {
    if (b.samples[a] > 0 && (best < 0 || b.rate[a] > b.rate[static_cast<size_t>(best)])) best = static_cast<int>(a);
  }
  return std::max(best, 0);
}

double SpecController::rate(int batch, int limit) const {
  const int a = arm_of(limit);
  return a < 0 ? 0.0 : buckets_[bucket(batch)].rate[static_cast<size_t>(a)];
}

int SpecController::best_limit(int batch) const { return limits_[static_cast<size_t>(best_arm(buckets_[bucket(batch)]))]; }

int SpecController::draft_limit(int batch) {
  Bucket& b = at(batch);
  ++b.decisions;
  b.trial_arm = -1;  // a trial not measured (its step was not a pure decode step) is dropped
  const size_t top = limits_.size() - 1;
  if (b.samples[top] < kWarmSteps && b.samples[top] <= b.samples[0]) return limits_[top];
  if (b.samples[0] < kWarmSteps) return 0;
  const int best = best_arm(b);
  if (b.decisions >= b.next_trial) {
    const int n = static_cast<int>(limits_.size());
    int cand = best + b.direction;
    if (cand < 0 || cand >= n) cand = best - b.direction;
    if (cand >= 0 && cand < n && cand != best) {
      b.next_trial = b.decisions + static_cast<uint64_t>(b.interval);
      b.trial_arm = cand;
      return limits_[static_cast<size_t>(cand)];
    }
  }
  return limits_[static_cast<size_t>(best)];
}

void SpecController::record(int batch, int limit, int tokens, double seconds) {
  const int a = arm_of(limit);
  if (seconds <= 0 || tokens <= 0 || a < 0) return;
  Bucket& b = at(batch);
  const size_t m = static_cast<size_t>(a);
  const double x = tokens / seconds;
  const bool trial = b.trial_arm == a;
  const int best_before = best_arm(b);
  // A trial's measurement is rare and the arm's old rate stale, so it weighs more than a routine one.
  const double w = trial ? 0.5 : 0.2;
  b.rate[m] = b.samples[m] == 0 ? x : (1 - w) * b.rate[m] + w * x;
  ++b.samples[m];
  if (!trial) return;
  b.trial_arm = -1;
  const double best_rate = b.rate[static_cast<size_t>(best_before)];
  if (b.rate[m] > best_rate) {
    // A climb: keep going the same way, now.
    b.direction = a > best_before ? 1 : -1;
    b.interval = kExploreEvery;
    b.next_trial = b.decisions + 1;
    return;
  }
  const bool clearly_slower = b.rate[m] < kClearlySlower * best_rate;
  b.interval = clearly_slower ? std::min(kExploreMax, 2 * b.interval) : kExploreEvery;
  b.next_trial = b.decisions + static_cast<uint64_t>(b.interval);
  b.direction = -b.direction;
}

}  // namespace peregrine::engine
