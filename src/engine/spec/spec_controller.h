// SpecController: keeps speculation from costing throughput. Whether drafting pays, and how many drafts pay,
// depends on the batch: verifying k tokens per sequence is nearly free while a step is bound by reading the weights
// and costs real compute once it is not, which happens at a batch size that depends on the model, the device and
// the acceptance. So the engine measures it. The arms are draft limits per sequence: 0 (no drafts), 1, 2, 4, ...
// up to the method's most (its k, or a tree's nodes). Per batch-size bucket (powers of two) the controller keeps
// the tokens per second of pure decode steps run under each arm (a step's time includes proposing its drafts and
// delivering its tokens), runs the best one, and now and then tries a neighbour of it (the next smaller or larger
// limit): a neighbour that wins becomes the best and the next one in that direction is tried at once (a climb);
// trials back off (16, 32, ... 256 steps apart) while they keep confirming the best, and come back to every 16
// steps when the two are close. A fresh bucket starts by measuring the two ends, all drafts and none.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace peregrine::engine {

class SpecController {
 public:
  // max_drafts: the most draft tokens a sequence can carry (a chain's k, or a tree's nodes), at least 1.
  explicit SpecController(int max_drafts = 8);

  // The most drafts each of `batch` decoding sequences may carry in the next step: one of limits(); 0 = none.
  int draft_limit(int batch);
  // A pure decode step of `batch` sequences, run under `limit` (what draft_limit returned), emitted `tokens` in
  // `seconds`.
  void record(int batch, int limit, int tokens, double seconds);

  // The arms, ascending, from 0 to max_drafts.
  const std::vector<int>& limits() const { return limits_; }
  // Measured tokens per second of an arm in a bucket (tests, logs); 0 before a measurement.
  double rate(int batch, int limit) const;
  // The arm the bucket runs now (tests, logs).
  int best_limit(int batch) const;
  // Steps between two trials in a bucket (tests, logs).
  int explore_interval(int batch) const { return buckets_[bucket(batch)].interval; }

  static constexpr int kWarmSteps = 3;  // measurements of each end before choosing
  static constexpr int kExploreEvery = 16;
  static constexpr int kExploreMax = 256;
  // A trial that finds its arm below this fraction of the best one's rate doubles the interval.
  static constexpr double kClearlySlower = 0.92;

 private:
  struct Bucket {
    std::vector<double> rate;
    std::vector<int> samples;
    uint64_t decisions = 0;
    uint64_t next_trial = kExploreEvery;
    int interval = kExploreEvery;
    int trial_arm = -1;  // the arm a pending trial runs, -1 when none
    int direction = -1;  // where the next trial looks from the best arm: -1 smaller limits, +1 larger
  };
  static size_t bucket(int batch);
  Bucket& at(int batch);
  int arm_of(int limit) const;
  static int best_arm(const Bucket& b);

  std::vector<int> limits_;
  std::array<Bucket, 16> buckets_{};
};

}  // namespace peregrine::engine
