// `peregrine bench speculative`: speculative decoding on code workloads, each method beside plain decoding in the
// same run. Workloads from a dataset of files (a JSON list of {"text": ...}, e.g. ../shared/data/code-dev.json):
//   complete: the first half of a file; the model continues it.
//   edit:     a whole file, an instruction-like comment, then the file's first lines again, so the output mostly
//             re-types the input, as code-editing assistants do.
// At each concurrency, closed-loop (a new request starts when one ends), greedy, the same prompts for every
// method: output tokens/s, the speedup over plain decoding, tokens emitted per verify step, the draft acceptance,
// and whether every output equals plain decoding's (it must). With --repeats N the methods (plain first) run in
// turn N times per level, each on a fresh engine, and the figures are medians (seconds, and the speedup of the
// median times): on a busy machine one run of each swings more than the differences measured.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/files.h"
#include "cli/serving_bench.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"

namespace peregrine::cli {
namespace {

struct SpecArgs {
  EngineConfig engine;
  std::string dataset;
  std::string workloads = "complete,edit";
  std::string concurrency = "1,8,32";
  std::vector<std::string> methods;  // JSON configs; plain decoding always runs first
  int num_prompts = 0;               // per level; 0 = max(concurrency, 8)
  int output_len = 128;
  int max_prompt_chars = 3000;
  int repeats = 1;
  std::string json_out;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) if (!item.empty()) out.push_back(item);
  return out;
}

// The workload's prompt texts, cut to whole lines within max_chars.
std::vector<std::string> make_prompts(const std::vector<std::string>& files, const std::string& workload, size_t max_chars) {
  auto cut_lines = [](const std::string& text, size_t n) {
    if (text.size() <= n) return text;
    const size_t nl = text.rfind('\n', n);
    size_t end = nl == std::string::npos ? n : nl + 1;
    while (end > 0 && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // whole characters
    return text.substr(0, end);
  };
  std::vector<std::string> out;
  for (const std::string& f : files) {
    if (f.size() < 200) continue;
    if (workload == "complete") {
      out.push_back(cut_lines(f, std::min(max_chars, f.size() / 2)));
    } else if (workload == "edit") {
      const std::string body = cut_lines(f, max_chars * 2 / 3);
      out.push_back(body + "\n\n# Rewrite the code above with clearer names and docstrings, keeping its behaviour.\n" +
                    cut_lines(body, std::min<size_t>(body.size(), 160)));
    } else {
      throw Error(ErrorCode::kInvalidArgument, "--workloads: unknown workload '" + workload + "' (complete, edit)");
    }
  }
  if (out.empty()) throw Error(ErrorCode::kInvalidArgument, "--dataset: no file of at least 200 characters");
  return out;
}

struct LevelResult {
  double seconds = 0;
  uint64_t output_tokens = 0;
  uint64_t verify_steps = 0, drafted = 0, accepted = 0;
  std::vector<std::vector<int32_t>> outputs;  // per prompt index
};

LevelResult run_level(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, int concurrency, int count,
                      int output_len) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = output_len;
  LevelResult r;
  r.outputs.resize(static_cast<size_t>(count));
  std::mutex mutex;
  std::condition_variable cv;
  int in_flight = 0, next = 0, done = 0;
  const EngineStats before = engine.stats();
  static int batch = 0;
  const std::string prefix = "spec-" + std::to_string(batch++) + "-";
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex);
  while (done < count) {
    while (in_flight < concurrency && next < count) {
      const int i = next++;
      ++in_flight;
      lock.unlock();
      engine.add_request(prefix + std::to_string(i), prompts[static_cast<size_t>(i) % prompts.size()], p,
                         [&, i](RequestOutput&& o) {
                           std::lock_guard<std::mutex> g(mutex);
                           for (auto& c : o.outputs)
                             r.outputs[static_cast<size_t>(i)].insert(r.outputs[static_cast<size_t>(i)].end(),
                                                                      c.token_ids.begin(), c.token_ids.end());
                           if (o.finished) {
                             --in_flight;
                             ++done;
                             cv.notify_all();
                           }
                         });
      lock.lock();
    }
    cv.wait(lock, [&] { return done == count || (in_flight < concurrency && next < count); });
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& o : r.outputs) r.output_tokens += o.size();
  lock.unlock();
  // The stats snapshot is published after the step that delivered the last output.
  EngineStats after = engine.stats();
  for (int spin = 0; spin < 200 && after.generation_tokens < before.generation_tokens + r.output_tokens; ++spin) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    after = engine.stats();
  }
  r.verify_steps = after.spec_num_drafts - before.spec_num_drafts;
  r.drafted = after.spec_num_draft_tokens - before.spec_num_draft_tokens;
  r.accepted = after.spec_num_accepted_tokens - before.spec_num_accepted_tokens;
  return r;
}

void run_speculative(SpecArgs& a) {
  if (a.dataset.empty()) throw Error(ErrorCode::kInvalidArgument, "--dataset FILE is required (a JSON list of {\"text\"})");
  const nlohmann::json data = nlohmann::json::parse(read_file(a.dataset, "--dataset"), nullptr, false);
  if (data.is_discarded() || !data.is_array()) throw Error(ErrorCode::kFormatError, a.dataset + ": expected a JSON list of {\"text\": ...}");
  std::vector<std::string> files;
  for (const auto& e : data)
    if (e.is_object() && e.contains("text") && e["text"].is_string()) files.push_back(e["text"].get<std::string>());
  std::vector<int> levels;
  for (const std::string& c : split(a.concurrency)) levels.push_back(std::max(1, std::stoi(c)));
  const int top = *std::max_element(levels.begin(), levels.end());
  a.engine.max_num_seqs = std::max(a.engine.max_num_seqs, top);
  a.engine.generation_config = "vllm";
  std::vector<std::string> configs{""};
  configs.insert(configs.end(), a.methods.begin(), a.methods.end());
  nlohmann::json report = nlohmann::json::array();
  int mismatches = 0;
  std::printf("%-9s %-34s %5s %8s %10s %8s %11s %8s %9s\n", "workload", "method", "conc", "seconds", "output tok/s",
              "speedup", "tok/verify", "accept", "identical");
  if (a.repeats < 1) throw Error(ErrorCode::kInvalidArgument, "--repeats must be at least 1");
  std::vector<std::string> labels;
  for (const std::string& cfg : configs) {
    // Checked first (a clear error naming the key), so the label below reads a valid config.
    const SpeculativeConfig sc = SpeculativeConfig::parse(cfg);
    std::string label = "plain";
    if (sc.enabled()) {
      label = std::string(SpeculativeConfig::method_name(sc.method)) + " k=" + std::to_string(sc.num_speculative_tokens);
      if (sc.max_tree_tokens > 0) label += " tree=" + std::to_string(sc.max_tree_tokens);
      if (!sc.model.empty()) label += " (" + std::filesystem::path(sc.model).filename().string() + ")";
      if (sc.draft_vocab_size >= 0) label += " vocab=" + std::to_string(sc.draft_vocab_size);
      if (!sc.speculative_token_map.empty()) label += " map";
    }
    labels.push_back(label);
  }
  for (const std::string& workload : split(a.workloads)) {
    const std::vector<std::string> texts = make_prompts(files, workload, static_cast<size_t>(a.max_prompt_chars));
    for (int c : levels) {
      const int count = a.num_prompts > 0 ? a.num_prompts : std::max(c, 8);
      // runs[m][r]: method m's r-th run; methods take turns so drift in the machine hits all alike.
      std::vector<std::vector<LevelResult>> runs(configs.size());
      for (int rep = 0; rep < a.repeats; ++rep) {
        for (size_t m = 0; m < configs.size(); ++m) {
          EngineConfig ec = a.engine;
          ec.speculative = SpeculativeConfig::parse(configs[m]);
          // A fresh engine per run: a cache that learns (lookahead) must not have seen these prompts' outputs.
          auto engine = Engine::create(ec);
          std::vector<std::vector<int32_t>> prompts;
          for (const std::string& t : texts) prompts.push_back(engine->tokenize(t, true));
          // Warm up (first-use allocations, page faults) on a prompt of its own.
          run_level(*engine, {engine->tokenize("import os\n\n\ndef main():\n", true)}, 1, 1, 8);
          runs[m].push_back(run_level(*engine, prompts, c, count, a.output_len));
        }
      }
      auto seconds_of = [&](size_t m) {
        std::vector<double> v;
        for (const LevelResult& r : runs[m]) v.push_back(r.seconds);
        return v;
      };
      const double plain_s = median(seconds_of(0));
      for (size_t m = 0; m < configs.size(); ++m) {
        const std::vector<double> secs = seconds_of(m);
        const double med = median(secs);
        const LevelResult& r = runs[m].front();
        const double tps = static_cast<double>(r.output_tokens) / med;
        const double speedup = plain_s / med;
        bool identical = true;
        for (const LevelResult& x : runs[m]) identical = identical && x.outputs == runs[0].front().outputs;
        uint64_t verify_steps = 0, drafted = 0, accepted = 0;
        for (const LevelResult& x : runs[m]) {
          verify_steps += x.verify_steps;
          drafted += x.drafted;
          accepted += x.accepted;
        }
        const double per_verify = verify_steps ? 1.0 + static_cast<double>(accepted) / static_cast<double>(verify_steps) : 1.0;
        const double acceptance = drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
        std::printf("%-9s %-34s %5d %8.2f %12.1f %7.2fx %11.2f %7.0f%% %9s\n", workload.c_str(), labels[m].c_str(), c,
                    med, tps, speedup, per_verify, 100 * acceptance, identical ? "yes" : "NO");
        std::fflush(stdout);
        report.push_back({{"workload", workload}, {"method", labels[m]}, {"config", configs[m]}, {"concurrency", c},
                          {"seconds", med}, {"seconds_each", secs}, {"output_tokens", r.output_tokens},
                          {"output_tokens_per_s", tps}, {"speedup", speedup}, {"tokens_per_verify_step", per_verify},
                          {"acceptance", acceptance}, {"verify_steps", verify_steps}, {"drafted", drafted},
                          {"accepted", accepted}, {"identical_to_plain", identical}});
        if (!identical) ++mismatches;
      }
    }
  }
  if (mismatches > 0) {
    std::printf("\n%d level(s) gave outputs different from plain decoding (see 'identical')\n", mismatches);
  }
  if (!a.json_out.empty()) {
    std::FILE* f = std::fopen(a.json_out.c_str(), "w");
    if (!f) throw Error(ErrorCode::kIoError, "--json-out: cannot write " + a.json_out);
    std::fputs(report.dump(1).c_str(), f);
    std::fclose(f);
  }
  if (mismatches > 0) throw Error(ErrorCode::kInternal, "speculative outputs differ from plain decoding");
}

}  // namespace

void register_bench_speculative(CLI::App& bench) {
  auto args = std::make_shared<SpecArgs>();
  CLI::App* cmd = bench.add_subcommand("speculative", "Speculative decoding on code workloads, beside plain decoding");
  EngineConfig& e = args->engine;
  cmd->add_option("--model", e.model, "Hugging Face model folder, or a GGUF file")->required();
  cmd->add_option("--dataset", args->dataset, "JSON list of {\"text\": ...} files (e.g. ../shared/data/code-dev.json)")->required();
  cmd->add_option("--workloads", args->workloads, "complete, edit (comma-separated)")->capture_default_str();
  cmd->add_option("--concurrency", args->concurrency, "Comma-separated concurrency levels")->capture_default_str();
  cmd->add_option("--speculative-config", args->methods, "A method to measure, as JSON (repeatable)")->required();
  cmd->add_option("--num-prompts", args->num_prompts, "Requests per level (default: max(concurrency, 8))");
  cmd->add_option("--output-len", args->output_len, "Tokens generated per request")->capture_default_str();
  cmd->add_option("--max-prompt-chars", args->max_prompt_chars, "Prompt text cut to whole lines within this")->capture_default_str();
  cmd->add_option("--device", e.device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--dtype", e.dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", e.quantization, "gptq | awq | compressed-tensors | fp8 (checked against the checkpoint); fp8 | w8a8-int8 on a dense checkpoint: quantized at load per channel; with --random-weights: w4a16 | w8a16 | w4a8 | w8a8-int8 | fp8");
  cmd->add_option("--kv-cache-dtype", e.kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8 (quantized KV cache, one scale per token and KV head)")->capture_default_str();
  cmd->add_option("--threads", e.num_threads, "CPU backend threads (0 = all cores)");
  cmd->add_option("--max-model-len", e.max_model_len, "Context length")->capture_default_str();
  cmd->add_option("--repeats", args->repeats, "Runs of every method per level, in turn; figures are medians")
      ->capture_default_str();
  cmd->add_option("--json-out", args->json_out, "Write every row as JSON here");
  cmd->callback([args] { run_speculative(*args); });
}

}  // namespace peregrine::cli
