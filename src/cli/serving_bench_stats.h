// Figures of `peregrine bench serve`: per-request timings in, throughput and TTFT/TPOT/ITL/E2E percentiles out,
// and the engine's step split from two /metrics snapshots (Peregrine servers only).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace peregrine::cli {

struct RequestResult {
  bool ok = false;
  std::string error;
  bool done_marker = false;
  int prompt_tokens = 0;
  int output_tokens = 0;
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
  std::vector<std::chrono::steady_clock::time_point> token_times;  // arrival of each content event
};

// The p-th percentile (0..100) by linear interpolation; 0 for an empty list.
double percentile(std::vector<double> values, double p);
void print_serving_report(const std::vector<RequestResult>& results, double duration_s);
void print_step_split(const std::string& metrics_before, const std::string& metrics_after);

}  // namespace peregrine::cli
