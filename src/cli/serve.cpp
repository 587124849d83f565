// `peregrine serve <model_dir>`: the OpenAI/vLLM-compatible HTTP server. Flags carry vLLM's names; the startup
// log says what was loaded, the KV capacity and the URL. SIGINT/SIGTERM: stop accepting, end in-flight requests
// with a final event, exit 0 (a second signal exits at once).
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "cli/commands.h"
#include "peregrine/error.h"
#include "peregrine/engine.h"
#include "server/http_server.h"
#include "server/openai_server.h"

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
  double shutdown_grace_s = 10.0;
  bool enable_auto_tool_choice = false;
  bool ignored_flag = false;
  std::string tool_call_parser;
};

// Many concurrent connections need file descriptors: raise the soft limit to the hard one.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
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
  std::optional<server::ToolParserKind> tool_parser;
  if (!a.tool_call_parser.empty()) {
    tool_parser = server::tool_parser_from_name(a.tool_call_parser);
    if (!tool_parser) {
      throw Error(ErrorCode::kInvalidArgument, "--tool-call-parser: unknown parser '" + a.tool_call_parser +
                                                   "' (known: " + server::tool_parser_names() + ")");
    }
  }
  if (a.enable_auto_tool_choice && !tool_parser) {
    throw Error(ErrorCode::kInvalidArgument, "--enable-auto-tool-choice needs --tool-call-parser (" +
                                                 server::tool_parser_names() + ")");
  }
  // Signals are taken by sigwait() on this thread only; every thread started below inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();

  std::cerr << "peregrine serve: loading " << a.engine.model << " ..." << std::endl;
  std::unique_ptr<Engine> engine = Engine::create(a.engine);
  const ModelInfo& info = engine->info();
  server::ServerOptions so;
  so.served_model_names = a.served_model_names.empty() ? std::vector<std::string>{a.engine.model} : a.served_model_names;
  so.api_key = a.api_key;
  if (a.enable_auto_tool_choice) so.tool_parser = tool_parser;
  server::HttpServerOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.max_body_bytes = a.max_request_body_bytes;
  ho.io_threads = a.io_threads;
  std::unique_ptr<server::OpenAiServer> api;
  server::HttpServer http(ho, [&api](server::HttpRequest&& r, std::shared_ptr<server::ResponseChannel> c) {
    api->handle(std::move(r), std::move(c));
  });
  so.io_cpu_seconds = [&http] { return http.io_cpu_seconds(); };
  so.num_connections = [&http] { return http.num_connections(); };
  api = std::make_unique<server::OpenAiServer>(*engine, so);
  http.start();

  std::cerr << "peregrine serve: loaded " << info.architecture << " from " << info.model_path << " ("
            << mib(info.weight_bytes) << " of weights, " << info.dtype << " on " << info.backend << ") in "
            << info.load_seconds << " s\n"
            << "peregrine serve: KV cache " << info.num_kv_blocks << " blocks x " << info.block_size << " = "
            << info.kv_capacity_tokens << " tokens (" << mib(info.kv_cache_bytes) << "), max_model_len "
            << info.max_model_len << ", prefix caching " << (a.engine.enable_prefix_caching ? "on" : "off")
            << (info.has_chat_template ? ", chat template loaded" : ", no chat template")
            << (so.tool_parser ? ", tool calls parsed (" + a.tool_call_parser + ")" : std::string()) << "\n"
            << "peregrine serve: serving " << so.served_model_names.front() << " on http://" << a.host << ":"
            << http.port() << " (Ctrl-C to stop)" << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << "peregrine serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
            << ": no longer accepting; ending in-flight requests" << std::endl;
  http.begin_shutdown();
  engine->shutdown();  // every live request gets its final delta (finish_reason abort)
  // Let streams flush their final events and [DONE], then stop; a second signal stops at once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.shutdown_grace_s);
  timespec tick{0, 20 * 1000 * 1000};
  while (http.num_connections() > 0 && std::chrono::steady_clock::now() < deadline) {
    if (sigtimedwait(&signals, nullptr, &tick) > 0) break;
  }
  http.stop();
  std::cerr << "peregrine serve: stopped" << std::endl;
}

}  // namespace

void register_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI/vLLM-compatible HTTP server");
  EngineConfig& e = args->engine;
  cmd->add_option("model", e.model, "Hugging Face model folder")->required();
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on (0 = any free port)")->capture_default_str();
  cmd->add_option("--served-model-name", args->served_model_names, "Model name(s) the API reports and accepts");
  cmd->add_option("--api-key", args->api_key, "Require 'Authorization: Bearer <key>' on /v1 routes");
  cmd->add_option("--tokenizer", e.tokenizer, "Folder with tokenizer.json (default: the model folder)");
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
