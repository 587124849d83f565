// SpecController: keeps speculation from costing throughput. Whether drafting pays, and how many drafts pay,
// depends on the batch: verifying k tokens per sequence is nearly free while a step is bound by reading the weights
// and costs real compute once it is not, which happens at a batch size that depends on the model, the device and
// the acceptance. The arms are draft limits per sequence: 0 (no drafts), 1, 2, 4, ... up to the method's most (its
// k, or a tree's nodes). Timing each arm's steps directly is too noisy to choose well in a few steps (a step's
// tokens vary with its acceptance), so the controller models both sides and measures each where it is steady:
//  - the cost, per batch-size bucket (powers of two): the recent time of a pure decode step without drafts, and
//    for steps with drafts a line in their draft rows fitted over the recent ones, plus proposing, per draft row;
//  - the gain, over all steps: a verified chain or tree tells what every smaller limit would have accepted too
//    (a limit keeps the first nodes, so its accepted path is the prefix of the real one within them), so each
//    verification updates the mean accepted tokens and drafted rows of every arm up to the step's, as increments
//    over the arm below; an arm with few verifications leans on a prior (the acceptance per row below it), which
//    makes larger limits look worth a try until measured.
// It runs the arm whose predicted tokens per second is highest, and now and then runs the next larger arm to keep
// the gain of larger limits known: these trials back off (16, 32, ... 256 steps apart) while the choice stays, and
// come back to every 16 steps when it changes; while drafting is chosen, a trial runs a step without drafts instead
// when none ran for 32 decisions (only such steps measure the plain step, the baseline of every prediction). A fresh bucket starts with one step of one draft, one of none and
// one of two (so a fixed cost of verify steps is told from a cost per row); the prior then climbs as far as the
// measurements bear out.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace peregrine::engine {

class SpecController {
 public:
  // max_drafts: the most draft tokens a sequence can carry (a chain's k, or a tree's nodes), at least 1.
  explicit SpecController(int max_drafts = 8);

  // The most drafts each of `batch` decoding sequences may carry in the next step: one of limits(); 0 = none.
  int draft_limit(int batch);
  // Whether the last draft_limit() was a trial of drafts in a bucket that runs none (the engine then lets the
  // proposer catch up only one sequence's backlog: such a trial measures acceptance, it need not pay everyone's).
  bool drafting_trial() const { return drafting_trial_; }
  // One sequence's verification in a step run under `limit`: it carried `num_drafts` drafts (node i's parent
  // before i) and accepted the nodes `path` (node indices, root first; empty when none was accepted).
  void record_verify(int limit, std::span<const int32_t> path, int num_drafts);
  // A pure decode step of `batch` sequences under `limit` with `rows` rows in all (sequences plus drafts) took
  // `seconds`, of which `propose_seconds` proposing its drafts.
  void record_step(int batch, int limit, int rows, double seconds, double propose_seconds);

  // The arms, ascending, from 0 to max_drafts.
  const std::vector<int>& limits() const { return limits_; }
  // Predicted tokens per second of an arm in a bucket (0 while unknown), and the arm the bucket runs now.
  double predicted_rate(int batch, int limit) const;
  int best_limit(int batch) const;
  // Mean accepted drafts per sequence and step under a limit, over the recent verifications (tests, logs).
  double mean_accepted(int limit) const;
  // Steps between two trials in a bucket (tests, logs).
  int explore_interval(int batch) const { return buckets_[bucket(batch)].interval; }

  static constexpr int kExploreEvery = 16;
  static constexpr int kExploreMax = 256;

 private:
  struct Bucket {
    // The cost: the recent time of a step without drafts (the median of the last five such steps; an average
    // before the fifth; arm 0 itself is priced at the second fastest of them, plain_fast), and a line of step
    // time in draft rows fitted over the steps with drafts (decayed sums;
    // d = their draft rows, t = their time): its intercept is what switching to a verify step costs by itself (a
    // different graph, tree pieces), its slope what each row adds. With too little spread in d, the line goes
    // through the plain step's time.
    double plain_seconds = 0;
    double plain_fast = 0;  // the second fastest of the last five such steps: arm 0's cost
    double sw = 0, sd = 0, sdd = 0, st = 0, std = 0;
    double propose_seconds = 0, propose_rows = 0;  // proposing, per draft row of a sequence
    int steps_at_one = 0, steps_at_zero = 0, steps_at_two = 0;
    uint64_t decisions = 0;
    uint64_t next_trial = kExploreEvery;
    int interval = kExploreEvery;
    int last_best = -1;  // the arm chosen at the last trial
    uint64_t last_plain = 0;  // the decision of the last step without drafts
    int plain_steps = 0;      // steps without drafts measured
    std::array<double, 5> plain_recent{};  // the last five such steps' times (a ring, plain_steps % 5 next)
  };
  // Per arm a >= 1, over the verifications run under a limit of at least limits_[a]: what it accepts and drafts
  // beyond arm a - 1 (paired differences, so arms share their noise), as decayed sums.
  struct Gain {
    double n = 0, accepted = 0, rows = 0;
  };
  // Mean accepted drafts and drafted rows per sequence under an arm (a prior fills in where data is thin).
  void estimate(size_t arm, double& accepted, double& rows) const;
  static size_t bucket(int batch);
  int arm_of(int limit) const;
  int best_arm(const Bucket& b, int batch) const;
  double predict(const Bucket& b, int batch, size_t arm) const;

  std::vector<int> limits_;
  std::vector<Gain> gain_;  // per arm, over all buckets
  bool drafting_trial_ = false;
  std::array<Bucket, 16> buckets_{};
};

}  // namespace peregrine::engine
