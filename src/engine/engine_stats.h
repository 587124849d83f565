// Helpers for the engine's statistics: Prometheus-style histograms with fixed bucket bounds.
#pragma once

#include <vector>

#include "peregrine/engine.h"

namespace peregrine::engine {

// Bounds (seconds) used for TTFT, inter-token and end-to-end latency, like vLLM's.
Histogram make_latency_histogram(const std::vector<double>& bounds);
const std::vector<double>& ttft_bounds();
const std::vector<double>& inter_token_bounds();
const std::vector<double>& e2e_bounds();
void observe(Histogram& h, double value);

}  // namespace peregrine::engine
