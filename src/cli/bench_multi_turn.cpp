// `peregrine bench multi-turn`: a multi-turn chat workload through the Engine. Each conversation starts from one
// shared system prompt; every turn appends a user message (random ids) to the conversation so far and generates an
// answer, which joins the history. Turns go round the conversations (turn t of every conversation, in waves of
// --concurrency), so with more conversation KV than the device holds, a conversation's history is evicted between
// its turns: the prefix cache's lower tiers (--kv-offloading-size, --kv-cache-dir) bring it back instead of
// recomputing it. With tiers configured the same workload runs first without them, in the same process, and both
// rows are printed: throughput, mean and p90 TTFT of the turns after the first, cached prompt tokens by tier, and
// whether both runs produced the same tokens.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "cli/serving_bench.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"

namespace peregrine::cli {
namespace {

struct MultiTurnArgs {
  EngineConfig engine;
  int conversations = 16;
  int turns = 6;
  int system_len = 512;
  int user_len = 128;
  int output_len = 64;
  int concurrency = 0;  // 0: every conversation at once
};

struct RunResult {
  double seconds = 0;
  int64_t output_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  std::vector<double> first_turn_ttft, later_ttft;  // seconds
  uint64_t device_hits = 0, host_hits = 0, disk_hits = 0;  // prompt tokens by tier
  uint64_t bytes_down = 0, bytes_up = 0, disk_written = 0;
  int host_blocks = 0;
  int64_t peak_history_tokens = 0;
  std::vector<std::vector<int32_t>> answers;  // conversation-major, turn by turn
  ModelInfo info;
};

RunResult run_workload(EngineConfig config, const MultiTurnArgs& a) {
  auto engine = Engine::create(config);
  const ModelInfo& info = engine->info();
  std::mt19937 rng(4242);
  std::uniform_int_distribution<int> pick(std::min(100, info.vocab_size - 1), info.vocab_size - 1);
  auto random_ids = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& t : v) t = pick(rng);
    return v;
  };
  const std::vector<int32_t> system = random_ids(a.system_len);
  std::vector<std::vector<int32_t>> history(static_cast<size_t>(a.conversations), system);
  // The user messages are drawn up front, so both runs see the same ones.
  std::vector<std::vector<int32_t>> users;
  for (int i = 0; i < a.conversations * a.turns; ++i) users.push_back(random_ids(a.user_len));
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = a.output_len;
  params.ignore_eos = true;
  const int wave_size = a.concurrency > 0 ? a.concurrency : a.conversations;
  RunResult r;
  r.answers.resize(static_cast<size_t>(a.conversations * a.turns));
  const EngineStats before = engine->stats();
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < a.turns; ++t) {
    for (int first = 0; first < a.conversations; first += wave_size) {
      const int last = std::min(a.conversations, first + wave_size);
      std::vector<std::vector<int32_t>> prompts;
      for (int c = first; c < last; ++c) {
        auto& h = history[static_cast<size_t>(c)];
        const auto& u = users[static_cast<size_t>(c * a.turns + t)];
        h.insert(h.end(), u.begin(), u.end());
        prompts.push_back(h);
      }
      const std::vector<RequestOutput> outs = engine->generate(prompts, params);
      for (int c = first; c < last; ++c) {
        const RequestOutput& o = outs[static_cast<size_t>(c - first)];
        if (o.error) throw Error(ErrorCode::kInternal, "bench multi-turn: a turn failed: " + *o.error);
        const auto& ids = o.outputs[0].token_ids;
        auto& h = history[static_cast<size_t>(c)];
        h.insert(h.end(), ids.begin(), ids.end());
        r.peak_history_tokens = std::max<int64_t>(r.peak_history_tokens, static_cast<int64_t>(h.size()));
        r.answers[static_cast<size_t>(c * a.turns + t)] = ids;
        r.output_tokens += static_cast<int64_t>(ids.size());
        r.prompt_tokens += o.num_prompt_tokens;
        r.cached_tokens += o.num_cached_tokens;
        (t == 0 ? r.first_turn_ttft : r.later_ttft).push_back(o.timings.first_token - o.timings.arrival);
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const EngineStats s = engine->stats();
  const uint64_t hits = s.prefix_cache_hits - before.prefix_cache_hits;
  const uint64_t lower = s.prefix_cache_host_hits - before.prefix_cache_host_hits;
  r.disk_hits = s.prefix_cache_disk_hits - before.prefix_cache_disk_hits;
  r.host_hits = lower - r.disk_hits;
  r.device_hits = hits - lower;
  r.bytes_down = s.kv_offload_bytes_to_host - before.kv_offload_bytes_to_host;
  r.bytes_up = s.kv_offload_bytes_from_host - before.kv_offload_bytes_from_host;
  r.disk_written = s.kv_disk_bytes_written - before.kv_disk_bytes_written;
  r.host_blocks = s.host_kv_blocks;
  r.info = info;
  return r;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

void run_multi_turn(MultiTurnArgs& a) {
  if (a.conversations <= 0 || a.turns <= 0 || a.system_len < 0 || a.user_len <= 0 || a.output_len <= 0 ||
      a.concurrency < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "--conversations, --turns, --user-len and --output-len must be positive; --system-len and "
                "--concurrency not negative");
  }
  const int64_t longest = static_cast<int64_t>(a.system_len) + static_cast<int64_t>(a.turns) * (a.user_len + a.output_len);
  if (a.engine.max_model_len == 0) a.engine.max_model_len = static_cast<int>(longest + 8);
  if (a.engine.max_num_seqs < a.conversations) a.engine.max_num_seqs = a.conversations;
  const bool tiered = a.engine.kv_offloading_size > 0;
  std::vector<std::pair<std::string, RunResult>> rows;
  if (tiered) {
    EngineConfig off = a.engine;
    off.kv_offloading_size = 0;
    off.kv_cache_dir.clear();
    rows.emplace_back("tiers off", run_workload(off, a));
  }
  rows.emplace_back(tiered ? "tiers on" : "device only", run_workload(a.engine, a));
  {
    const ModelInfo& info = rows.back().second.info;
    const double conv_kv = static_cast<double>(a.conversations) * static_cast<double>(longest) *
                           static_cast<double>(info.kv_bytes_per_token);
    std::printf("model     %s on %s\n", info.model_path.c_str(), info.backend.c_str());
    std::printf("workload  %d conversations x %d turns: system prompt %d tokens (shared), user turns %d, answers %d "
                "(greedy, ignore_eos), %d at once\n",
                a.conversations, a.turns, a.system_len, a.user_len, a.output_len,
                a.concurrency > 0 ? a.concurrency : a.conversations);
    std::printf("kv        conversations reach %.1f MB of KV (%lld tokens each at the end); the device tier holds "
                "%.1f MB (%d blocks x %d tokens), the host tier %d blocks\n\n",
                conv_kv / 1e6, static_cast<long long>(rows.back().second.peak_history_tokens),
                static_cast<double>(info.kv_capacity_tokens) * static_cast<double>(info.kv_bytes_per_token) / 1e6,
                info.num_kv_blocks, info.block_size, rows.back().second.host_blocks);
  }
  std::printf("%-12s %9s %12s %14s %14s %14s %9s %10s %10s %10s %11s %11s\n", "run", "seconds", "output tok/s",
              "TTFT turn1 ms", "TTFT later ms", "p90 later ms", "cached%", "device", "host", "disk", "down MB", "up MB");
  for (const auto& [name, r] : rows) {
    std::printf("%-12s %9.2f %12.1f %14.2f %14.2f %14.2f %8.1f%% %10llu %10llu %10llu %11.1f %11.1f\n", name.c_str(),
                r.seconds, static_cast<double>(r.output_tokens) / r.seconds, 1e3 * mean(r.first_turn_ttft),
                1e3 * mean(r.later_ttft), 1e3 * quantile(r.later_ttft, 0.9),
                100.0 * static_cast<double>(r.cached_tokens) / static_cast<double>(std::max<int64_t>(1, r.prompt_tokens)),
                static_cast<unsigned long long>(r.device_hits), static_cast<unsigned long long>(r.host_hits),
                static_cast<unsigned long long>(r.disk_hits), static_cast<double>(r.bytes_down) / 1e6,
                static_cast<double>(r.bytes_up) / 1e6);
  }
  if (rows.size() == 2) {
    const RunResult& off = rows[0].second;
    const RunResult& on = rows[1].second;
    size_t same = 0;
    for (size_t i = 0; i < on.answers.size(); ++i) same += on.answers[i] == off.answers[i] ? 1 : 0;
    std::printf("\non / off  throughput %.2fx, mean later-turn TTFT %.2fx; answers identical in %zu of %zu turns\n",
                (static_cast<double>(on.output_tokens) / on.seconds) / (static_cast<double>(off.output_tokens) / off.seconds),
                mean(on.later_ttft) / std::max(1e-12, mean(off.later_ttft)), same, on.answers.size());
    if (on.disk_written > 0) std::printf("disk      %.1f MB written\n", static_cast<double>(on.disk_written) / 1e6);
  }
}

}  // namespace

void register_bench_multi_turn(CLI::App& bench) {
  auto args = std::make_shared<MultiTurnArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "multi-turn", "Multi-turn chat: growing conversations, throughput and TTFT with the KV tiers off and on");
  EngineConfig& e = args->engine;
  cmd->add_option("--model", e.model, "Hugging Face model folder, or a GGUF file")->required();
  cmd->add_option("--conversations", args->conversations, "Conversations")->capture_default_str();
  cmd->add_option("--turns", args->turns, "Turns per conversation")->capture_default_str();
  cmd->add_option("--system-len", args->system_len, "Tokens of the system prompt every conversation starts with")
      ->capture_default_str();
  cmd->add_option("--user-len", args->user_len, "Tokens per user message")->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "Tokens per answer")->capture_default_str();
  cmd->add_option("--concurrency", args->concurrency, "Conversations whose turns run at once (0: all)")
      ->capture_default_str();
  cmd->add_option("--device", e.device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--dtype", e.dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", e.quantization, "as for bench throughput");
  cmd->add_option("--kv-cache-dtype", e.kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8")->capture_default_str();
  cmd->add_option("--threads", e.num_threads, "CPU backend threads (0 = all cores)");
  cmd->add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "Token budget per step");
  cmd->add_option("--kv-offloading-size", e.kv_offloading_size,
                  "GiB for the prefix cache's host tier (the workload then also runs without the tiers)");
  cmd->add_option("--kv-cache-memory-bytes", e.kv_cache_memory_bytes, "Device KV cache size in bytes");
  cmd->add_option("--kv-cache-dir", e.kv_cache_dir, "Folder for the disk tier");
  cmd->add_option("--kv-cache-disk-gb", e.kv_cache_disk_gb, "GB the disk tier may use")->capture_default_str();
  cmd->add_option("--num-gpu-blocks-override", e.num_kv_blocks_override, "Use exactly this many device KV blocks");
  cmd->add_option("--gpu-memory-utilization", e.gpu_memory_utilization, "Device memory fraction")->capture_default_str();
  cmd->add_flag("--random-weights", e.random_weights, "Random weights of --config's shape (tokenizer from --model)");
  cmd->add_option("--config", e.config_file, "config.json for --random-weights");
  cmd->callback([args] { run_multi_turn(*args); });
}

}  // namespace peregrine::cli
