// `peregrine generate`: offline generation from prompts (text or token ids) through the Engine (the path the
// server uses); prints text, or one JSON object per prompt with --json.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/progress.h"
#include "peregrine/error.h"
#include "peregrine/engine.h"

namespace peregrine::cli {
namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string tokenizer;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  int max_tokens = 64;
  double temperature = 0.0;
  double top_p = 1.0;
  int top_k = 0;
  double min_p = 0.0;
  uint64_t seed = 0;
  int logprobs = -1;
  int prompt_logprobs = -1;
  bool json = false;
  bool ignore_eos = false;
  std::string device = "auto";
  std::string dtype = "auto";
  std::string quantization;
  std::string kv_cache_dtype = "auto";
  int threads = 0;
  int max_num_batched_tokens = 2048;
  std::string speculative_config;
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    while (pos < item.size() && std::isspace(static_cast<unsigned char>(item[pos]))) ++pos;
    if (pos == 0 || pos != item.size() || v < 0 || v > INT32_MAX)
      throw Error(ErrorCode::kInvalidArgument, "--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw Error(ErrorCode::kInvalidArgument, "--prompt-ids is empty");
  return ids;
}

void run_generate(const GenerateArgs& a) {
  if (a.prompts.empty() && a.prompt_ids.empty())
    throw Error(ErrorCode::kInvalidArgument, "give --prompt TEXT or --prompt-ids 1,2,3");
  // Sampling values are checked once, by SamplingParams::validate when the requests are submitted.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> id_prompts;
  for (const auto& p : a.prompt_ids) id_prompts.push_back(parse_ids(p));
  // A GGUF file carries its tokenizer; --tokenizer names another (a folder with tokenizer.json).
  const bool gguf = std::filesystem::path(a.model_dir).extension() == ".gguf";
  const bool has_tokenizer = !a.tokenizer.empty() || gguf ||
                             std::filesystem::exists(std::filesystem::path(a.model_dir) / "tokenizer.json");
  if (!a.prompts.empty() && !has_tokenizer)
    throw Error(ErrorCode::kNotFound, a.model_dir + ": no tokenizer.json for --prompt text; give --prompt-ids");

  EngineConfig ec;
  ec.model = a.model_dir;
  ec.tokenizer = a.tokenizer;
  ec.device = a.device;
  ec.dtype = a.dtype;
  ec.quantization = a.quantization;
  ec.kv_cache_dtype = a.kv_cache_dtype;
  ec.num_threads = a.threads;
  ec.max_num_batched_tokens = a.max_num_batched_tokens;
  ec.max_num_seqs = std::max<int>(static_cast<int>(a.prompts.size() + id_prompts.size()), 1);
  ec.seed = a.seed;
  ec.speculative = SpeculativeConfig::parse(a.speculative_config);
  ec.skip_tokenizer_init = !has_tokenizer;
  ec.generation_config = "vllm";  // the flags say how to sample; generation_config.json is not applied
  // A KV cache for exactly this batch (plus a little), so startup zeroes no more memory than the run uses. Text
  // prompts are measured in bytes here: a token is at least one byte.
  int blocks = 4;
  for (const auto& p : a.prompts) blocks += static_cast<int>((p.size() + 2 + a.max_tokens + 15) / 16);
  for (const auto& p : id_prompts) blocks += static_cast<int>((p.size() + a.max_tokens + 15) / 16);
  ec.num_kv_blocks_override = blocks;
  ProgressBar bar("loading " + a.model_dir);
  ec.on_load_progress = [&](size_t done, size_t total) { bar.update(done, total); };
  std::unique_ptr<Engine> engine = Engine::create(ec);
  bar.finish();

  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : a.prompts) prompts.push_back(engine->tokenize(p, true));
  for (auto& p : id_prompts) prompts.push_back(std::move(p));

  SamplingParams sp;
  sp.max_tokens = a.max_tokens;
  sp.temperature = static_cast<float>(a.temperature);
  sp.top_p = static_cast<float>(a.top_p);
  sp.top_k = a.top_k;
  sp.min_p = static_cast<float>(a.min_p);
  if (a.logprobs >= 0) sp.logprobs = a.logprobs;
  if (a.prompt_logprobs >= 0) sp.prompt_logprobs = a.prompt_logprobs;
  sp.ignore_eos = a.ignore_eos;
  std::vector<RequestOutput> results = engine->generate(prompts, sp);
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double first_token_s = 0;
  for (const RequestOutput& r : results) {
    if (r.error) throw Error(ErrorCode::kInternal, "generation failed: " + *r.error);
    if (first_token_s == 0 || r.timings.first_token < first_token_s) first_token_s = r.timings.first_token;
  }

  for (const RequestOutput& r : results) {
    const CompletionOutput& out = r.outputs.at(0);
    if (a.json) {
      nlohmann::json j;
      j["prompt_token_ids"] = r.prompt_token_ids;
      j["token_ids"] = out.token_ids;
      j["text"] = out.text;
      nlohmann::json lps = nlohmann::json::array();
      for (const PositionLogprobs& pos : out.logprobs) {
        nlohmann::json top = nlohmann::json::array();
        for (const TokenLogprob& t : pos.top) top.push_back({t.token_id, t.logprob});
        lps.push_back({{"token", pos.chosen.token_id}, {"logprob", pos.chosen.logprob}, {"top_logprobs", top}});
      }
      j["logprobs"] = lps;
      if (a.prompt_logprobs >= 0) {
        nlohmann::json pl = nlohmann::json::array();
        for (const PositionLogprobs& pos : r.prompt_logprobs) {
          nlohmann::json top = nlohmann::json::array();
          for (const TokenLogprob& t : pos.top) top.push_back({t.token_id, t.logprob});
          pl.push_back(top);
        }
        j["prompt_logprobs"] = pl;
      }
      j["finish_reason"] = finish_reason_name(out.finish_reason);
      if (ec.speculative.enabled()) {
        j["num_draft_tokens"] = out.num_draft_tokens;
        j["num_accepted_tokens"] = out.num_accepted_tokens;
      }
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else if (has_tokenizer) {
      std::cout << out.text << "\n";
    } else {
      std::cout << "(no tokenizer) ids:";
      for (int32_t id : out.token_ids) std::cout << ' ' << id;
      std::cout << "\n";
    }
  }
  if (isatty(STDERR_FILENO)) {
    // Engine times count from engine creation; the load happened before.
    const double load_s = engine->info().load_seconds;
    std::fprintf(stderr, "[%s] first token after %.3f s, total %.3f s\n", engine->info().backend.c_str(),
                 load_s + first_token_s, total_s);
  }
}

}  // namespace

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from prompts (offline)");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder, or a GGUF file")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Folder with tokenizer.json (default: the model's own)");
  cmd->add_option("--prompt", args->prompts, "Prompt text (repeatable)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, comma-separated (repeatable)");
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate per prompt")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling mass")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
  cmd->add_option("--min-p", args->min_p, "Drop tokens below min_p x the best probability")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Random seed")->capture_default_str();
  cmd->add_option("--logprobs", args->logprobs, "Top-K logprobs per generated token (with --json)");
  cmd->add_option("--prompt-logprobs", args->prompt_logprobs, "Top-K logprobs per prompt position (with --json)");
  cmd->add_flag("--json", args->json, "One JSON object per prompt");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at end-of-sequence tokens");
  cmd->add_option("--device", args->device, "auto | cpu | cuda | ref")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", args->quantization, "gptq | awq | compressed-tensors | fp8 (checked against the checkpoint); fp8 | w8a8-int8 on a dense checkpoint: quantized at load per channel; with --random-weights: w4a16 | w8a16 | w4a8 | w8a8-int8 | fp8");
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8 (quantized KV cache, one scale per token and KV head)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads; 0 = all cores")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens, "Tokens per forward step")
      ->capture_default_str();
  cmd->add_option("--speculative-config", args->speculative_config,
                  "Speculative decoding as JSON, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace peregrine::cli
