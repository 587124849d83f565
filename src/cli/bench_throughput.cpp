// `peregrine bench throughput`: offline serving throughput through the Engine (scheduler, batching, sampling and
// detokenizing included) with fixed input/output lengths at each concurrency level, plus the engine's per-step
// time split (how much of a step is outside the model forward).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "cli/serving_bench.h"
#include "peregrine/error.h"
#include "peregrine/engine.h"

namespace peregrine::cli {
namespace {

struct ThroughputArgs {
  EngineConfig engine;
  int input_len = 1024;
  int output_len = 400;
  std::string concurrency = "1,8,32,64";
  int prompts_per_level = 0;  // 0 = the concurrency itself
  std::string speculative_config;
  std::string plot;  // SVG of output tok/s against concurrency beside the roofline's
};

struct LevelResult {
  int concurrency;
  double output_tps, roofline_tps;
};

// A small SVG: output tok/s (measured and at the roofline) against concurrency on log2 axes.
void write_plot(const std::string& path, const std::vector<LevelResult>& levels, const std::string& title) {
  std::ofstream f(path);
  if (!f) throw Error(ErrorCode::kIoError, "--plot: cannot write " + path);
  const double w = 640, h = 400, left = 70, right = 20, top = 40, bottom = 50;
  double ymax = 1;
  for (const LevelResult& l : levels) ymax = std::max({ymax, l.output_tps, l.roofline_tps});
  const double lx0 = std::log2(std::max(1, levels.front().concurrency));
  const double lx1 = std::max(lx0 + 1, std::log2(std::max(1, levels.back().concurrency)));
  const double ly1 = std::ceil(std::log10(ymax * 1.2));
  const double ly0 = std::min(ly1 - 1, std::floor(std::log10(std::max(1.0, levels.front().output_tps * 0.8))));
  auto px = [&](int c) { return left + (std::log2(std::max(1, c)) - lx0) / (lx1 - lx0) * (w - left - right); };
  auto py = [&](double v) { return top + (ly1 - std::log10(std::max(v, 1e-9))) / (ly1 - ly0) * (h - top - bottom); };
  f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  f << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">" << title << "</text>\n";
  f << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << w - left - right << "\" height=\"" << h - top - bottom
    << "\" fill=\"none\" stroke=\"#888\"/>\n";
  for (double e = ly0; e <= ly1; e += 1) {
    f << "<text x=\"" << left - 6 << "\" y=\"" << py(std::pow(10, e)) + 4 << "\" text-anchor=\"end\">" << std::pow(10, e)
      << "</text>\n";
  }
  for (const LevelResult& l : levels) {
    f << "<text x=\"" << px(l.concurrency) << "\" y=\"" << h - bottom + 16 << "\" text-anchor=\"middle\">" << l.concurrency
      << "</text>\n";
  }
  f << "<text x=\"" << (w + left) / 2 << "\" y=\"" << h - 12 << "\" text-anchor=\"middle\">concurrency</text>\n";
  auto series = [&](bool roof, const char* color, const char* label, double ly) {
    f << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\"" << (roof ? " stroke-dasharray=\"6 4\"" : "")
      << " points=\"";
    for (const LevelResult& l : levels) f << px(l.concurrency) << "," << py(roof ? l.roofline_tps : l.output_tps) << " ";
    f << "\"/>\n";
    for (const LevelResult& l : levels)
      f << "<circle cx=\"" << px(l.concurrency) << "\" cy=\"" << py(roof ? l.roofline_tps : l.output_tps) << "\" r=\"3\" fill=\""
        << color << "\"/>\n";
    f << "<text x=\"" << left + 10 << "\" y=\"" << ly << "\" fill=\"" << color << "\">" << label << "</text>\n";
  };
  series(true, "#999", "roofline (output tok/s)", top + 16);
  series(false, "#1f77b4", "measured output tok/s", top + 32);
  f << "</svg>\n";
}

std::vector<int> parse_list(const std::string& s, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(std::stoi(item));
    } catch (const std::exception&) {
      throw Error(ErrorCode::kInvalidArgument, std::string(flag) + ": '" + item + "' is not a number");
    }
    if (out.back() <= 0) throw Error(ErrorCode::kInvalidArgument, std::string(flag) + " values must be positive");
  }
  if (out.empty()) throw Error(ErrorCode::kInvalidArgument, std::string(flag) + " is empty");
  return out;
}

// One step's roofline: max(bytes moved / bandwidth, FLOPs / matmul rate) for `tokens` computed, `rows` of logits,
// `attended` keys summed over the tokens, `kv_read` cached tokens read. Bytes are the weights (every projection and
// the LM head, at the bytes per parameter the model stores), the KV read by attention and the KV written; FLOPs are 2
// per weight per token (the LM head per row) and 4 per attended key per head per layer.
double step_roofline_seconds(const ModelInfo& m, double tokens, double rows, double attended, double kv_read,
                             double bytes_per_s, double flops_per_s) {
  const double h = m.hidden_size, inter = m.intermediate_size, layers = m.num_layers, heads = m.num_attention_heads;
  const double kv_heads = m.num_key_value_heads, hd = m.head_dim, vocab = m.vocab_size;
  const double layer_params = h * (heads * hd + 2 * kv_heads * hd) + heads * hd * h + 3 * h * inter;
  const double head_params = vocab * h;
  const double stored_params = layers * layer_params + head_params * (m.tie_word_embeddings ? 1 : 2);
  const double bytes_per_param = static_cast<double>(m.weight_bytes) / stored_params;
  const double weight_bytes = (layers * layer_params + head_params) * bytes_per_param;
  const double kv = static_cast<double>(m.kv_bytes_per_token);
  const double bytes = weight_bytes + kv_read * kv + tokens * kv;
  const double flops = 2 * layers * layer_params * tokens + 2 * head_params * rows + 4 * layers * heads * hd * attended;
  return std::max(bytes / bytes_per_s, flops / flops_per_s);
}

// The workload's roofline: the steps' rooflines summed over the steps the workload needs (prefill in chunks of the
// token budget, then output_len - 1 decode steps of c rows).
double roofline_seconds(const ModelInfo& m, int c, int input_len, int output_len, double bytes_per_s, double flops_per_s) {
  auto step = [&](double tokens, double rows, double attended, double kv_read) {
    return step_roofline_seconds(m, tokens, rows, attended, kv_read, bytes_per_s, flops_per_s);
  };
  double total = 0.0;
  const double budget = std::max(1, m.max_num_batched_tokens);
  for (double left = static_cast<double>(c) * input_len; left > 0; left -= budget) {
    const double tokens = std::min(budget, left);
    // A chunk's tokens attend to half their prompt on average and read the chunk's own keys back.
    total += step(tokens, tokens / input_len, tokens * input_len / 2.0, tokens);
  }
  for (int j = 1; j < output_len; ++j) {
    const double ctx = static_cast<double>(c) * (input_len + j);
    total += step(c, c, ctx, ctx);
  }
  return total;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void run_throughput(ThroughputArgs& a) {
  if (a.input_len <= 0 || a.output_len <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "--input-len and --output-len must be positive");
  }
  const std::vector<int> levels = parse_list(a.concurrency, "--concurrency");
  int max_level = 0;
  for (int c : levels) max_level = std::max(max_level, c);
  if (a.engine.max_num_seqs < max_level) a.engine.max_num_seqs = max_level;
  if (a.engine.max_model_len == 0) a.engine.max_model_len = a.input_len + a.output_len;
  a.engine.speculative = SpeculativeConfig::parse(a.speculative_config);
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = Engine::create(a.engine);
  const ModelInfo& info = engine->info();
  std::printf("model     %s (%s, %.1f MB weights%s) on %s, load %.2f s\n", info.model_path.c_str(),
              info.architecture.c_str(), static_cast<double>(info.weight_bytes) / 1e6,
              a.engine.random_weights ? ", random" : "", info.backend.c_str(), seconds_since(t0));
  std::printf("kv cache  %lld tokens (%d blocks x %d), max_num_seqs %d\n",
              static_cast<long long>(info.kv_capacity_tokens), info.num_kv_blocks, info.block_size,
              a.engine.max_num_seqs);
  std::printf("workload  input %d, output %d tokens per request (random ids, ignore_eos, greedy)\n", a.input_len,
              a.output_len);
  const MemoryBandwidth bw = engine->measure_memory_bandwidth();
  const double bytes_per_s = 1e9 * (bw.read_gbs > 0 ? bw.read_gbs : bw.copy_gbs);
  const double flops_per_s = 1e12 * engine->measure_matmul_tflops();
  std::printf("limits    %.0f GB/s (%s), matmul %.1f TFLOP/s (%s, this run); roofline: per step max(bytes / "
              "bandwidth, FLOPs / matmul rate)\n\n",
              bytes_per_s / 1e9, bw.read_gbs > 0 ? "read" : "device copy", flops_per_s / 1e12, info.dtype.c_str());
  std::printf("%11s %8s %10s %12s %12s %9s %9s %9s %9s %11s %9s\n", "concurrency", "requests", "seconds", "output tok/s",
              "total tok/s", "steps", "step ms", "forward%", "other%", "roofline s", "of roof");
  std::mt19937 rng(1234);
  const int vocab = info.vocab_size;
  // Prompt ids avoid the low ids (special tokens) of most vocabularies.
  std::uniform_int_distribution<int> pick(std::min(100, vocab - 1), vocab - 1);
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = a.output_len;
  params.ignore_eos = true;
  std::vector<LevelResult> results;
  for (int c : levels) {
    const int count = a.prompts_per_level > 0 ? a.prompts_per_level : c;
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(count));
    for (auto& p : prompts) {
      p.resize(static_cast<size_t>(a.input_len));
      for (auto& t : p) t = pick(rng);  // distinct prompts: no prefix-cache hits
    }
    // At most c requests in flight: submit in waves of c.
    const EngineStats before = engine->stats();
    const auto start = std::chrono::steady_clock::now();
    int64_t out_tokens = 0;
    for (int i = 0; i < count; i += c) {
      std::vector<std::vector<int32_t>> wave(prompts.begin() + i, prompts.begin() + std::min(count, i + c));
      for (const RequestOutput& r : engine->generate(wave, params)) out_tokens += r.outputs[0].num_output_tokens;
    }
    const double secs = seconds_since(start);
    const EngineStats after = engine->stats();
    const double steps = static_cast<double>(after.num_steps - before.num_steps);
    const double forward = after.step_forward_seconds - before.step_forward_seconds;
    const double other = (after.step_schedule_seconds - before.step_schedule_seconds) +
                         (after.step_prepare_seconds - before.step_prepare_seconds) +
                         (after.step_sample_seconds - before.step_sample_seconds) +
                         (after.step_update_seconds - before.step_update_seconds);
    const double total_tokens = static_cast<double>(out_tokens) + static_cast<double>(count) * a.input_len;
    // One wave per c requests: the roofline of a wave, times the waves.
    const double roof = roofline_seconds(info, c, a.input_len, a.output_len, bytes_per_s, flops_per_s) *
                        std::ceil(static_cast<double>(count) / c);
    std::printf("%11d %8d %10.2f %12.1f %12.1f %9.0f %9.2f %8.1f%% %8.1f%% %11.3f %8.1f%%\n", c, count, secs,
                static_cast<double>(out_tokens) / secs, total_tokens / secs, steps,
                steps > 0 ? 1e3 * (forward + other) / steps : 0.0, 100.0 * forward / std::max(1e-12, forward + other),
                100.0 * other / std::max(1e-12, forward + other), roof, 100.0 * roof / secs);
    // Where the time went: steps with prompt tokens (their prompt tok/s) and pure decode steps (ms each against the
    // roofline of a step of their mean rows and context).
    const double p_steps = static_cast<double>(after.num_prompt_steps - before.num_prompt_steps);
    const double p_secs = after.prompt_step_seconds - before.prompt_step_seconds;
    const double p_tokens = static_cast<double>(after.prompt_step_prompt_tokens - before.prompt_step_prompt_tokens);
    const double d_steps = static_cast<double>(after.num_decode_steps - before.num_decode_steps);
    const double d_secs = after.decode_step_seconds - before.decode_step_seconds;
    const double d_rows = static_cast<double>(after.decode_step_rows - before.decode_step_rows);
    const double d_ctx = static_cast<double>(after.decode_step_context - before.decode_step_context);
    if (d_steps > 0 && p_steps > 0) {
      const double rows = d_rows / d_steps, ctx = d_ctx / std::max(1.0, d_rows);
      const double d_roof = step_roofline_seconds(info, rows, rows, rows * ctx, rows * ctx, bytes_per_s, flops_per_s);
      std::printf("%11s prompt steps %.0f: %.2f s (%.1f%%), %.1f ms each, %.0f prompt tok/s; decode steps %.0f: %.2f s "
                  "(%.1f%%), %.2f ms each at %.1f rows x %.0f context, roofline %.2f ms (%.1f%%)\n",
                  "", p_steps, p_secs, 100.0 * p_secs / secs, 1e3 * p_secs / p_steps, p_tokens / std::max(1e-12, p_secs),
                  d_steps, d_secs, 100.0 * d_secs / secs, 1e3 * d_secs / d_steps, rows, ctx, 1e3 * d_roof,
                  100.0 * d_roof / (d_secs / d_steps));
    }
    results.push_back({c, static_cast<double>(out_tokens) / secs, static_cast<double>(out_tokens) / roof});
    std::fflush(stdout);
  }
  const EngineStats s = engine->stats();
  const double total = s.step_schedule_seconds + s.step_prepare_seconds + s.step_forward_seconds +
                       s.step_sample_seconds + s.step_update_seconds;
  std::printf("\nstep split over the run: schedule %.2f%%, prepare %.2f%%, forward %.2f%%, sample %.2f%%, "
              "update (detokenize, stops, callbacks) %.2f%%\n",
              100 * s.step_schedule_seconds / total, 100 * s.step_prepare_seconds / total,
              100 * s.step_forward_seconds / total, 100 * s.step_sample_seconds / total,
              100 * s.step_update_seconds / total);
  if (s.spec_num_drafts > 0) {
    std::printf("speculation: %llu verify steps, %llu drafted, %llu accepted, %.2f tokens per verify step\n",
                static_cast<unsigned long long>(s.spec_num_drafts), static_cast<unsigned long long>(s.spec_num_draft_tokens),
                static_cast<unsigned long long>(s.spec_num_accepted_tokens),
                1.0 + static_cast<double>(s.spec_num_accepted_tokens) / static_cast<double>(s.spec_num_drafts));
  }
  if (!a.plot.empty() && !results.empty()) {
    std::sort(results.begin(), results.end(), [](const LevelResult& x, const LevelResult& y) { return x.concurrency < y.concurrency; });
    write_plot(a.plot, results, info.architecture + " on " + info.backend + ", " + std::to_string(a.input_len) + " in / " +
                                    std::to_string(a.output_len) + " out");
    std::printf("plot      %s\n", a.plot.c_str());
  }
  if (s.host_kv_blocks > 0) {
    std::printf("host tier %d blocks: %.1f MB copied down in %.3f s, %.1f MB back in %.3f s\n", s.host_kv_blocks,
                static_cast<double>(s.kv_offload_bytes_to_host) / 1e6, s.kv_offload_seconds_to_host,
                static_cast<double>(s.kv_offload_bytes_from_host) / 1e6, s.kv_offload_seconds_from_host);
  }
}

// Drops the disk tier's files from the page cache (written back first), so a disk-tier hit reads the disk itself.
// Returns how many files.
int drop_page_cache(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!f.is_regular_file(ec) || f.path().extension() != ".kv") continue;
    const int fd = ::open(f.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    ++n;
  }
  return n;
}

// TTFT of a prompt whose first `cached` tokens are in the prefix cache vs the same-length prompt cold; with a host
// tier (--kv-offloading-size), also when the cached prefix was evicted from the device to the host tier (and the
// disk tier, with --kv-cache-dir), with how many of the cached tokens each tier served.
void run_prefix_cache(ThroughputArgs& a, int prompt_len, int cached, int repeats, bool drop_cache) {
  if (cached <= 0 || cached >= prompt_len) {
    throw Error(ErrorCode::kInvalidArgument, "--cached-len must be in (0, --prompt-len)");
  }
  if (repeats <= 0) throw Error(ErrorCode::kInvalidArgument, "--repeats must be positive");
  if (a.engine.max_model_len == 0) a.engine.max_model_len = prompt_len + 8;
  if (a.engine.max_num_batched_tokens == 0) a.engine.max_num_batched_tokens = prompt_len;  // one-step prefill
  auto engine = Engine::create(a.engine);
  const ModelInfo& info = engine->info();
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> pick(std::min(100, info.vocab_size - 1), info.vocab_size - 1);
  auto random_ids = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& t : v) t = pick(rng);
    return v;
  };
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 1;
  auto ttft = [&](const std::vector<int32_t>& prompt) {
    const RequestOutput r = engine->generate(std::vector<std::vector<int32_t>>{prompt}, params)[0];
    return std::make_pair(r.timings.first_token - r.timings.arrival, r.num_cached_tokens);
  };
  auto with_tail = [&](const std::vector<int32_t>& shared) {
    std::vector<int32_t> p = shared;
    const auto tail = random_ids(prompt_len - cached);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  const bool tiered = a.engine.kv_offloading_size > 0;
  // Distinct prompts that fill the device's KV cache: whatever was cached before is evicted (to the host tier).
  const EngineStats s0 = engine->stats();
  const int64_t device_tokens = static_cast<int64_t>(s0.num_kv_blocks) * a.engine.block_size;
  auto evict_device = [&] {
    for (int64_t filled = 0; filled < device_tokens + prompt_len; filled += prompt_len) ttft(random_ids(prompt_len));
  };
  ttft(random_ids(prompt_len));  // warm-up
  std::vector<double> cold, warm, host;
  int hit = 0, host_hit = 0;
  uint64_t from_lower = 0, from_disk = 0;  // of the last tier hit's cached tokens: from below the device, from disk
  double evict_s = 0, load_s = 0;           // the last tier hit's: handing evicted blocks down, its disk load
  int dropped_files = 0;
  for (int i = 0; i < repeats; ++i) {
    cold.push_back(ttft(random_ids(prompt_len)).first);
    const std::vector<int32_t> shared = random_ids(cached);
    ttft(with_tail(shared));  // caches the shared prefix
    const auto [t, cached_tokens] = ttft(with_tail(shared));
    warm.push_back(t);
    hit = cached_tokens;
    if (tiered) {
      evict_device();
      if (drop_cache) dropped_files = drop_page_cache(a.engine.kv_cache_dir);
      const EngineStats before = engine->stats();
      const auto [th, host_tokens] = ttft(with_tail(shared));
      const EngineStats after = engine->stats();
      host.push_back(th);
      host_hit = host_tokens;
      from_lower = after.prefix_cache_host_hits - before.prefix_cache_host_hits;
      from_disk = after.prefix_cache_disk_hits - before.prefix_cache_disk_hits;
      evict_s = after.kv_evict_seconds - before.kv_evict_seconds;
      load_s = after.kv_disk_load_seconds - before.kv_disk_load_seconds;
    }
  }
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double c = median(cold), w = median(warm);
  std::printf("model     %s on %s\n", info.model_path.c_str(), info.backend.c_str());
  std::printf("prompt    %d tokens, %d shared with an earlier request (%d served from the cache)\n", prompt_len,
              cached, hit);
  std::printf("TTFT      cold %.2f ms, cached prefix %.2f ms (medians of %d)\n", 1e3 * c, 1e3 * w, repeats);
  std::printf("ratio     cached / cold = %.3f (%.1fx faster)\n", w / c, c / w);
  if (tiered) {
    const double h = median(host);
    const EngineStats s = engine->stats();
    const bool disk = !a.engine.kv_cache_dir.empty();
    std::printf("host      prefix evicted to the host tier%s, then hit there: TTFT %.2f ms (%d tokens served)\n",
                disk ? " and the disk tier" : "", 1e3 * h, host_hit);
    std::printf("tiers     of the %d cached tokens (last repeat): %lld from the device, %llu from the host tier, "
                "%llu from the disk tier\n", host_hit, static_cast<long long>(host_hit) - static_cast<long long>(from_lower),
                static_cast<unsigned long long>(from_lower - from_disk), static_cast<unsigned long long>(from_disk));
    std::printf("ratio     host-tier hit / cold = %.3f (%.1fx faster); device tier %d blocks, host tier %d blocks\n",
                h / c, c / h, s.num_kv_blocks, s.host_kv_blocks);
    if (disk) {
      std::printf("disk      %.1f MB written (%llu blocks straight from the device, past the host tier), %.1f MB read, "
                  "%llu blocks held; the engine waited %.3f s for it; %llu writes dropped, %llu bad files\n",
                  static_cast<double>(s.kv_disk_bytes_written) / 1e6,
                  static_cast<unsigned long long>(s.kv_disk_blocks_past_host),
                  static_cast<double>(s.kv_disk_bytes_read) / 1e6, static_cast<unsigned long long>(s.kv_disk_blocks),
                  s.kv_disk_wait_seconds, static_cast<unsigned long long>(s.kv_disk_dropped_writes),
                  static_cast<unsigned long long>(s.kv_disk_dropped_bad));
      std::printf("disk hit  (last repeat) %.1f ms handing the blocks its allocation evicted down, %.1f ms from its "
                  "load's start until every block was read and its copy up enqueued%s\n", 1e3 * evict_s, 1e3 * load_s,
                  drop_cache ? (", page cache dropped first (" + std::to_string(dropped_files) + " files)").c_str() : "");
    }
    std::printf("copies    %.1f MB to host (%llu blocks copied ahead of their eviction; %llu evicted blocks already "
                "there, not copied), %.1f MB back\n",
                static_cast<double>(s.kv_offload_bytes_to_host) / 1e6,
                static_cast<unsigned long long>(s.kv_offload_blocks_ahead),
                static_cast<unsigned long long>(s.kv_offload_evicted_held),
                static_cast<double>(s.kv_offload_bytes_from_host) / 1e6);
    const MemoryBandwidth bw = engine->measure_memory_bandwidth();
    auto rate = [](uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; };
    std::printf("copy rate to host %.1f GB/s, back %.1f GB/s (the copies' own time)",
                rate(s.kv_offload_timed_bytes_to_host, s.kv_offload_seconds_to_host),
                rate(s.kv_offload_timed_bytes_from_host, s.kv_offload_seconds_from_host));
    if (bw.host_to_device_gbs > 0) {
      std::printf("; pinned memory in this run: %.1f GB/s up, %.1f GB/s down (%.0f%% / %.0f%%)",
                  bw.host_to_device_gbs, bw.device_to_host_gbs,
                  100 * rate(s.kv_offload_timed_bytes_from_host, s.kv_offload_seconds_from_host) / bw.host_to_device_gbs,
                  100 * rate(s.kv_offload_timed_bytes_to_host, s.kv_offload_seconds_to_host) / bw.device_to_host_gbs);
    }
    std::printf("\n");
  }
}

}  // namespace

void register_bench_prefix_cache(CLI::App& bench) {
  auto args = std::make_shared<ThroughputArgs>();
  auto prompt_len = std::make_shared<int>(2000);
  auto cached = std::make_shared<int>(1800);
  auto repeats = std::make_shared<int>(5);
  auto drop_cache = std::make_shared<bool>(false);
  CLI::App* cmd = bench.add_subcommand("prefix-cache", "TTFT with a cached prompt prefix vs cold");
  EngineConfig& e = args->engine;
  cmd->add_option("--model", e.model, "Hugging Face model folder, or a GGUF file")->required();
  cmd->add_option("--prompt-len", *prompt_len, "Prompt tokens")->capture_default_str();
  cmd->add_option("--cached-len", *cached, "Leading tokens shared with an earlier request")->capture_default_str();
  cmd->add_option("--repeats", *repeats, "Measurements (the median is reported)")->capture_default_str();
  cmd->add_option("--device", e.device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--dtype", e.dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", e.quantization, "gptq | awq | compressed-tensors | fp8 (checked against the checkpoint); fp8 | w8a8-int8 on a dense checkpoint: quantized at load per channel; with --random-weights: w4a16 | w8a16 | w4a8 | w8a8-int8 | fp8");
  cmd->add_option("--kv-cache-dtype", e.kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8 (quantized KV cache, one scale per token and KV head)")->capture_default_str();
  cmd->add_option("--threads", e.num_threads, "CPU backend threads (0 = all cores)");
  cmd->add_option("--kv-offloading-size", e.kv_offloading_size,
                  "GiB for the prefix cache's host tier; also measures a hit there after the device evicted it");
  cmd->add_option("--kv-cache-memory-bytes", e.kv_cache_memory_bytes, "Device KV cache size in bytes");
  cmd->add_option("--kv-cache-dir", e.kv_cache_dir, "Folder for the disk tier (measures a hit there too)");
  cmd->add_option("--kv-cache-disk-gb", e.kv_cache_disk_gb, "GB the disk tier may use")->capture_default_str();
  cmd->add_option("--num-gpu-blocks-override", e.num_kv_blocks_override, "Use exactly this many device KV blocks");
  cmd->add_flag("--random-weights", e.random_weights, "Random weights of --config's shape (tokenizer from --model)");
  cmd->add_option("--config", e.config_file, "config.json for --random-weights");
  cmd->add_flag("--drop-page-cache", *drop_cache,
                "Before each tier hit, drop the disk tier's files from the page cache (the disk itself is read)");
  cmd->callback([args, prompt_len, cached, repeats, drop_cache] {
    run_prefix_cache(*args, *prompt_len, *cached, *repeats, *drop_cache);
  });
}

void register_bench_throughput(CLI::App& bench) {
  auto args = std::make_shared<ThroughputArgs>();
  CLI::App* cmd = bench.add_subcommand("throughput", "Offline engine throughput at fixed lengths and concurrency 1..N");
  EngineConfig& e = args->engine;
  cmd->add_option("--model", e.model, "Hugging Face model folder (tokenizer, and weights unless --random-weights)")
      ->required();
  cmd->add_flag("--random-weights", e.random_weights, "Random weights from --config (or the model's config.json)");
  cmd->add_option("--config", e.config_file, "config.json for --random-weights (e.g. ../shared/configs/llama-3-8b.json)");
  cmd->add_option("--input-len", args->input_len, "Prompt tokens per request")->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "Generated tokens per request")->capture_default_str();
  cmd->add_option("--concurrency", args->concurrency, "Comma-separated concurrency levels")->capture_default_str();
  cmd->add_option("--num-prompts", args->prompts_per_level, "Requests per level (default: the concurrency)");
  cmd->add_option("--device", e.device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--dtype", e.dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", e.quantization, "gptq | awq | compressed-tensors | fp8 (checked against the checkpoint); fp8 | w8a8-int8 on a dense checkpoint: quantized at load per channel; with --random-weights: w4a16 | w8a16 | w4a8 | w8a8-int8 | fp8");
  cmd->add_option("--kv-cache-dtype", e.kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8 (quantized KV cache, one scale per token and KV head)")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "Token budget per step");
  cmd->add_option("--max-num-seqs", e.max_num_seqs, "Sequences at once (raised to the top concurrency)");
  cmd->add_option("--max-model-len", e.max_model_len, "Context length (default: input + output)");
  cmd->add_option("--gpu-memory-utilization", e.gpu_memory_utilization, "Device memory fraction")->capture_default_str();
  cmd->add_option("--kv-cache-memory-bytes", e.kv_cache_memory_bytes, "KV cache size in bytes");
  cmd->add_option("--kv-offloading-size", e.kv_offloading_size, "GiB for the prefix cache's host tier (evicted blocks go down)");
  cmd->add_option("--threads", e.num_threads, "CPU backend threads (0 = all cores)");
  cmd->add_option("--speculative-config", args->speculative_config, "Speculative decoding as JSON (random ids rarely match)");
  cmd->add_option("--plot", args->plot, "Write an SVG of output tok/s against concurrency beside the roofline");
  cmd->callback([args] { run_throughput(*args); });
}

}  // namespace peregrine::cli
