// OpenAiServer: the OpenAI/vLLM-compatible HTTP API over a peregrine::Engine: routing, API-key checks, error
// bodies, and the endpoints (/v1/completions, /v1/chat/completions, /v1/models, /tokenize, /detokenize,
// /health, /version, /metrics). The HTTP transport is HttpServer; the engine is reached only through its
// public API.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "peregrine/engine.h"
#include "server/http_server.h"
#include "server/request_parsing.h"
#include "server/tool_calls.h"

namespace peregrine::server {

// Cross-origin access for browsers (vLLM's --allowed-origins, --allowed-methods, --allowed-headers,
// --allow-credentials). Off by default: no origin may read responses, and preflights are refused.
struct CorsOptions {
  std::vector<std::string> allowed_origins;          // exact origins ("https://app.example"), or "*"
  std::vector<std::string> allowed_methods = {"*"};  // for preflights
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;
};

struct ServerOptions {
  std::vector<std::string> served_model_names;  // the first is reported; any is accepted as `model`
  std::string api_key;                          // empty = no authentication (checked in constant time)
  CorsOptions cors;
  int max_prompts_per_request = 1024;
  // --enable-auto-tool-choice with --tool-call-parser: chat requests with tools get their calls parsed.
  std::optional<ToolParserKind> tool_parser;
  // For /metrics: CPU seconds of the HTTP I/O threads, the open connections and the HTTP counters (optional).
  std::function<double()> io_cpu_seconds;
  std::function<size_t()> num_connections;
  std::function<HttpCounters()> http_counters;
  // True once the server is shutting down (new generation requests get 503; /health answers 503).
  std::function<bool()> shutting_down;
};

struct ResponseStore;  // stored /v1/responses results (api_responses.cpp)
std::shared_ptr<ResponseStore> make_response_store();

class OpenAiServer {
 public:
  OpenAiServer(Engine& engine, ServerOptions options);

  // The HttpServer handler.
  void handle(HttpRequest&& request, std::shared_ptr<ResponseChannel> channel);
  // Prometheus text for /metrics.
  std::string metrics_text() const;

 private:
  void route(HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel);
  // CORS: the headers for a request from an allowed Origin (none otherwise); answers preflights. Returns true
  // when the request was a preflight (answered).
  bool handle_cors(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel);
  bool origin_allowed(const std::string& origin) const;
  void handle_completions(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel);
  void handle_chat(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel);
  void handle_tokenize(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel);
  void handle_detokenize(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel);
  void handle_models(const std::shared_ptr<ResponseChannel>& channel);
  void handle_model(const std::string& id, const std::shared_ptr<ResponseChannel>& channel);
  void handle_responses(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel);
  void handle_response_get(const std::string& id, const std::shared_ptr<ResponseChannel>& channel);
  Json model_card(const std::string& name) const;
  // Renders a chat request's messages with the chat template (400 naming the field on bad messages).
  std::string render_messages(const Fields& fields, bool default_add_generation_prompt) const;
  std::string new_id(const char* prefix);

  Engine& engine_;
  ServerOptions options_;
  int64_t start_time_ = 0;
  std::atomic<uint64_t> id_counter_{0};
  uint64_t id_salt_ = 0;
  std::shared_ptr<ResponseStore> response_store_;
};

// True when `authorization` is "Bearer <key>" (the scheme in any case), compared in time that does not depend on
// where the key differs.
bool api_key_matches(const std::string* authorization, const std::string& key);

}  // namespace peregrine::server
