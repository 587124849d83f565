// `peregrine bench latency`: batch-1 (or small batch) prefill and decode speed of one model through the Engine
// (the path users run), with the memory bandwidth measured in the same run, decode bytes per token over time as
// a fraction of it, load time and peak RSS. Weights may be random, built from a config.json (--random-weights
// --config FILE).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bench.h"
#include "peregrine/error.h"
#include "peregrine/engine.h"

namespace peregrine::cli {
namespace {

struct LatencyArgs {
  std::string model_dir;
  std::string config_file;
  bool random_weights = false;
  int input_len = 128;
  int output_len = 32;
  int batch_size = 1;
  int iterations = 3;
  int max_num_batched_tokens = 0;  // 0: the prompt, up to 8,192 tokens a step
  std::string device = "auto";
  std::string dtype = "auto";
  std::string quantization;
  std::string kv_cache_dtype = "auto";
  int threads = 0;
  bool json = false;
  std::string speculative_config;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      double kb;
      in >> kb;
      return kb / 1024.0;
    }
  }
  return 0;
}

// FLOPs of one prefill of `tokens` tokens per sequence (matmuls + causal attention), excluding the LM head.
double prefill_flops(const ModelInfo& c, double tokens, int batch) {
  const double h = c.hidden_size, hd = c.head_dim, nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  const double f = c.intermediate_size, layers = c.num_layers;
  const double linear = 2.0 * layers * (h * nq * hd + 2 * h * nkv * hd + nq * hd * h + 3 * h * f);
  const double attention = layers * 2.0 * nq * hd * tokens * tokens;  // QK^T and PV over the causal half
  return batch * (linear * tokens + attention);
}

void run_latency(const LatencyArgs& a) {
  const double start = now_s();
  if (a.input_len <= 0 || a.output_len <= 1 || a.batch_size <= 0)
    throw Error(ErrorCode::kInvalidArgument, "--input-len and --batch-size must be positive, --output-len at least 2");
  if (a.random_weights) {
    if (a.config_file.empty() && a.model_dir.empty())
      throw Error(ErrorCode::kInvalidArgument, "--random-weights needs --config FILE (or --model DIR for its config)");
  } else if (a.model_dir.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "give --model DIR or --random-weights --config FILE");
  }
  // The engine path users run. Each iteration submits batch_size random prompts twice: first for one token (the
  // prefill figure: first arrival to last first token), then again for output_len tokens, when the prompts are
  // cached, so every sequence enters decode within a step or two and the decode figure is steps at batch_size.
  // (Timing decode in one pass would time only the batch's tail: prefill runs up to 8,192 tokens a step, so early
  // sequences decode, and finish, while later ones still prefill.)
  // Prefill runs whole sequences per step, up to this many tokens.
  const int prefill_budget = a.max_num_batched_tokens > 0
                                 ? std::max(a.input_len, a.max_num_batched_tokens)
                                 : std::max(a.input_len, std::min(8192, a.input_len * a.batch_size));
  const int block = 16;
  const int per_seq_blocks = (a.input_len + a.output_len + block - 1) / block;
  EngineConfig ec;
  ec.model = a.model_dir;
  ec.random_weights = a.random_weights;
  ec.config_file = a.config_file;
  ec.device = a.device;
  ec.dtype = a.dtype;
  ec.quantization = a.quantization;
  ec.kv_cache_dtype = a.kv_cache_dtype;
  ec.num_threads = a.threads;
  ec.max_num_batched_tokens = prefill_budget;
  ec.max_num_seqs = a.batch_size;
  ec.max_model_len = a.input_len + a.output_len;
  ec.block_size = block;
  // Room for each sequence's output blocks beside every cached prompt, so the second pass finds all its prompts.
  ec.num_kv_blocks_override = (per_seq_blocks + 2) * a.batch_size;
  ec.enable_prefix_caching = true;
  ec.skip_tokenizer_init = true;
  ec.generation_config = "vllm";
  ec.speculative = SpeculativeConfig::parse(a.speculative_config);
  std::unique_ptr<Engine> engine = Engine::create(ec);  // graphs captured here: ready to serve after this
  const ModelInfo& info = engine->info();
  const double ready_s = now_s() - start;
  const double rss_ready_mb = peak_rss_mb();  // before the bandwidth probe allocates its buffers

  // The limit, measured in the same run.
  const MemoryBandwidth bw = engine->measure_memory_bandwidth();

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, info.vocab_size - 1);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = a.output_len;
  sp.ignore_eos = true;
  double best_prefill = 1e30, best_decode = 1e30;
  EngineStats before = engine->stats();
  for (int it = 0; it < a.iterations; ++it) {
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(a.batch_size));
    for (auto& p : prompts) {
      p.resize(static_cast<size_t>(a.input_len));
      for (int32_t& id : p) id = tok(rng);
    }
    // Timings of one pass: the first arrival, the last first token, the last finish.
    auto pass = [&](const SamplingParams& params, double* arrival, double* first_token, double* finished) {
      *arrival = 1e30;
      *first_token = *finished = 0;
      for (const RequestOutput& r : engine->generate(prompts, params)) {
        if (r.error) throw Error(ErrorCode::kInternal, "bench latency: a request failed: " + *r.error);
        *arrival = std::min(*arrival, r.timings.arrival);
        *first_token = std::max(*first_token, r.timings.first_token);
        *finished = std::max(*finished, r.timings.finished);
      }
    };
    SamplingParams one = sp;
    one.max_tokens = 1;
    double arrival, first_token, finished;
    pass(one, &arrival, &first_token, &finished);  // prefill: the prompts computed and cached
    best_prefill = std::min(best_prefill, first_token - arrival);
    pass(sp, &arrival, &first_token, &finished);  // decode: the same prompts from the cache, the whole batch at once
    best_decode = std::min(best_decode, (finished - first_token) / (a.output_len - 1));
  }
  const EngineStats after = engine->stats();
  const double steps = static_cast<double>(after.num_steps - before.num_steps);
  const double forward_share =
      (after.step_forward_seconds - before.step_forward_seconds) /
      std::max(1e-12, (after.step_schedule_seconds + after.step_prepare_seconds + after.step_forward_seconds +
                       after.step_sample_seconds + after.step_update_seconds) -
                          (before.step_schedule_seconds + before.step_prepare_seconds + before.step_forward_seconds +
                           before.step_sample_seconds + before.step_update_seconds));
  const double load_s = info.load_seconds;
  const double prefill_tps = a.input_len * a.batch_size / best_prefill;
  const double prefill_tflops = prefill_flops(info, a.input_len, a.batch_size) / best_prefill / 1e12;
  const double decode_tps = a.batch_size / best_decode;
  const double throughput = a.batch_size * static_cast<double>(a.output_len) / (best_prefill + (a.output_len - 1) * best_decode);
  const double avg_ctx = a.input_len + a.output_len / 2.0;
  const double bytes_per_step = static_cast<double>(info.decode_weight_bytes) +
                                a.batch_size * avg_ctx * static_cast<double>(info.kv_bytes_per_token);
  const double decode_gbs = bytes_per_step / best_decode / 1e9;
  nlohmann::json out = {{"backend", info.backend},
                        {"weights_gb", info.weight_bytes / 1e9},
                        {"copy_bandwidth_gbs", bw.copy_gbs},
                        {"load_s", load_s},
                        {"ready_s", ready_s},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"prefill_tflops", prefill_tflops},
                        {"decode_tokens_per_s", decode_tps},
                        {"decode_ms_per_step", best_decode * 1e3},
                        {"decode_gbs", decode_gbs},
                        {"decode_fraction_of_copy_bw", decode_gbs / bw.copy_gbs},
                        {"output_tokens_per_s", throughput},
                        {"forward_share_of_step", forward_share},
                        {"engine_steps", steps},
                        {"peak_rss_mb", rss_ready_mb},
                        {"input_len", a.input_len},
                        {"output_len", a.output_len},
                        {"batch_size", a.batch_size}};
  if (bw.read_gbs > 0) {
    out["read_bandwidth_gbs"] = bw.read_gbs;
    out["decode_fraction_of_read_bw"] = decode_gbs / bw.read_gbs;
  }
  if (a.json) {
    std::cout << out.dump() << "\n";
    return;
  }
  std::printf("backend            %s\n", info.backend.c_str());
  std::printf("weights            %.3f GB (%s)\n", info.weight_bytes / 1e9, a.random_weights ? "random" : "loaded");
  std::printf("memory bandwidth   copy %.1f GB/s", bw.copy_gbs);
  if (bw.read_gbs > 0) std::printf(", read %.1f GB/s", bw.read_gbs);
  std::printf("\nstartup            loaded in %.2f s, ready (warmed up) in %.2f s, peak RSS %.0f MB\n", load_s, ready_s,
              rss_ready_mb);
  std::printf("prefill            %d x %d tokens: %.1f tokens/s, %.2f TFLOP/s\n", a.batch_size, a.input_len, prefill_tps,
              prefill_tflops);
  std::printf("decode             %.2f tokens/s (%.2f ms/step), %.1f GB/s = %.0f%% of copy bandwidth", decode_tps,
              best_decode * 1e3, decode_gbs, 100 * decode_gbs / bw.copy_gbs);
  if (bw.read_gbs > 0) std::printf(", %.0f%% of read", 100 * decode_gbs / bw.read_gbs);
  std::printf("\nthroughput         %.1f output tokens/s (prefill then %d decode steps)\n", throughput, a.output_len - 1);
  std::printf("engine             forward %.1f%% of step time (the rest: scheduling, staging, sampling)\n",
              100 * forward_share);
}

}  // namespace

void register_bench_latency(CLI::App& bench) {
  auto args = std::make_shared<LatencyArgs>();
  CLI::App* cmd = bench.add_subcommand("latency", "Prefill and decode speed at a small batch, against memory bandwidth");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder, or a GGUF file");
  cmd->add_option("--config", args->config_file, "config.json for --random-weights");
  cmd->add_flag("--random-weights", args->random_weights, "Build random weights in memory from the config");
  cmd->add_option("--input-len", args->input_len, "Prompt tokens per sequence")->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "Decode steps")->capture_default_str();
  cmd->add_option("--batch-size", args->batch_size, "Sequences per step")->capture_default_str();
  cmd->add_option("--iterations", args->iterations, "Repeats (best is reported)")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens,
                  "Tokens a prefill step takes (default: the prompts, up to 8192; at least one prompt)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", args->device, "auto | cpu | cuda | ref")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", args->quantization, "gptq | awq | compressed-tensors | fp8 (checked against the checkpoint); fp8 | w8a8-int8 on a dense checkpoint: quantized at load per channel; with --random-weights: w4a16 | w8a16 | w4a8 | w8a8-int8 | fp8");
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8 (quantized KV cache, one scale per token and KV head)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads; 0 = all cores")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->add_option("--speculative-config", args->speculative_config, "Speculative decoding as JSON");
  cmd->callback([args] { run_latency(*args); });
}

}  // namespace peregrine::cli
