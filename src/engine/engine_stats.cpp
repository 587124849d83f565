// Latency histograms for EngineStats (see engine_stats.h).
#include "engine/engine_stats.h"

#include <algorithm>
#include <limits>

namespace peregrine::engine {

Histogram make_latency_histogram(const std::vector<double>& bounds) {
  Histogram h;
  h.bounds = bounds;
  h.counts.assign(bounds.size() + 1, 0);
  return h;
}

const std::vector<double>& ttft_bounds() {
  static const std::vector<double> b{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                     1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
  return b;
}

const std::vector<double>& inter_token_bounds() {
  static const std::vector<double> b{0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                                     0.075, 0.1,    0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5};
  return b;
}

const std::vector<double>& e2e_bounds() {
  static const std::vector<double> b{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                     120.0, 240.0, 480.0, 960.0};
  return b;
}

void observe(Histogram& h, double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(h.bounds.begin(), h.bounds.end(), value) - h.bounds.begin());
  ++h.counts[i];
  h.sum += value;
  ++h.count;
}


}  // namespace peregrine::engine
