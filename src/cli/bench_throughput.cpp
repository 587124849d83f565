// `peregrine bench throughput`: offline serving throughput through the Engine (scheduler, batching, sampling and
// detokenizing included) with fixed input/output lengths at each concurrency level, plus the engine's per-step
// time split (how much of a step is outside the model forward).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

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
};

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
  std::printf("workload  input %d, output %d tokens per request (random ids, ignore_eos, greedy)\n\n", a.input_len,
              a.output_len);
  std::printf("%11s %8s %10s %12s %12s %9s %9s %9s %9s\n", "concurrency", "requests", "seconds", "output tok/s",
              "total tok/s", "steps", "step ms", "forward%", "other%");
  std::mt19937 rng(1234);
  const int vocab = info.vocab_size;
  // Prompt ids avoid the low ids (special tokens) of most vocabularies.
  std::uniform_int_distribution<int> pick(std::min(100, vocab - 1), vocab - 1);
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = a.output_len;
  params.ignore_eos = true;
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
    std::printf("%11d %8d %10.2f %12.1f %12.1f %9.0f %9.2f %8.1f%% %8.1f%%\n", c, count, secs,
                static_cast<double>(out_tokens) / secs, total_tokens / secs, steps,
                steps > 0 ? 1e3 * (forward + other) / steps : 0.0, 100.0 * forward / std::max(1e-12, forward + other),
                100.0 * other / std::max(1e-12, forward + other));
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
}

// TTFT of a prompt whose first `cached` tokens are in the prefix cache vs the same-length prompt cold; with a host
// tier (--kv-offloading-size), also when the cached prefix was evicted from the device to the host tier.
void run_prefix_cache(ThroughputArgs& a, int prompt_len, int cached, int repeats) {
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
  for (int i = 0; i < repeats; ++i) {
    cold.push_back(ttft(random_ids(prompt_len)).first);
    const std::vector<int32_t> shared = random_ids(cached);
    ttft(with_tail(shared));  // caches the shared prefix
    const auto [t, cached_tokens] = ttft(with_tail(shared));
    warm.push_back(t);
    hit = cached_tokens;
    if (tiered) {
      evict_device();
      const auto [th, host_tokens] = ttft(with_tail(shared));
      host.push_back(th);
      host_hit = host_tokens;
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
    std::printf("host      prefix evicted to the host tier, then hit there: TTFT %.2f ms (%d tokens served)\n",
                1e3 * h, host_hit);
    std::printf("ratio     host-tier hit / cold = %.3f (%.1fx faster); device tier %d blocks, host tier %d blocks\n",
                h / c, c / h, s.num_kv_blocks, s.host_kv_blocks);
    std::printf("copies    %.1f MB to host, %.1f MB back\n", static_cast<double>(s.kv_offload_bytes_to_host) / 1e6,
                static_cast<double>(s.kv_offload_bytes_from_host) / 1e6);
  }
}

}  // namespace

void register_bench_prefix_cache(CLI::App& bench) {
  auto args = std::make_shared<ThroughputArgs>();
  auto prompt_len = std::make_shared<int>(2000);
  auto cached = std::make_shared<int>(1800);
  auto repeats = std::make_shared<int>(5);
  CLI::App* cmd = bench.add_subcommand("prefix-cache", "TTFT with a cached prompt prefix vs cold");
  EngineConfig& e = args->engine;
  cmd->add_option("--model", e.model, "Hugging Face model folder")->required();
  cmd->add_option("--prompt-len", *prompt_len, "Prompt tokens")->capture_default_str();
  cmd->add_option("--cached-len", *cached, "Leading tokens shared with an earlier request")->capture_default_str();
  cmd->add_option("--repeats", *repeats, "Measurements (the median is reported)")->capture_default_str();
  cmd->add_option("--device", e.device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--dtype", e.dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", e.quantization, "gptq | awq | compressed-tensors | fp8 (checked against the checkpoint); fp8 | w8a8-int8 on a dense checkpoint: quantized at load per channel; with --random-weights: w4a16 | w8a16 | w8a8-int8 | fp8");
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
  cmd->callback([args, prompt_len, cached, repeats] { run_prefix_cache(*args, *prompt_len, *cached, *repeats); });
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
  cmd->add_option("--quantization,-q", e.quantization, "gptq | awq | compressed-tensors | fp8 (checked against the checkpoint); fp8 | w8a8-int8 on a dense checkpoint: quantized at load per channel; with --random-weights: w4a16 | w8a16 | w8a8-int8 | fp8");
  cmd->add_option("--kv-cache-dtype", e.kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8 (quantized KV cache, one scale per token and KV head)")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "Token budget per step");
  cmd->add_option("--max-num-seqs", e.max_num_seqs, "Sequences at once (raised to the top concurrency)");
  cmd->add_option("--max-model-len", e.max_model_len, "Context length (default: input + output)");
  cmd->add_option("--gpu-memory-utilization", e.gpu_memory_utilization, "Device memory fraction")->capture_default_str();
  cmd->add_option("--kv-cache-memory-bytes", e.kv_cache_memory_bytes, "KV cache size in bytes");
  cmd->add_option("--threads", e.num_threads, "CPU backend threads (0 = all cores)");
  cmd->add_option("--speculative-config", args->speculative_config, "Speculative decoding as JSON (random ids rarely match)");
  cmd->callback([args] { run_throughput(*args); });
}

}  // namespace peregrine::cli
