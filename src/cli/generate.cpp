// `peregrine generate`: offline generation from prompts (text or token ids) with the simple generation path;
// prints text, or one JSON object per prompt with --json.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/status.h"
#include "engine/device_setup.h"
#include "engine/simple_generate.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::cli {
namespace {

struct GenerateArgs {
  std::string model_dir;
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
  int threads = 0;
  int max_num_batched_tokens = 2048;
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
  if (a.temperature < 0) throw Error(ErrorCode::kInvalidArgument, "--temperature must be >= 0");
  if (a.top_p <= 0 || a.top_p > 1) throw Error(ErrorCode::kInvalidArgument, "--top-p must be in (0, 1]");
  if (a.max_tokens < 0) throw Error(ErrorCode::kInvalidArgument, "--max-tokens must be >= 0");
  const auto t0 = std::chrono::steady_clock::now();
  io::ModelConfig config = io::load_model_config(a.model_dir);
  engine::DeviceChoice choice = engine::resolve_device(a.device, a.dtype, config.torch_dtype);
  auto backend = engine::create_backend(choice, a.threads);

  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!a.prompts.empty() || std::filesystem::exists(std::filesystem::path(a.model_dir) / "tokenizer.json"))
    tok = tokenizer::Tokenizer::load(a.model_dir);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : a.prompts) prompts.push_back(tok->encode(p, true));
  for (const auto& p : a.prompt_ids) prompts.push_back(parse_ids(p));

  model::ModelOptions mo;
  mo.activation_dtype = choice.activation_dtype;
  mo.max_num_batched_tokens = a.max_num_batched_tokens;
  mo.max_num_seqs = std::max<int>(static_cast<int>(prompts.size()), 1);
  ProgressBar bar("loading " + a.model_dir);
  mo.on_load_progress = [&](size_t done, size_t total) { bar.update(done, total); };
  auto model = model::load_model(a.model_dir, *backend, mo);
  bar.finish();

  engine::SimpleGenerateOptions go;
  go.max_tokens = a.max_tokens;
  go.sampler.temperature = static_cast<float>(a.temperature);
  go.sampler.top_p = static_cast<float>(a.top_p);
  go.sampler.top_k = a.top_k;
  go.sampler.min_p = static_cast<float>(a.min_p);
  go.sampler.num_logprobs = a.logprobs;
  go.prompt_logprobs = a.prompt_logprobs;
  go.seed = a.seed;
  go.ignore_eos = a.ignore_eos;
  go.eos_token_ids = config.eos_token_ids;
  go.kv_dtype = choice.kv_dtype;
  bool first = true;
  double ttft_s = 0;
  go.on_token = [&](size_t, int32_t) {
    if (first) {
      ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      first = false;
    }
  };
  auto results = engine::simple_generate(*model, prompts, go, a.max_num_batched_tokens);
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (const auto& r : results) {
    std::string text = tok ? tok->decode(r.token_ids, true) : "";
    if (a.json) {
      nlohmann::json j;
      j["prompt_token_ids"] = r.prompt_token_ids;
      j["token_ids"] = r.token_ids;
      j["text"] = text;
      nlohmann::json lps = nlohmann::json::array();
      if (a.logprobs >= 0) {
        for (const auto& s : r.samples) {
          nlohmann::json top = nlohmann::json::array();
          for (auto& [id, lp] : s.top_logprobs) top.push_back({id, lp});
          lps.push_back({{"token", s.token}, {"logprob", s.logprob}, {"top_logprobs", top}});
        }
      }
      j["logprobs"] = lps;
      if (a.prompt_logprobs >= 0) {
        nlohmann::json pl = nlohmann::json::array();
        for (const auto& pos : r.prompt_top) {
          nlohmann::json top = nlohmann::json::array();
          for (auto& [id, lp] : pos) top.push_back({id, lp});
          pl.push_back(top);
        }
        j["prompt_logprobs"] = pl;
      }
      j["finish_reason"] = r.stopped_by_eos ? "stop" : "length";
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << text << (tok ? "" : "(no tokenizer) ids:");
      if (!tok)
        for (int32_t id : r.token_ids) std::cout << ' ' << id;
      std::cout << "\n";
    }
  }
  if (isatty(STDERR_FILENO))
    std::fprintf(stderr, "[%s] first token after %.3f s, total %.3f s\n", backend->name().c_str(), ttft_s, total_s);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from prompts (offline)");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder")->required();
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
  cmd->add_option("--threads", args->threads, "CPU threads; 0 = all cores")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens, "Tokens per forward step")
      ->capture_default_str();
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace peregrine::cli
