// OpenAiServer: routing, authentication, error mapping and the small endpoints (models, tokenize, detokenize,
// health, version, metrics). The generation endpoints are in api_generation.cpp, metrics in metrics.cpp.
#include "server/openai_server.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "peregrine/error.h"
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
  response_store_ = make_response_store();
}

std::string OpenAiServer::new_id(const char* prefix) {
  const uint64_t n = id_counter_.fetch_add(1);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(splitmix(id_salt_ ^ n)),
                static_cast<unsigned long long>(splitmix(id_salt_ + 2 * n + 1)));
  return std::string(prefix) + buf;
}

bool api_key_matches(const std::string* authorization, const std::string& key) {
  if (authorization == nullptr) return false;
  std::string_view v = *authorization;
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  const size_t sp = v.find(' ');
  if (sp == std::string_view::npos || !iequals(v.substr(0, sp), "bearer")) return false;
  std::string_view token = v.substr(sp + 1);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  // Every byte of the presented token is compared (against the key, cycled), so the time depends only on the
  // token's length, never on how much of the key it got right.
  volatile unsigned diff = token.size() == key.size() ? 0u : 1u;
  if (key.empty()) return false;
  for (size_t i = 0; i < token.size(); ++i) {
    diff = diff | (static_cast<unsigned char>(token[i]) ^ static_cast<unsigned char>(key[i % key.size()]));
  }
  return diff == 0u;
}

namespace {

// The media type of a Content-Type value, lower-cased, without parameters.
std::string media_type(const std::string* content_type) {
  if (!content_type) return {};
  std::string_view v = *content_type;
  v = v.substr(0, v.find(';'));
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  std::string out(v);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

bool contains_star(const std::vector<std::string>& items) {
  return std::find(items.begin(), items.end(), "*") != items.end();
}

}  // namespace

void OpenAiServer::handle(HttpRequest&& request, std::shared_ptr<ResponseChannel> channel) {
  auto fail = [&](int status, const std::string& message, const std::optional<std::string>& param) {
    HeaderList extra;
    if (status == 503) extra.emplace_back("Retry-After", "1");
    if (status == 401) extra.emplace_back("WWW-Authenticate", "Bearer");
    channel->send_json(status, error_body(status, message, param), extra);
  };
  try {
    route(request, channel);
  } catch (const HttpError& e) {
    fail(e.status(), e.message(), e.param());
  } catch (const Error& e) {
    fail(http_status_for(e.code()), e.message(), e.field().empty() ? std::nullopt : std::optional<std::string>(e.field()));
  } catch (const nlohmann::json::exception& e) {
    fail(400, std::string("invalid request: ") + e.what(), std::nullopt);
  } catch (const std::exception& e) {
    fail(500, std::string("internal error: ") + e.what(), std::nullopt);
  }
}

bool OpenAiServer::origin_allowed(const std::string& origin) const {
  for (const std::string& o : options_.cors.allowed_origins) {
    if (o == "*" || o == origin) return true;
  }
  return false;
}

bool OpenAiServer::handle_cors(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel) {
  const std::string* origin = request.header("origin");
  const CorsOptions& cors = options_.cors;
  const bool preflight = request.method == "OPTIONS" && origin && request.header("access-control-request-method");
  if (!origin || !origin_allowed(*origin)) {
    if (preflight) {
      throw HttpError(403, origin && !cors.allowed_origins.empty()
                               ? "cross-origin request from " + quote_input(*origin) + " is not allowed (--allowed-origins)"
                               : "cross-origin requests are not allowed (start the server with --allowed-origins)");
    }
    return false;
  }
  // Credentials forbid the "*" wildcard in the response: the origin is echoed instead.
  const bool wildcard = contains_star(cors.allowed_origins) && !cors.allow_credentials;
  HeaderList headers;
  headers.emplace_back("Access-Control-Allow-Origin", wildcard ? "*" : *origin);
  if (!wildcard) headers.emplace_back("Vary", "Origin");
  if (cors.allow_credentials) headers.emplace_back("Access-Control-Allow-Credentials", "true");
  if (!preflight) {
    channel->set_default_headers(std::move(headers));
    return false;
  }
  const std::string& method = *request.header("access-control-request-method");
  if (!contains_star(cors.allowed_methods) &&
      std::find(cors.allowed_methods.begin(), cors.allowed_methods.end(), method) == cors.allowed_methods.end()) {
    throw HttpError(403, "cross-origin method " + quote_input(method) + " is not allowed (--allowed-methods)");
  }
  headers.emplace_back("Access-Control-Allow-Methods",
                       contains_star(cors.allowed_methods) ? "GET, POST, OPTIONS" : join(cors.allowed_methods));
  if (const std::string* asked = request.header("access-control-request-headers")) {
    headers.emplace_back("Access-Control-Allow-Headers",
                         contains_star(cors.allowed_headers) ? *asked : join(cors.allowed_headers));
  } else if (!contains_star(cors.allowed_headers)) {
    headers.emplace_back("Access-Control-Allow-Headers", join(cors.allowed_headers));
  }
  headers.emplace_back("Access-Control-Max-Age", "600");
  channel->send(204, "text/plain", "", headers);
  return true;
}

void OpenAiServer::route(HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel) {
  const std::string& path = request.path;
  const std::string& method = request.method;
  if (handle_cors(request, channel)) return;
  // The API key guards the OpenAI routes, as in vLLM (health and metrics stay open for probes). Only the
  // Authorization header carries it (never the query string or a cookie).
  if (!options_.api_key.empty() && starts_with(path, "/v1")) {
    const std::string* auth = request.header("authorization");
    if (!api_key_matches(auth, options_.api_key)) {
      throw HttpError(401, auth == nullptr ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key");
    }
  }
  if (path == "*") {  // OPTIONS * (RFC 9110 9.3.7): what the server supports in general
    return channel->send(204, "text/plain", "", {{"Allow", "GET, HEAD, POST, OPTIONS"}});
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
      {"/v1/responses", "POST", 8},
  };
  for (const Route& r : routes) {
    if (path != r.path) continue;
    const bool get_route = std::string_view(r.method) == "GET";
    if (method == "OPTIONS") {
      return channel->send(204, "text/plain", "", {{"Allow", get_route ? "GET, HEAD, OPTIONS" : "POST, OPTIONS"}});
    }
    if (method != r.method && !(method == "HEAD" && get_route)) {
      throw HttpError(405, "method " + quote_input(method) + " is not allowed on " + path + " (use " + r.method + ")");
    }
    if (!get_route) {
      // JSON only: a browser can send text/plain or form bodies across origins without asking (no preflight),
      // so anything else is refused before it can start work.
      const std::string type = media_type(request.header("content-type"));
      if (type != "application/json") {
        throw HttpError(415, type.empty() ? "the request needs 'Content-Type: application/json'"
                                          : "Content-Type must be application/json, got " + quote_input(type));
      }
    }
    switch (r.id) {
      case 0: return handle_completions(request, channel);
      case 1: return handle_chat(request, channel);
      case 2: return handle_models(channel);
      case 3: return handle_tokenize(request, channel);
      case 4: return handle_detokenize(request, channel);
      case 5:
        if (options_.shutting_down && options_.shutting_down()) {
          throw HttpError(503, "the server is shutting down");
        }
        return channel->send(200, "text/plain", "");
      case 6: return channel->send_json(200, Json{{"version", kVersion}}.dump());
      case 7: return channel->send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_text());
      case 8: return handle_responses(request, channel);
    }
  }
  // Routes with an id: GET /v1/models/{id}, GET /v1/responses/{id}.
  for (const char* prefix : {"/v1/models/", "/v1/responses/"}) {
    if (!starts_with(path, prefix) || path.size() == std::strlen(prefix)) continue;
    if (method == "OPTIONS") return channel->send(204, "text/plain", "", {{"Allow", "GET, HEAD, OPTIONS"}});
    if (method != "GET" && method != "HEAD") {
      throw HttpError(405, "method " + quote_input(method) + " is not allowed on " + quote_input(path) + " (use GET)");
    }
    const std::string id = path.substr(std::strlen(prefix));
    if (std::string_view(prefix) == "/v1/models/") return handle_model(id, channel);
    return handle_response_get(id, channel);
  }
  throw HttpError(404, "no route for " + quote_input(method) + " " + quote_input(path));
}

Json OpenAiServer::model_card(const std::string& name) const {
  const ModelInfo& info = engine_.info();
  Json m;
  m["id"] = name;
  m["object"] = "model";
  m["created"] = start_time_;
  m["owned_by"] = "peregrine";
  m["root"] = info.model_path;
  m["parent"] = nullptr;
  m["max_model_len"] = info.max_model_len;
  return m;
}

void OpenAiServer::handle_models(const std::shared_ptr<ResponseChannel>& channel) {
  Json data = Json::array();
  for (const std::string& name : options_.served_model_names) data.push_back(model_card(name));
  channel->send_json(200, Json{{"object", "list"}, {"data", std::move(data)}}.dump());
}

void OpenAiServer::handle_model(const std::string& id, const std::shared_ptr<ResponseChannel>& channel) {
  // The id may hold a '/' (an organisation/name model), as clients send it unescaped or %2F-escaped.
  std::string name;
  for (size_t i = 0; i < id.size(); ++i) {
    if (id[i] == '%' && i + 2 < id.size() && std::isxdigit(static_cast<unsigned char>(id[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(id[i + 2]))) {
      name += static_cast<char>(std::stoi(id.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      name += id[i];
    }
  }
  for (const std::string& served : options_.served_model_names) {
    if (served == name) return channel->send_json(200, model_card(served).dump());
  }
  throw HttpError(404, "The model `" + quote_input(name) + "` does not exist.", std::string("model"));
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
