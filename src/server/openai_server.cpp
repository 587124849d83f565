// OpenAiServer: routing, authentication, error mapping and the small endpoints (models, tokenize, detokenize,
// health, version, metrics). The generation endpoints are in api_generation.cpp, metrics in metrics.cpp.
#include "server/openai_server.h"

#include <chrono>
#include <random>

#include "core/status.h"
#include "server/errors.h"

namespace peregrine::server {
namespace {

constexpr const char* kVersion = "0.1.0";

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

OpenAiServer::OpenAiServer(Engine& engine, ServerOptions options) : engine_(engine), options_(std::move(options)) {
  if (options_.served_model_names.empty()) options_.served_model_names.push_back(engine.info().model_path);
  start_time_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::string OpenAiServer::new_id(const char* prefix) {
  const uint64_t n = id_counter_.fetch_add(1);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(splitmix(id_salt_ ^ n)),
                static_cast<unsigned long long>(splitmix(id_salt_ + 2 * n + 1)));
  return std::string(prefix) + buf;
}

void OpenAiServer::handle(HttpRequest&& request, std::shared_ptr<ResponseChannel> channel) {
  ++http_requests_;
  auto fail = [&](int status, const std::string& message, const std::optional<std::string>& param) {
    if (status >= 500) ++http_errors_5xx_;
    else ++http_errors_4xx_;
    HeaderList extra;
    if (status == 503) {
      ++http_rejected_503_;
      extra.emplace_back("Retry-After", "1");
    }
    if (status == 401) extra.emplace_back("WWW-Authenticate", "Bearer");
    channel->send_json(status, error_body(status, message, param), extra);
  };
  try {
    route(request, channel);
  } catch (const HttpError& e) {
    fail(e.status(), e.message(), e.param());
  } catch (const Error& e) {
    fail(http_status_for(e.code()), e.message(), std::nullopt);
  } catch (const nlohmann::json::exception& e) {
    fail(400, std::string("invalid request: ") + e.what(), std::nullopt);
  } catch (const std::exception& e) {
    fail(500, std::string("internal error: ") + e.what(), std::nullopt);
  }
}

void OpenAiServer::route(HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel) {
  const std::string& path = request.path;
  const std::string& method = request.method;
  // The API key guards the OpenAI routes, as in vLLM (health and metrics stay open for probes).
  if (!options_.api_key.empty() && starts_with(path, "/v1")) {
    const std::string* auth = request.header("authorization");
    if (auth == nullptr || *auth != "Bearer " + options_.api_key) {
      throw HttpError(401, auth == nullptr ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key");
    }
  }
  struct Route {
    const char* path;
    const char* method;
    int id;
  };
  static const Route routes[] = {
      {"/v1/completions", "POST", 0}, {"/v1/chat/completions", "POST", 1}, {"/v1/models", "GET", 2},
      {"/tokenize", "POST", 3},       {"/detokenize", "POST", 4},          {"/health", "GET", 5},
      {"/version", "GET", 6},         {"/metrics", "GET", 7},              {"/ping", "GET", 5},
  };
  for (const Route& r : routes) {
    if (path != r.path) continue;
    if (method != r.method && !(method == "HEAD" && std::string(r.method) == "GET")) {
      throw HttpError(405, "method " + method + " is not allowed on " + path + " (use " + r.method + ")");
    }
    switch (r.id) {
      case 0: return handle_completions(request, channel);
      case 1: return handle_chat(request, channel);
      case 2: return handle_models(channel);
      case 3: return handle_tokenize(request, channel);
      case 4: return handle_detokenize(request, channel);
      case 5: return channel->send(200, "text/plain", "");
      case 6: return channel->send_json(200, Json{{"version", kVersion}}.dump());
      case 7: return channel->send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_text());
    }
  }
  throw HttpError(404, "no route for " + method + " " + path);
}

void OpenAiServer::handle_models(const std::shared_ptr<ResponseChannel>& channel) {
  const ModelInfo& info = engine_.info();
  Json data = Json::array();
  for (const std::string& name : options_.served_model_names) {
    Json m;
    m["id"] = name;
    m["object"] = "model";
    m["created"] = start_time_;
    m["owned_by"] = "peregrine";
    m["root"] = info.model_path;
    m["parent"] = nullptr;
    m["max_model_len"] = info.max_model_len;
    data.push_back(std::move(m));
  }
  channel->send_json(200, Json{{"object", "list"}, {"data", std::move(data)}}.dump());
}

void OpenAiServer::handle_tokenize(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel) {
  const Json body = parse_json_body(request);
  Fields f(body);
  check_model(f, options_.served_model_names);
  std::vector<int32_t> ids;
  if (f.get("messages")) {
    const std::string prompt = render_messages(f, true);
    ids = engine_.tokenize(prompt, f.boolean("add_special_tokens").value_or(false));
  } else {
    const auto prompt = f.string("prompt");
    if (!prompt) throw_bad_field("prompt", "a prompt string (or messages) is required");
    ids = engine_.tokenize(*prompt, f.boolean("add_special_tokens").value_or(true));
  }
  Json out;
  out["count"] = ids.size();
  out["max_model_len"] = engine_.info().max_model_len;
  out["tokens"] = ids;
  if (f.boolean("return_token_strs").value_or(false)) {
    Json strs = Json::array();
    for (int32_t id : ids) strs.push_back(engine_.token_text(id));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  channel->send_json(200, out.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void OpenAiServer::handle_detokenize(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel) {
  const Json body = parse_json_body(request);
  Fields f(body);
  check_model(f, options_.served_model_names);
  if (!f.get("tokens")) throw_bad_field("tokens", "a list of token ids is required");
  const std::vector<int32_t> ids = f.int_list("tokens", size_t{1} << 20);
  const int vocab = engine_.info().vocab_size;
  for (int32_t id : ids) {
    if (id >= vocab) throw_bad_field("tokens", "token id " + std::to_string(id) + " is out of the vocabulary");
  }
  const std::string text = engine_.detokenize(ids, f.boolean("skip_special_tokens").value_or(true));
  channel->send_json(200, Json{{"prompt", text}}.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace peregrine::server
