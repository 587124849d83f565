// Serving benchmark figures (see serving_bench_stats.h).
#include "cli/serving_bench_stats.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace peregrine::cli {
namespace {

double ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void row(const char* name, const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean = v.empty() ? 0 : mean / static_cast<double>(v.size());
  std::printf("%-14s mean %9.2f   p50 %9.2f   p90 %9.2f   p99 %9.2f   (ms, n=%zu)\n", name, mean, percentile(v, 50),
              percentile(v, 90), percentile(v, 99), v.size());
}

// Sums of peregrine:engine_step_seconds_total by phase.
std::map<std::string, double> step_seconds(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("peregrine:engine_step_seconds_total{", 0) != 0) continue;
    const size_t p = line.find("phase=\"");
    const size_t q = line.find('"', p + 7);
    const size_t sp = line.rfind(' ');
    if (p == std::string::npos || q == std::string::npos || sp == std::string::npos) continue;
    out[line.substr(p + 7, q - p - 7)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

void print_serving_report(const std::vector<RequestResult>& results, double duration_s) {
  std::vector<double> ttft, tpot, itl, e2e;
  int ok = 0;
  long long in_tokens = 0, out_tokens = 0;
  std::string first_error;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++ok;
    in_tokens += r.prompt_tokens;
    out_tokens += r.output_tokens;
    e2e.push_back(ms(r.end - r.start));
    if (r.token_times.empty()) continue;
    ttft.push_back(ms(r.token_times.front() - r.start));
    for (size_t i = 1; i < r.token_times.size(); ++i) itl.push_back(ms(r.token_times[i] - r.token_times[i - 1]));
    if (r.output_tokens > 1) tpot.push_back(ms(r.end - r.token_times.front()) / (r.output_tokens - 1));
  }
  std::printf("\nsuccessful requests   %d of %zu%s%s\n", ok, results.size(), first_error.empty() ? "" : "  first error: ",
              first_error.c_str());
  std::printf("duration              %.2f s\n", duration_s);
  std::printf("request throughput    %.2f req/s\n", ok / duration_s);
  std::printf("output throughput     %.1f tok/s\n", static_cast<double>(out_tokens) / duration_s);
  std::printf("total throughput      %.1f tok/s (%lld prompt + %lld output tokens)\n",
              static_cast<double>(in_tokens + out_tokens) / duration_s, in_tokens, out_tokens);
  row("TTFT", ttft);
  row("TPOT", tpot);
  row("ITL", itl);
  row("E2E", e2e);
}

void print_step_split(const std::string& before, const std::string& after) {
  auto b = step_seconds(before);
  auto a = step_seconds(after);
  if (a.empty()) return;
  double total = 0;
  std::map<std::string, double> d;
  for (auto& [k, v] : a) total += d[k] = v - b[k];
  if (total <= 0) return;
  std::printf("engine step split     ");
  for (const char* k : {"schedule", "prepare", "forward", "sample", "update"}) {
    std::printf("%s %.2f%%  ", k, 100.0 * d[k] / total);
  }
  std::printf("\n                      outside the forward: %.2f%% of engine step time\n",
              100.0 * (total - d["forward"]) / total);
}

}  // namespace peregrine::cli
