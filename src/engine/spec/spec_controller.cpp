// SpecController (see spec_controller.h).
#include "engine/spec/spec_controller.h"

#include <algorithm>

namespace peregrine::engine {

size_t SpecController::bucket(int batch) {
  size_t b = 0;
  while ((1 << b) < batch && b + 1 < 16) ++b;
  return b;
}

bool SpecController::speculate(int batch) {
  Bucket& b = buckets_[bucket(batch)];
  ++b.decisions;
  if (b.samples[1] < kWarmSteps && b.samples[1] <= b.samples[0]) return true;
  if (b.samples[0] < kWarmSteps) return false;
  const bool best = b.rate[1] >= b.rate[0];
  return b.decisions % kExploreEvery == 0 ? !best : best;
}

void SpecController::record(int batch, bool speculated, int tokens, double seconds) {
  if (seconds <= 0 || tokens <= 0) return;
  Bucket& b = buckets_[bucket(batch)];
  const int m = speculated ? 1 : 0;
  const double x = tokens / seconds;
  b.rate[m] = b.samples[m] == 0 ? x : 0.8 * b.rate[m] + 0.2 * x;
  ++b.samples[m];
}

}  // namespace peregrine::engine
