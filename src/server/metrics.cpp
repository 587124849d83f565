// /metrics: Prometheus text exposition of the engine's counters under vLLM's metric names (so existing
// dashboards work), plus Peregrine's own (KV blocks, step time split, HTTP counters).
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "server/openai_server.h"

namespace peregrine::server {
namespace {

class Writer {
 public:
  explicit Writer(std::string model) : labels_("model_name=\"" + escape(model) + "\"") {}

  void gauge(const char* name, const char* help, double value) { metric(name, help, "gauge", value); }
  void counter(const char* name, const char* help, double value) { metric(name, help, "counter", value); }
  void counter_by(const char* name, const char* help, const char* label,
                  std::initializer_list<std::pair<const char*, double>> values) {
    header(name, help, "counter");
    for (const auto& [v, x] : values) line(std::string(name), std::string(label) + "=\"" + v + "\"", x);
  }
  void counter_by(const char* name, const char* help, const char* label,
                  const std::vector<std::pair<std::string, double>>& values) {
    header(name, help, "counter");
    for (const auto& [v, x] : values) line(std::string(name), std::string(label) + "=\"" + v + "\"", x);
  }
  void histogram(const char* name, const char* help, const Histogram& h) {
    header(name, help, "histogram");
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      line(std::string(name) + "_bucket", "le=\"" + num(h.bounds[i]) + "\"", static_cast<double>(cum));
    }
    line(std::string(name) + "_bucket", "le=\"+Inf\"", static_cast<double>(h.count));
    line(std::string(name) + "_sum", "", h.sum);
    line(std::string(name) + "_count", "", static_cast<double>(h.count));
  }
  std::string take() { return std::move(out_); }

 private:
  static std::string escape(const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '\\' || c == '"') o += '\\';
      if (c == '\n') {
        o += "\\n";
        continue;
      }
      o += c;
    }
    return o;
  }
  static std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return buf;
  }
  void header(const char* name, const char* help, const char* type) {
    out_ += "# HELP ";
    out_ += name;
    out_ += " ";
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += " ";
    out_ += type;
    out_ += "\n";
  }
  void metric(const char* name, const char* help, const char* type, double value) {
    header(name, help, type);
    line(name, "", value);
  }
  void line(const std::string& name, const std::string& extra_label, double value) {
    out_ += name + "{" + labels_ + (extra_label.empty() ? "" : "," + extra_label) + "} " + num(value) + "\n";
  }

  std::string labels_;
  std::string out_;
};

}  // namespace

std::string OpenAiServer::metrics_text() const {
  const EngineStats s = engine_.stats();
  Writer w(options_.served_model_names.front());
  w.gauge("vllm:num_requests_running", "Sequences in model execution batches.", s.num_running);
  w.gauge("vllm:num_requests_waiting", "Sequences waiting to be processed.", s.num_waiting);
  w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage);
  w.gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (older name). 1 means 100 percent usage.", s.kv_usage);
  w.counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in prompt tokens.",
            static_cast<double>(s.prefix_cache_queries));
  w.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in prompt tokens.",
            static_cast<double>(s.prefix_cache_hits));
  w.counter_by("peregrine:prefix_cache_hits_total", "Prefix cache hits by the tier that held them, in prompt tokens.",
               "tier", {{"device", static_cast<double>(s.prefix_cache_hits - s.prefix_cache_host_hits)},
                        {"host", static_cast<double>(s.prefix_cache_host_hits - s.prefix_cache_disk_hits)},
                        {"disk", static_cast<double>(s.prefix_cache_disk_hits)}});
  w.counter_by("peregrine:kv_disk_bytes_total", "KV bytes written to and read from the disk tier.", "direction",
               {{"written", static_cast<double>(s.kv_disk_bytes_written)},
                {"read", static_cast<double>(s.kv_disk_bytes_read)}});
  w.counter("peregrine:kv_disk_dropped_files_total", "Disk-tier files found truncated, corrupted or foreign.",
            static_cast<double>(s.kv_disk_dropped_bad));
  w.counter("peregrine:kv_disk_skipped_blocks_total",
            "Disk-tier blocks lookups left to be recomputed, reading them being slower than the prefill.",
            static_cast<double>(s.kv_disk_blocks_skipped));
  w.gauge("peregrine:kv_disk_blocks", "Blocks the prefix cache's disk tier holds.", static_cast<double>(s.kv_disk_blocks));
  w.counter("peregrine:kv_disk_dropped_writes_total",
            "Blocks the disk tier did not write (the disk refused them, or its writer stalled).",
            static_cast<double>(s.kv_disk_dropped_writes));
  w.counter("peregrine:kv_disk_wait_seconds_total",
            "Seconds the engine waited for the disk tier (copies past the host tier, a full write queue).",
            s.kv_disk_wait_seconds);
  w.counter_by("peregrine:kv_offload_bytes_total", "KV bytes copied between the device and the host tier.", "direction",
               {{"to_host", static_cast<double>(s.kv_offload_bytes_to_host)},
                {"from_host", static_cast<double>(s.kv_offload_bytes_from_host)}});
  w.counter_by("peregrine:kv_offload_seconds_total", "Seconds the copies between the device and the host tier took.",
               "direction", {{"to_host", s.kv_offload_seconds_to_host}, {"from_host", s.kv_offload_seconds_from_host}});
  w.gauge("peregrine:host_kv_blocks", "Blocks the prefix cache's host tier can hold.", s.host_kv_blocks);
  w.gauge("peregrine:host_kv_blocks_used", "Blocks the prefix cache's host tier holds.", s.host_kv_blocks_used);
  w.gauge("peregrine:host_kv_blocks_pinned", "Host-tier blocks held in place by loads in flight.",
          s.host_kv_blocks_pinned);
  w.gauge("peregrine:kv_blocks_loading", "Device KV blocks held while a lower tier loads them.", s.kv_blocks_loading);
  w.gauge("peregrine:kv_disk_blocks_queued", "Blocks queued for writing to the disk tier (findable meanwhile).",
          static_cast<double>(s.kv_disk_blocks_queued));
  w.counter("peregrine:kv_disk_full_total",
            "Writes the disk tier's filesystem refused for want of space (the tier then shrinks to what fits).",
            static_cast<double>(s.kv_disk_full));
  w.gauge("peregrine:kv_disk_bound_bytes", "Bytes the disk tier may hold now (its bound, lower after a full disk).",
          static_cast<double>(s.kv_disk_bound_bytes));
  w.gauge("peregrine:prefix_cache_hit_rate", "Prefix cache hits over queries since start.",
          s.prefix_cache_queries ? static_cast<double>(s.prefix_cache_hits) / static_cast<double>(s.prefix_cache_queries)
                                 : 0.0);
  w.counter("vllm:prompt_tokens_total", "Prefill tokens processed.", static_cast<double>(s.prompt_tokens));
  w.counter("vllm:generation_tokens_total", "Generation tokens processed.", static_cast<double>(s.generation_tokens));
  w.counter("vllm:num_preemptions_total", "Cumulative preemptions.", static_cast<double>(s.num_preemptions));
  w.counter("peregrine:backend_sampled_tokens_total", "Tokens sampled on the device where the logits are (not on the host).",
            static_cast<double>(s.backend_sampled_tokens));
  w.counter("vllm:spec_decode_num_drafts_total", "Verify steps of sequences that carried drafts.",
            static_cast<double>(s.spec_num_drafts));
  w.counter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens verified.", static_cast<double>(s.spec_num_draft_tokens));
  w.counter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
            static_cast<double>(s.spec_num_accepted_tokens));
  {
    std::vector<std::pair<std::string, double>> per_pos;
    for (size_t i = 0; i < s.spec_accepted_per_position.size(); ++i)
      per_pos.emplace_back(std::to_string(i), static_cast<double>(s.spec_accepted_per_position[i]));
    if (!per_pos.empty())
      w.counter_by("vllm:spec_decode_num_accepted_tokens_per_pos_total", "Draft tokens accepted, by draft position.",
                   "position", per_pos);
  }
  w.counter_by("vllm:request_success_total", "Finished sequences by finish reason.", "finished_reason",
               {{"stop", static_cast<double>(s.requests_finished_stop)},
                {"length", static_cast<double>(s.requests_finished_length)},
                {"abort", static_cast<double>(s.requests_finished_abort)}});
  w.histogram("vllm:time_to_first_token_seconds", "Time to first token in seconds.", s.ttft_seconds);
  w.histogram("vllm:inter_token_latency_seconds", "Time between output tokens in seconds.", s.inter_token_seconds);
  w.histogram("vllm:time_per_output_token_seconds", "Time per output token of a request (after the first) in seconds.",
              s.time_per_output_token_seconds);
  w.histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency in seconds.", s.e2e_seconds);
  w.gauge("peregrine:kv_blocks_total", "KV cache blocks.", s.num_kv_blocks);
  w.gauge("peregrine:kv_blocks_used", "KV cache blocks held by requests.", s.num_used_kv_blocks);
  w.gauge("peregrine:kv_blocks_free", "KV cache blocks free (including cached prefixes).", s.num_free_kv_blocks);
  w.counter("peregrine:engine_steps_total", "Engine steps run.", static_cast<double>(s.num_steps));
  w.counter_by("peregrine:engine_step_seconds_total", "Engine loop time by phase.", "phase",
               {{"schedule", s.step_schedule_seconds},
                {"prepare", s.step_prepare_seconds},
                {"forward", s.step_forward_seconds},
                {"sample", s.step_sample_seconds},
                {"update", s.step_update_seconds}});
  if (options_.io_cpu_seconds) {
    w.counter("peregrine:http_io_cpu_seconds_total", "CPU time of the HTTP I/O threads.", options_.io_cpu_seconds());
  }
  if (options_.num_connections) {
    w.gauge("peregrine:http_connections", "Open HTTP connections.", static_cast<double>(options_.num_connections()));
  }
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    w.counter("process_cpu_seconds_total", "Total user and system CPU time of the server process.",
              static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec));
  }
  // Prometheus' process collector names (vLLM exports them through it): what a soak watches for growth.
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long long pages_virtual = 0, pages_resident = 0;
    if (std::fscanf(f, "%llu %llu", &pages_virtual, &pages_resident) == 2) {
      const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
      w.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", static_cast<double>(pages_resident) * page);
      w.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", static_cast<double>(pages_virtual) * page);
    }
    std::fclose(f);
  }
  {
    std::error_code ec;
    double fds = 0;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++fds;
    if (!ec) w.gauge("process_open_fds", "Number of open file descriptors.", fds);
  }
  if (s.device_memory_total_bytes >= 0) {
    w.gauge("peregrine:device_memory_used_bytes",
            "Device memory in use (total - free, as the driver reports it; read at most every 0.5 s).",
            static_cast<double>(s.device_memory_used_bytes));
    w.gauge("peregrine:device_memory_total_bytes", "Device memory.", static_cast<double>(s.device_memory_total_bytes));
  }
  if (options_.http_counters) {
    // Counted when a response is queued, before it is written: a client that has its response finds it here.
    const HttpCounters c = options_.http_counters();
    w.counter("peregrine:http_requests_total", "HTTP requests received.", static_cast<double>(c.requests));
    w.counter("peregrine:http_client_errors_total", "HTTP 4xx responses.", static_cast<double>(c.responses_4xx));
    w.counter("peregrine:http_server_errors_total", "HTTP 5xx responses.", static_cast<double>(c.responses_5xx));
    w.counter("peregrine:http_rejected_total", "Requests refused with 503 (queue full, shutting down, connection cap).",
              static_cast<double>(c.responses_503));
    w.counter("peregrine:http_protocol_errors_total",
              "Requests refused by the HTTP parser (malformed framing, limits); each closed its connection.",
              static_cast<double>(c.protocol_errors));
    w.counter("peregrine:http_connections_total", "HTTP connections accepted.",
              static_cast<double>(c.connections_accepted));
    w.counter("peregrine:http_connections_refused_total", "HTTP connections refused over --max-connections.",
              static_cast<double>(c.connections_refused));
  }
  return w.take();
}

}  // namespace peregrine::server
