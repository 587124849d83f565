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

// Peregrine's counters from a /metrics text: step seconds by phase ("step:<phase>"), and plain series by name.
std::map<std::string, double> read_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    const size_t brace = line.find('{');
    if (sp == std::string::npos) continue;
    const std::string name = line.substr(0, std::min(brace, sp));
    double value = 0;
    try {
      value = std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
      continue;
    }
    if (name == "peregrine:engine_step_seconds_total") {
      const size_t p = line.find("phase=\"");
      const size_t q = line.find('"', p + 7);
      if (p != std::string::npos && q != std::string::npos) out["step:" + line.substr(p + 7, q - p - 7)] = value;
    } else {
      out[name] = value;
    }
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
  auto b = read_metrics(before);
  auto a = read_metrics(after);
  if (!a.count("step:forward")) return;
  auto d = [&](const std::string& k) { return a[k] - b[k]; };
  const double steps = d("peregrine:engine_steps_total");
  if (steps <= 0) return;
  const double forward = d("step:forward");
  double other = 0;
  for (const char* k : {"step:schedule", "step:prepare", "step:sample", "step:update"}) other += d(k);
  const double http = d("peregrine:http_io_cpu_seconds_total");
  const double total = forward + other + http;
  std::printf("engine steps          %.0f, per step: forward %.3f ms, schedule %.3f, prepare %.3f, sample %.3f, "
              "update %.3f ms; HTTP I/O threads %.3f ms CPU\n",
              steps, 1e3 * forward / steps, 1e3 * d("step:schedule") / steps, 1e3 * d("step:prepare") / steps,
              1e3 * d("step:sample") / steps, 1e3 * d("step:update") / steps, 1e3 * http / steps);
  std::printf("outside the forward   %.2f%% of the step (scheduling, batching, sampling, detokenizing, HTTP)\n",
              total > 0 ? 100.0 * (other + http) / total : 0.0);
  if (a.count("process_cpu_seconds_total")) {
    std::printf("server process CPU    %.2f s over the run\n", d("process_cpu_seconds_total"));
  }
}

}  // namespace peregrine::cli
