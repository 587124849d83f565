// ApiServer (include/peregrine/server.h): HttpServer + OpenAiServer wired together over an Engine.
#include <memory>

#include "peregrine/error.h"
#include "peregrine/server.h"
#include "server/http_server.h"
#include "server/openai_server.h"

namespace peregrine {
namespace {

class ApiServerImpl final : public ApiServer {
 public:
  ApiServerImpl(Engine& engine, const ServerConfig& c) {
    server::ServerOptions so;
    so.served_model_names = c.served_model_names;
    so.api_key = c.api_key;
    so.cors.allowed_origins = c.allowed_origins;
    if (!c.allowed_methods.empty()) so.cors.allowed_methods = c.allowed_methods;
    if (!c.allowed_headers.empty()) so.cors.allowed_headers = c.allowed_headers;
    so.cors.allow_credentials = c.allow_credentials;
    if (c.enable_auto_tool_choice) so.tool_parser = server::tool_parser_from_name(c.tool_call_parser);
    server::HttpServerOptions ho;
    ho.host = c.host;
    ho.port = c.port;
    ho.max_body_bytes = c.max_request_body_bytes;
    ho.io_threads = c.io_threads;
    ho.max_connections = c.max_connections;
    ho.allowed_hosts = c.allowed_hosts;
    http_ = std::make_unique<server::HttpServer>(
        ho, [this](server::HttpRequest&& r, std::shared_ptr<server::ResponseChannel> ch) {
          api_->handle(std::move(r), std::move(ch));
        });
    server::HttpServer& http = *http_;
    so.io_cpu_seconds = [&http] { return http.io_cpu_seconds(); };
    so.num_connections = [&http] { return http.num_connections(); };
    so.http_counters = [&http] { return http.counters(); };
    so.shutting_down = [&http] { return http.shutting_down(); };
    api_ = std::make_unique<server::OpenAiServer>(engine, so);
    http_->start();
  }
  ~ApiServerImpl() override { http_->stop(); }

  int port() const override { return http_->port(); }
  std::vector<std::string> checked_hosts() const override { return http_->checked_hosts(); }
  size_t num_connections() const override { return http_->num_connections(); }
  size_t num_active_requests() const override { return http_->num_active_requests(); }
  void begin_shutdown() override { http_->begin_shutdown(); }
  void stop() override { http_->stop(); }

 private:
  std::unique_ptr<server::OpenAiServer> api_;   // destroyed after the HTTP server stops calling it
  std::unique_ptr<server::HttpServer> http_;
};

}  // namespace

std::string tool_call_parser_names() { return server::tool_parser_names(); }
bool is_tool_call_parser(const std::string& name) { return server::tool_parser_from_name(name).has_value(); }

std::unique_ptr<ApiServer> ApiServer::start(Engine& engine, const ServerConfig& config) {
  if (!config.tool_call_parser.empty() && !is_tool_call_parser(config.tool_call_parser)) {
    throw Error(ErrorCode::kInvalidArgument, "--tool-call-parser: unknown parser '" + config.tool_call_parser +
                                                 "' (known: " + tool_call_parser_names() + ")");
  }
  if (config.enable_auto_tool_choice && config.tool_call_parser.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "--enable-auto-tool-choice needs --tool-call-parser (" + tool_call_parser_names() + ")");
  }
  return std::make_unique<ApiServerImpl>(engine, config);
}

}  // namespace peregrine
