// SpecController: keeps speculation from costing throughput. Whether drafting pays depends on the batch: verifying
// k tokens per sequence is nearly free while a step is bound by reading the weights and costs real compute once it
// is not, which happens at a batch size that depends on the model, the device and the acceptance. So the engine
// measures it: per batch-size bucket (powers of two) it keeps the tokens per second of pure decode steps run with
// and without drafts, runs the better mode, and still tries the other one step in sixteen so it follows changes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace peregrine::engine {

class SpecController {
 public:
  // Whether the next step of `batch` decoding sequences should carry drafts.
  bool speculate(int batch);
  // A pure decode step of `batch` sequences, with drafts or not, emitted `tokens` in `seconds`.
  void record(int batch, bool speculated, int tokens, double seconds);
  // Measured tokens per second of a bucket (tests, logs); 0 before a measurement.
  double rate(int batch, bool speculated) const { return buckets_[bucket(batch)].rate[speculated ? 1 : 0]; }

  static constexpr int kWarmSteps = 4;     // measurements of each mode before choosing
  static constexpr int kExploreEvery = 16;

 private:
  struct Bucket {
    double rate[2] = {0.0, 0.0};
    int samples[2] = {0, 0};
    uint64_t decisions = 0;
  };
  static size_t bucket(int batch);
  std::array<Bucket, 16> buckets_{};
};

}  // namespace peregrine::engine
