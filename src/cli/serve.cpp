// `peregrine serve <model_dir or file.gguf>`: the OpenAI/vLLM-compatible HTTP server. Flags carry vLLM's names; the startup
// log says what was loaded, the KV capacity and the URL. SIGINT/SIGTERM: stop accepting, let in-flight requests
// finish for --shutdown-timeout seconds, then end the rest (streams with a final event and [DONE], whole responses
// with a 503), exit 0 (a second signal exits at once).
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "peregrine/error.h"
#include "peregrine/engine.h"
#include "peregrine/server.h"

namespace peregrine::cli {
namespace {

struct ServeArgs {
  EngineConfig engine;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> served_model_names;
  std::string api_key;
  size_t max_request_body_bytes = size_t{16} << 20;
  int io_threads = 2;
  double shutdown_timeout_s = 0.0;  // drain in-flight requests this long before aborting them (vLLM's default: 0)
  size_t max_connections = 4096;
  std::vector<std::string> allowed_origins, allowed_methods, allowed_headers, allowed_hosts;
  bool allow_credentials = false;
  bool enable_auto_tool_choice = false;
  bool ignored_flag = false;
  std::string tool_call_parser;
  std::string speculative_config;
};

// Many concurrent connections need file descriptors: raise the soft limit to the hard one.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// vLLM takes these lists as JSON ('["https://a.example"]'); a comma-separated list or the flag repeated works too.
std::vector<std::string> parse_list(const std::vector<std::string>& values, const char* flag) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    if (!v.empty() && v.front() == '[') {
      const nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
      if (j.is_discarded() || !j.is_array()) {
        throw Error(ErrorCode::kInvalidArgument, std::string(flag) + ": '" + v + "' is not a JSON list of strings");
      }
      for (const auto& e : j) {
        if (!e.is_string()) {
          throw Error(ErrorCode::kInvalidArgument, std::string(flag) + ": '" + v + "' is not a JSON list of strings");
        }
        out.push_back(e.get<std::string>());
      }
      continue;
    }
    size_t start = 0;
    while (start <= v.size()) {
      const size_t comma = std::min(v.find(',', start), v.size());
      std::string item = v.substr(start, comma - start);
      while (!item.empty() && item.back() == ' ') item.pop_back();
      while (!item.empty() && item.front() == ' ') item.erase(0, 1);
      // CLI11 reads '["a", "b"]' as a list itself and hands over the elements still quoted.
      if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') && item.back() == item.front()) {
        item = item.substr(1, item.size() - 2);
      }
      if (!item.empty()) out.push_back(item);
      start = comma + 1;
    }
  }
  for (const std::string& item : out) {
    for (char c : item) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        throw Error(ErrorCode::kInvalidArgument, std::string(flag) + ": control character in '" + item + "'");
      }
    }
  }
  return out;
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

void run_serve(ServeArgs& a) {
  if (a.engine.tensor_parallel_size != 1) {
    throw Error(ErrorCode::kInvalidArgument, "--tensor-parallel-size " + std::to_string(a.engine.tensor_parallel_size) +
                                                 " is not supported yet: Peregrine serves a model on one device");
  }
  if (a.port < 0 || a.port > 65535) throw Error(ErrorCode::kInvalidArgument, "--port must be in [0, 65535]");
  if (!a.tool_call_parser.empty() && !is_tool_call_parser(a.tool_call_parser)) {
    throw Error(ErrorCode::kInvalidArgument, "--tool-call-parser: unknown parser '" + a.tool_call_parser +
                                                 "' (known: " + tool_call_parser_names() + ")");
  }
  a.engine.speculative = SpeculativeConfig::parse(a.speculative_config);
  if (!(a.shutdown_timeout_s >= 0.0)) throw Error(ErrorCode::kInvalidArgument, "--shutdown-timeout must be >= 0");
  if (a.max_connections < 1) throw Error(ErrorCode::kInvalidArgument, "--max-connections must be at least 1");
  // The API key need not be on the command line (where `ps` shows it): vLLM's environment variable works too.
  std::string key_source = "--api-key";
  for (const char* env : {"PEREGRINE_API_KEY", "VLLM_API_KEY"}) {
    if (!a.api_key.empty()) break;
    if (const char* v = std::getenv(env); v != nullptr && *v != '\0') {
      a.api_key = v;
      key_source = env;
    }
  }
  for (char c : a.api_key) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      throw Error(ErrorCode::kInvalidArgument, key_source + ": the API key must not contain spaces or control characters");
    }
  }
  ServerConfig sc;
  sc.host = a.host;
  sc.port = a.port;
  sc.api_key = a.api_key;
  sc.max_request_body_bytes = a.max_request_body_bytes;
  sc.io_threads = a.io_threads;
  sc.allowed_origins = parse_list(a.allowed_origins, "--allowed-origins");
  sc.allowed_methods = parse_list(a.allowed_methods, "--allowed-methods");
  sc.allowed_headers = parse_list(a.allowed_headers, "--allowed-headers");
  sc.allow_credentials = a.allow_credentials;
  sc.allowed_hosts = parse_list(a.allowed_hosts, "--allowed-hosts");
  sc.enable_auto_tool_choice = a.enable_auto_tool_choice;
  sc.tool_call_parser = a.tool_call_parser;
  if (a.enable_auto_tool_choice && a.tool_call_parser.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "--enable-auto-tool-choice needs --tool-call-parser (" + tool_call_parser_names() + ")");
  }
  // Signals are taken by sigwait() on this thread only; every thread started below inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  // Each connection is a descriptor; keep some for the model files and the process itself.
  rlimit fds{};
  if (getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur != RLIM_INFINITY && fds.rlim_cur > 128 &&
      a.max_connections > fds.rlim_cur - 128) {
    std::cerr << "peregrine serve: --max-connections lowered from " << a.max_connections << " to "
              << fds.rlim_cur - 128 << " (the open-file limit is " << fds.rlim_cur << ")" << std::endl;
    a.max_connections = static_cast<size_t>(fds.rlim_cur - 128);
  }

  std::cerr << "peregrine serve: loading " << a.engine.model << " ..." << std::endl;
  std::unique_ptr<Engine> engine = Engine::create(a.engine);
  const ModelInfo& info = engine->info();
  sc.served_model_names = a.served_model_names.empty() ? std::vector<std::string>{a.engine.model} : a.served_model_names;
  sc.max_connections = a.max_connections;
  std::unique_ptr<ApiServer> http = ApiServer::start(*engine, sc);

  std::cerr << "peregrine serve: loaded " << info.architecture << " from " << info.model_path << " ("
            << mib(info.weight_bytes) << " of weights, " << info.dtype << " on " << info.backend << ") in "
            << info.load_seconds << " s\n"
            << "peregrine serve: KV cache " << info.num_kv_blocks << " blocks x " << info.block_size << " = "
            << info.kv_capacity_tokens << " tokens (" << mib(info.kv_cache_bytes) << "), max_model_len "
            << info.max_model_len << ", prefix caching " << (a.engine.enable_prefix_caching ? "on" : "off")
            << (info.has_chat_template ? ", chat template loaded" : ", no chat template")
            << (sc.enable_auto_tool_choice ? ", tool calls parsed (" + a.tool_call_parser + ")" : std::string())
            << "\n"
            << "peregrine serve: serving " << sc.served_model_names.front() << " on http://" << a.host << ":"
            << http->port() << " (Ctrl-C to stop)" << std::endl;

  if (!a.api_key.empty()) std::cerr << "peregrine serve: /v1 routes need the API key (" << key_source << ")\n";
  if (!http->checked_hosts().empty()) {
    std::string names;
    for (const std::string& h : http->checked_hosts()) names += (names.empty() ? "" : ", ") + h;
    std::cerr << "peregrine serve: Host header checked against " << names << " (--allowed-hosts adds names)\n";
  }

  int sig = 0;
  sigwait(&signals, &sig);
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  timespec tick{0, 20 * 1000 * 1000};
  auto wait_while = [&](double seconds, auto&& busy) {
    // Returns false when a second signal cut the wait short.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (busy() && std::chrono::steady_clock::now() < deadline) {
      if (sigtimedwait(&signals, nullptr, &tick) > 0) return false;
    }
    return true;
  };
  http->begin_shutdown();
  bool patient = true;
  if (a.shutdown_timeout_s > 0) {
    std::cerr << "peregrine serve: " << name << ": no longer accepting; letting " << http->num_active_requests()
              << " in-flight requests finish for up to " << a.shutdown_timeout_s << " s" << std::endl;
    patient = wait_while(a.shutdown_timeout_s, [&] { return http->num_active_requests() > 0; });
    if (http->num_active_requests() > 0) {
      std::cerr << "peregrine serve: ending " << http->num_active_requests() << " requests still in flight" << std::endl;
    }
  } else {
    std::cerr << "peregrine serve: " << name << ": no longer accepting; ending in-flight requests" << std::endl;
  }
  // Every live request gets its final delta (finish_reason abort): streams end with it and [DONE], whole
  // responses with a 503.
  engine->shutdown();
  // Let those final bytes go out, then stop; a second signal stops at once.
  if (patient) wait_while(5.0, [&] { return http->num_connections() > 0; });
  http->stop();
  std::cerr << "peregrine serve: stopped" << std::endl;
}

}  // namespace

void register_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI/vLLM-compatible HTTP server");
  EngineConfig& e = args->engine;
  cmd->add_option("model", e.model, "Hugging Face model folder, or a GGUF file")->required();
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on (0 = any free port)")->capture_default_str();
  cmd->add_option("--served-model-name", args->served_model_names, "Model name(s) the API reports and accepts");
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer <key>' on /v1 routes (default: $PEREGRINE_API_KEY or $VLLM_API_KEY)");
  cmd->add_option("--allowed-origins", args->allowed_origins,
                  "Origins whose browser pages may call the API (CORS), as a JSON list or comma-separated; "
                  "\"*\" for any (default: none)");
  cmd->add_option("--allowed-methods", args->allowed_methods, "Methods allowed to those origins (default: all)");
  cmd->add_option("--allowed-headers", args->allowed_headers, "Request headers allowed to those origins (default: all)");
  cmd->add_flag("--allow-credentials", args->allow_credentials, "Allow credentials (cookies, auth) in CORS requests");
  cmd->add_option("--allowed-hosts", args->allowed_hosts,
                  "Names the Host header may carry besides localhost and the bound address (checked on loopback "
                  "addresses, and on others once given); \"*\" turns the check off");
  cmd->add_option("--max-connections", args->max_connections, "Open HTTP connections; more get 503")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", args->shutdown_timeout_s,
                  "On SIGTERM/SIGINT, seconds to let in-flight requests finish before aborting them")
      ->capture_default_str();
  cmd->add_option("--tokenizer", e.tokenizer, "Folder with tokenizer.json (default: the model folder, or the GGUF file's own)");
  cmd->add_option("--max-model-len", e.max_model_len, "Context length (default: the model's)");
  cmd->add_option("--max-num-seqs", e.max_num_seqs, "Sequences running at once")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", e.max_num_batched_tokens,
                  "Token budget per step (default: 2048 on CPU, 8192 on GPU)");
  cmd->add_option("--block-size", e.block_size, "Tokens per KV block")->capture_default_str();
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", e.enable_prefix_caching,
                "Reuse the KV of shared prompt prefixes (default on)");
  cmd->add_option("--gpu-memory-utilization", e.gpu_memory_utilization,
                  "Fraction of device memory for weights, KV cache and activations")
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory-bytes", e.kv_cache_memory_bytes, "KV cache size in bytes (overrides the above)");
  cmd->add_option("--num-gpu-blocks-override", e.num_kv_blocks_override, "Use exactly this many KV blocks");
  cmd->add_option("--dtype", e.dtype, "auto | float32 | bfloat16 | float16")->capture_default_str();
  cmd->add_option("--quantization,-q", e.quantization, "gptq | awq | compressed-tensors | fp8 (checked against the checkpoint); fp8 | w8a8-int8 on a dense checkpoint: quantized at load per channel; with --random-weights: w4a16 | w8a16 | w4a8 | w8a8-int8 | fp8");
  cmd->add_option("--kv-cache-dtype", e.kv_cache_dtype, "auto | fp8 | fp8_e4m3 | int8 (quantized KV cache, one scale per token and KV head)")->capture_default_str();
  cmd->add_option("--device", e.device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--seed", e.seed, "Seed for requests without their own")->capture_default_str();
  cmd->add_option("--chat-template", e.chat_template, "Chat template file or inline template");
  cmd->add_option("--generation-config", e.generation_config,
                  "auto (model folder) | vllm (no defaults) | folder with generation_config.json")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel-size", e.tensor_parallel_size, "Devices to split the model over (only 1)")
      ->capture_default_str();
  cmd->add_option("--max-queued-requests", e.max_queued_requests, "Waiting requests beyond this get 503")
      ->capture_default_str();
  cmd->add_option("--max-request-body-bytes", args->max_request_body_bytes, "Larger bodies get 413")
      ->capture_default_str();
  cmd->add_flag("--enforce-eager", e.enforce_eager, "GPU: decode without CUDA graphs");
  cmd->add_option("--kv-offloading-size", e.kv_offloading_size,
                  "GiB of host memory for the prefix cache's host tier (evicted KV blocks; 0 = off)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-dir", e.kv_cache_dir,
                  "Folder for the prefix cache's disk tier (kept across restarts; needs --kv-offloading-size)");
  cmd->add_option("--kv-cache-disk-gb", e.kv_cache_disk_gb, "GB the disk tier may use")->capture_default_str();
  cmd->add_option("--speculative-config", args->speculative_config,
                  "Speculative decoding as JSON (vLLM's form): ngram, lookahead (see the README)");
  // vLLM flags that change nothing here, accepted so vLLM command lines work unchanged: Peregrine never runs code
  // from a model folder, and logs neither each request nor periodic stats.
  cmd->add_flag("--trust-remote-code", args->ignored_flag, "Accepted for vLLM compatibility (no model code is ever run)");
  cmd->add_flag("--disable-log-requests", args->ignored_flag, "Accepted for vLLM compatibility (requests are not logged)");
  cmd->add_flag("--disable-log-stats", args->ignored_flag, "Accepted for vLLM compatibility (no periodic stats log)");
  cmd->add_flag("--enable-auto-tool-choice", args->enable_auto_tool_choice,
                "Parse the model's tool calls into tool_calls (needs --tool-call-parser)");
  cmd->add_option("--tool-call-parser", args->tool_call_parser, "Tool-call format: hermes, llama3_json or mistral");
  cmd->add_option("--threads", e.num_threads, "CPU backend threads (0 = all cores)");
  cmd->add_option("--io-threads", args->io_threads, "HTTP I/O threads")->capture_default_str();
  cmd->callback([args] { run_serve(*args); });
}

}  // namespace peregrine::cli
