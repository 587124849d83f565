// `peregrine perplexity`: perplexity of a model over a text file, computed as llama.cpp's llama-perplexity does.
//
// Method (llama.cpp, examples/perplexity): the whole text is tokenized once (with the tokenizer's BOS); it is cut
// into floor(tokens / N) non-overlapping chunks of N = --context tokens; each chunk is evaluated on its own with its
// first token replaced by BOS (when the tokenizer has one), and only the second half is scored: the predictions of
// tokens N/2 + 1 .. N - 1 from the full prefix of the chunk. PPL = exp(mean negative log-likelihood over every
// scored token). With --stride S the Hugging Face sliding-window method is used instead: windows of N tokens start
// every S tokens and each scores only the tokens the previous window did not (the first window scores all).
// A JSON file holding a list of {"text": ...} objects (../shared/data/code-dev.json) is read as its texts joined
// by blank lines.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/files.h"
#include "cli/progress.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"

namespace peregrine::cli {
namespace {

struct PerplexityArgs {
  std::string model_dir;
  std::string file;
  int context = 512;
  int stride = 0;
  int max_chunks = 0;
  std::string device = "auto";
  std::string dtype = "auto";
  std::string quantization;
  std::string kv_cache_dtype = "auto";
  int threads = 0;
  bool json = false;
};

std::string read_text(const std::string& path) {
  std::string text = read_file(path, "--file");
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorCode::kFormatError, "--file: " + path + ": not valid JSON: " + e.what());
    }
    if (!j.is_array()) throw Error(ErrorCode::kFormatError, "--file: " + path + ": expected a list of {\"text\": ...}");
    std::string joined;
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_object() || !j[i].contains("text") || !j[i]["text"].is_string())
        throw Error(ErrorCode::kFormatError, "--file: " + path + ": element " + std::to_string(i) + " has no string 'text'");
      if (!joined.empty()) joined += "\n\n";
      joined += j[i]["text"].get<std::string>();
    }
    return joined;
  }
  return text;
}

void run_perplexity(const PerplexityArgs& a) {
  if (a.context < 4) throw Error(ErrorCode::kInvalidArgument, "--context must be at least 4");
  if (a.stride < 0 || a.stride > a.context) throw Error(ErrorCode::kInvalidArgument, "--stride must be in [1, --context]");
  const std::string text = read_text(a.file);
  EngineConfig ec;
  ec.model = a.model_dir;
  ec.device = a.device;
  ec.dtype = a.dtype;
  ec.quantization = a.quantization;
  ec.kv_cache_dtype = a.kv_cache_dtype;
  ec.num_threads = a.threads;
  ec.generation_config = "vllm";
  ec.max_num_batched_tokens = std::max(2048, a.context);
  ec.max_num_seqs = 8;
  ec.enable_prefix_caching = false;
  ec.num_kv_blocks_override = 8 * ((a.context + 1 + 15) / 16) + 4;
  ProgressBar bar("loading " + a.model_dir);
  ec.on_load_progress = [&](size_t done, size_t total) { bar.update(done, total); };
  std::unique_ptr<Engine> engine = Engine::create(ec);
  bar.finish();

  const std::vector<int32_t> tokens = engine->tokenize(text, true);
  const std::vector<int32_t> plain = engine->tokenize("x", false), with_special = engine->tokenize("x", true);
  const bool has_bos = with_special.size() > plain.size();
  const int32_t bos = has_bos ? with_special.front() : 0;
  const int64_t n = a.context, total = static_cast<int64_t>(tokens.size());
  // Windows: [start, start + n) with the positions whose predictions are scored.
  struct Window {
    int64_t start;
    int64_t first_scored;  // position within the window of the first scored token
  };
  std::vector<Window> windows;
  if (a.stride == 0) {
    for (int64_t c = 0; (c + 1) * n <= total; ++c) windows.push_back({c * n, n / 2 + 1});
  } else {
    int64_t scored_to = 0;  // tokens before this are scored
    for (int64_t s = 0; s + 1 < total; s += a.stride) {
      const int64_t end = std::min(total, s + n);
      windows.push_back({s, std::max<int64_t>(1, scored_to - s)});
      scored_to = end;
      if (end == total) break;
    }
  }
  if (a.max_chunks > 0 && static_cast<int64_t>(windows.size()) > a.max_chunks) windows.resize(a.max_chunks);
  if (windows.empty())
    throw Error(ErrorCode::kInvalidArgument, "--file: " + a.file + " has " + std::to_string(total) +
                                                 " tokens, fewer than one --context of " + std::to_string(n));
  std::vector<std::vector<int32_t>> prompts;
  for (const Window& w : windows) {
    std::vector<int32_t> p(tokens.begin() + w.start, tokens.begin() + std::min(total, w.start + n));
    if (a.stride == 0 && has_bos) p[0] = bos;
    prompts.push_back(std::move(p));
  }
  SamplingParams sp;
  sp.max_tokens = 1;
  sp.temperature = 0;
  sp.prompt_logprobs = 0;
  sp.ignore_eos = true;
  ProgressBar run_bar("perplexity");
  size_t done = 0;
  double nll = 0;
  int64_t count = 0;
  const size_t batch = 8;
  for (size_t b = 0; b < prompts.size(); b += batch) {
    std::vector<std::vector<int32_t>> part(prompts.begin() + static_cast<std::ptrdiff_t>(b),
                                           prompts.begin() + static_cast<std::ptrdiff_t>(std::min(prompts.size(), b + batch)));
    const std::vector<RequestOutput> results = engine->generate(part, sp);
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i].error) throw Error(ErrorCode::kInternal, "perplexity: " + *results[i].error);
      const Window& w = windows[b + i];
      const auto& lp = results[i].prompt_logprobs;
      for (size_t p = static_cast<size_t>(w.first_scored); p < part[i].size() && p < lp.size(); ++p) {
        nll -= lp[p].chosen.logprob;
        ++count;
      }
    }
    done += results.size();
    run_bar.update(done, prompts.size());
  }
  run_bar.finish();
  const double ppl = std::exp(nll / static_cast<double>(count));
  if (a.json) {
    nlohmann::json j = {{"model", a.model_dir}, {"file", a.file}, {"tokens", total}, {"context", n},
                        {"stride", a.stride}, {"method", a.stride ? "sliding-window" : "llama.cpp"},
                        {"windows", windows.size()}, {"scored_tokens", count}, {"perplexity", ppl},
                        {"mean_nll", nll / static_cast<double>(count)}, {"quantization", a.quantization}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("%s: %lld tokens, %zu %s of %lld, %lld scored: perplexity %.4f\n", a.file.c_str(),
                static_cast<long long>(total), windows.size(), a.stride ? "windows" : "chunks",
                static_cast<long long>(n), static_cast<long long>(count), ppl);
  }
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity over a text file, as llama.cpp's llama-perplexity computes it (or sliding windows)");
  cmd->add_option("--model,-m", args->model_dir, "model folder")->required();
  cmd->add_option("--file,-f", args->file, "text file (or a JSON list of {\"text\": ...})")->required();
  cmd->add_option("--context,-c", args->context, "tokens per chunk (llama.cpp's -c)")->capture_default_str();
  cmd->add_option("--stride", args->stride, "sliding windows every N tokens instead of llama.cpp's chunks");
  cmd->add_option("--chunks", args->max_chunks, "score at most this many chunks (0 = all)");
  cmd->add_option("--device", args->device, "auto | cpu | cuda | ref")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", args->quantization, "gptq | awq | compressed-tensors (checked)");
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8 (quantized KV cache, one scale per token and KV head)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0 = all cores)");
  cmd->add_flag("--json", args->json, "one JSON object");
  cmd->callback([args] { run_perplexity(*args); });
}

}  // namespace peregrine::cli
