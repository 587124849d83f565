// `peregrine bench latency`: batch-1 (or small batch) prefill and decode speed of one model, with the memory
// bandwidth measured in the same run, decode bytes per token over time as a fraction of it, load time and
// peak RSS. Weights may be random, built from a config.json (--random-weights --config FILE).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bench.h"
#include "core/memory_bandwidth.h"
#include "core/status.h"
#include "engine/device_setup.h"
#include "io/hf_config.h"
#include "model/model.h"

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
  std::string device = "auto";
  std::string dtype = "auto";
  int threads = 0;
  bool json = false;
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

// Device copy bandwidth through the backend: (read + write bytes) / s of a large on-device copy.
double device_copy_gbs(ops::Backend& backend) {
  const size_t bytes = size_t{2} << 30;
  ops::DeviceBuffer a(backend, bytes), b(backend, bytes);
  backend.fill_zero(a.data(), bytes);
  backend.copy_on_device(b.data(), a.data(), bytes);
  backend.synchronize();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    double t0 = now_s();
    backend.copy_on_device(b.data(), a.data(), bytes);
    backend.synchronize();
    best = std::min(best, now_s() - t0);
  }
  return 2.0 * static_cast<double>(bytes) / best / 1e9;
}

// FLOPs of one prefill of `tokens` tokens per sequence (matmuls + causal attention), excluding the LM head.
double prefill_flops(const io::ModelConfig& c, double tokens, int batch) {
  const double h = static_cast<double>(c.hidden_size), hd = static_cast<double>(c.head_dim);
  const double nq = static_cast<double>(c.num_attention_heads), nkv = static_cast<double>(c.num_key_value_heads);
  const double f = static_cast<double>(c.intermediate_size), layers = static_cast<double>(c.num_hidden_layers);
  const double linear = 2.0 * layers * (h * nq * hd + 2 * h * nkv * hd + nq * hd * h + 3 * h * f);
  const double attention = layers * 2.0 * nq * hd * tokens * tokens;  // QK^T and PV over the causal half
  return batch * (linear * tokens + attention);
}

void run_latency(const LatencyArgs& a) {
  const double start = now_s();
  if (a.input_len <= 0 || a.output_len <= 0 || a.batch_size <= 0)
    throw Error(ErrorCode::kInvalidArgument, "--input-len, --output-len and --batch-size must be positive");
  io::ModelConfig config;
  if (a.random_weights) {
    if (a.config_file.empty() && a.model_dir.empty())
      throw Error(ErrorCode::kInvalidArgument, "--random-weights needs --config FILE (or --model DIR for its config)");
    config = a.config_file.empty() ? io::load_model_config(a.model_dir)
                                   : io::parse_model_config(io::read_text_file(a.config_file), a.config_file);
  } else {
    if (a.model_dir.empty()) throw Error(ErrorCode::kInvalidArgument, "give --model DIR or --random-weights --config FILE");
    config = io::load_model_config(a.model_dir);
  }
  engine::DeviceChoice choice = engine::resolve_device(a.device, a.dtype, config.torch_dtype);
  auto backend = engine::create_backend(choice, a.threads);

  // Prefill runs whole sequences per forward, up to this many tokens.
  const int prefill_budget = std::max(a.input_len, std::min(8192, a.input_len * a.batch_size));
  model::ModelOptions mo;
  mo.activation_dtype = choice.activation_dtype;
  mo.max_num_batched_tokens = prefill_budget;
  mo.max_num_seqs = a.batch_size;
  mo.max_model_len = a.input_len + a.output_len;
  mo.random_weights = a.random_weights;
  auto model = a.random_weights ? model::make_random_model(config, *backend, mo) : model::load_model(a.model_dir, *backend, mo);
  backend->synchronize();
  const double load_s = now_s() - start;

  const int block = 16;
  const int per_seq_blocks = (a.input_len + a.output_len + block - 1) / block;
  model->allocate_kv_cache({per_seq_blocks * a.batch_size, block, choice.kv_dtype});
  model->warm_up();  // graphs captured here: the model is ready to serve after this
  const double ready_s = now_s() - start;
  const double rss_ready_mb = peak_rss_mb();  // before the bandwidth probe allocates its buffers

  // The limit, measured in the same run.
  double copy_gbs = 0, read_gbs = 0;
  if (backend->is_host()) {
    MemoryBandwidth bw = measure_host_bandwidth(a.threads);
    copy_gbs = bw.copy_gbs;
    read_gbs = bw.read_gbs;
  } else {
    copy_gbs = device_copy_gbs(*backend);
  }

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(config.vocab_size - 1));
  auto make_batch = [&](int first_seq, int num_seqs, int start_pos, int len) {
    model::ForwardBatch b;
    b.max_blocks_per_seq = per_seq_blocks;
    b.query_start_loc.push_back(0);
    for (int s = first_seq; s < first_seq + num_seqs; ++s) {
      for (int p = start_pos; p < start_pos + len; ++p) {
        b.token_ids.push_back(tok(rng));
        b.positions.push_back(p);
        b.slot_mapping.push_back((s * per_seq_blocks + p / block) * block + p % block);
      }
      b.query_start_loc.push_back(b.num_tokens());
      b.seq_lens.push_back(start_pos + len);
      for (int j = 0; j < per_seq_blocks; ++j) b.block_tables.push_back(s * per_seq_blocks + j);
      b.logits_indices.push_back(b.num_tokens() - 1);
    }
    return b;
  };
  std::vector<float> logits;
  const int seqs_per_prefill = std::max(1, prefill_budget / a.input_len);
  double best_prefill = 1e30, best_decode = 1e30;
  for (int it = 0; it < a.iterations; ++it) {
    double t0 = now_s();
    for (int s = 0; s < a.batch_size; s += seqs_per_prefill)
      model->forward(make_batch(s, std::min(seqs_per_prefill, a.batch_size - s), 0, a.input_len), logits);
    best_prefill = std::min(best_prefill, now_s() - t0);
    t0 = now_s();
    for (int step = 0; step < a.output_len; ++step) model->forward(make_batch(0, a.batch_size, a.input_len + step, 1), logits);
    best_decode = std::min(best_decode, (now_s() - t0) / a.output_len);
  }
  const double prefill_tps = a.input_len * a.batch_size / best_prefill;
  const double prefill_tflops = prefill_flops(config, a.input_len, a.batch_size) / best_prefill / 1e12;
  const double decode_tps = a.batch_size / best_decode;
  const double throughput = a.batch_size * static_cast<double>(a.output_len) / (best_prefill + a.output_len * best_decode);
  const double avg_ctx = a.input_len + a.output_len / 2.0;
  const double bytes_per_step = static_cast<double>(model->weight_bytes()) +
                                a.batch_size * avg_ctx * static_cast<double>(model->kv_bytes_per_token(choice.kv_dtype));
  const double decode_gbs = bytes_per_step / best_decode / 1e9;
  nlohmann::json out = {{"backend", backend->name()},
                        {"weights_gb", model->weight_bytes() / 1e9},
                        {"copy_bandwidth_gbs", copy_gbs},
                        {"load_s", load_s},
                        {"ready_s", ready_s},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"prefill_tflops", prefill_tflops},
                        {"decode_tokens_per_s", decode_tps},
                        {"decode_ms_per_step", best_decode * 1e3},
                        {"decode_gbs", decode_gbs},
                        {"decode_fraction_of_copy_bw", decode_gbs / copy_gbs},
                        {"output_tokens_per_s", throughput},
                        {"peak_rss_mb", rss_ready_mb},
                        {"input_len", a.input_len},
                        {"output_len", a.output_len},
                        {"batch_size", a.batch_size}};
  if (read_gbs > 0) {
    out["read_bandwidth_gbs"] = read_gbs;
    out["decode_fraction_of_read_bw"] = decode_gbs / read_gbs;
  }
  if (a.json) {
    std::cout << out.dump() << "\n";
    return;
  }
  std::printf("backend            %s\n", backend->name().c_str());
  std::printf("weights            %.3f GB (%s)\n", model->weight_bytes() / 1e9, a.random_weights ? "random" : "loaded");
  std::printf("memory bandwidth   copy %.1f GB/s", copy_gbs);
  if (read_gbs > 0) std::printf(", read %.1f GB/s", read_gbs);
  std::printf("\nstartup            loaded in %.2f s, ready (warmed up) in %.2f s, peak RSS %.0f MB\n", load_s, ready_s,
              rss_ready_mb);
  std::printf("prefill            %d x %d tokens: %.1f tokens/s, %.2f TFLOP/s\n", a.batch_size, a.input_len, prefill_tps,
              prefill_tflops);
  std::printf("decode             %.2f tokens/s (%.2f ms/step), %.1f GB/s = %.0f%% of copy bandwidth", decode_tps,
              best_decode * 1e3, decode_gbs, 100 * decode_gbs / copy_gbs);
  if (read_gbs > 0) std::printf(", %.0f%% of read", 100 * decode_gbs / read_gbs);
  std::printf("\nthroughput         %.1f output tokens/s (prefill then %d decode steps)\n", throughput, a.output_len);
}

}  // namespace

void register_bench_latency(CLI::App& bench) {
  auto args = std::make_shared<LatencyArgs>();
  CLI::App* cmd = bench.add_subcommand("latency", "Prefill and decode speed at a small batch, against memory bandwidth");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder");
  cmd->add_option("--config", args->config_file, "config.json for --random-weights");
  cmd->add_flag("--random-weights", args->random_weights, "Build random weights in memory from the config");
  cmd->add_option("--input-len", args->input_len, "Prompt tokens per sequence")->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "Decode steps")->capture_default_str();
  cmd->add_option("--batch-size", args->batch_size, "Sequences per step")->capture_default_str();
  cmd->add_option("--iterations", args->iterations, "Repeats (best is reported)")->capture_default_str();
  cmd->add_option("--device", args->device, "auto | cpu | cuda | ref")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads; 0 = all cores")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  cmd->callback([args] { run_latency(*args); });
}

}  // namespace peregrine::cli
