// The OpenAI/vLLM-compatible HTTP server over an Engine, as `peregrine serve` runs it: what the CLI (and any
// application embedding Peregrine) needs to start, observe and stop it. Routes, flags and behaviour:
// docs/architecture/engine.md ("Server").
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "peregrine/engine.h"

namespace peregrine {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                               // 0 = any free port
  std::vector<std::string> served_model_names;   // the first is reported; any is accepted as `model`
  std::string api_key;                           // empty = no authentication on /v1 routes
  size_t max_request_body_bytes = size_t{16} << 20;
  int io_threads = 2;
  size_t max_connections = 4096;                 // more get 503
  // Browsers: CORS is off unless origins are given ("*" = any); methods/headers empty = all.
  std::vector<std::string> allowed_origins, allowed_methods, allowed_headers;
  bool allow_credentials = false;
  // Names the Host header may carry besides localhost and the bound address ("*" turns the check off).
  std::vector<std::string> allowed_hosts;
  // Tool calls parsed into tool_calls (vLLM's --enable-auto-tool-choice --tool-call-parser NAME).
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
};

// "hermes, llama3_json, mistral" and whether a name is one of them.
std::string tool_call_parser_names();
bool is_tool_call_parser(const std::string& name);

class ApiServer {
 public:
  // Binds and starts serving `engine`, which must outlive the server. Throws Error naming the option at fault
  // (unknown tool-call parser, address in use).
  static std::unique_ptr<ApiServer> start(Engine& engine, const ServerConfig& config);
  virtual ~ApiServer() = default;

  virtual int port() const = 0;
  // The names the Host header is checked against (empty: not checked).
  virtual std::vector<std::string> checked_hosts() const = 0;
  virtual size_t num_connections() const = 0;
  virtual size_t num_active_requests() const = 0;
  // Stops accepting connections and requests; in-flight ones continue.
  virtual void begin_shutdown() = 0;
  // Stops the I/O threads (pending responses are dropped) and joins them.
  virtual void stop() = 0;
};

}  // namespace peregrine
