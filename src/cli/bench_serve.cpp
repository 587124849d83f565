// `peregrine bench serve`: load against a running OpenAI-compatible server (ours or vLLM), like vLLM's
// benchmark_serving: Poisson arrivals at --request-rate, streaming /v1/completions, prompts synthetic (random
// token ids) or from a dataset (../shared/data/code-dev.json); reports throughput and TTFT/TPOT/ITL/E2E
// percentiles, and the server's engine step split when it exposes Peregrine's /metrics.
#include <utility>  // NOTE: before Asio (Boost 1.74 uses std::exchange without including it)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/files.h"
#include "cli/serving_bench.h"
#include "cli/serving_bench_stats.h"
#include "peregrine/error.h"

namespace peregrine::cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct ServeBenchArgs {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model;  // served name; default: the first of /v1/models
  std::string api_key;
  int num_prompts = 200;
  double request_rate = 0.0;  // requests/s; 0 = all at once
  int max_concurrency = 0;    // 0 = unbounded
  int input_len = 256;
  int output_len = 128;
  int vocab_size = 32000;
  std::string dataset;
  std::string extra_body;  // JSON object merged into every request (e.g. a structured-output constraint)
  uint64_t seed = 0;
};

// One streamed request: connect, POST, read chunked SSE, note when each content event arrives.
class Client : public std::enable_shared_from_this<Client> {
 public:
  Client(net::io_context& ioc, const tcp::endpoint& ep, std::string target_host, std::string body,
         std::string api_key, RequestResult& result, std::function<void()> on_done)
      : stream_(ioc), ep_(ep), host_(std::move(target_host)), body_(std::move(body)), key_(std::move(api_key)),
        result_(result), on_done_(std::move(on_done)) {}

  void start() {
    result_.start = Clock::now();
    stream_.async_connect(ep_, [self = shared_from_this()](beast::error_code ec) { self->on_connect(ec); });
  }

 private:
  void on_connect(beast::error_code ec) {
    if (ec) return fail("connect: " + ec.message());
    req_ = {http::verb::post, "/v1/completions", 11};
    req_.set(http::field::host, host_);
    req_.set(http::field::content_type, "application/json");
    if (!key_.empty()) req_.set(http::field::authorization, "Bearer " + key_);
    req_.body() = body_;
    req_.prepare_payload();
    http::async_write(stream_, req_, [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->fail("write: " + e.message());
      self->read_header();
    });
  }

  void read_header() {
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    chunk_cb_ = [this](std::uint64_t, beast::string_view data, beast::error_code&) {
      on_data(std::string_view(data.data(), data.size()));
      return data.size();
    };
    parser_.on_chunk_body(chunk_cb_);
    http::async_read_header(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->fail("read: " + e.message());
      if (self->parser_.get().result_int() != 200) self->status_error_ = true;
      self->read_more();
    });
  }

  void read_more() {
    if (parser_.is_done()) return finish();
    http::async_read_some(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code e, size_t) {
      if (e == http::error::end_of_stream || (!e && self->parser_.is_done())) return self->finish();
      if (e) return self->fail("read: " + e.message());
      self->read_more();
    });
  }

  void on_data(std::string_view data) {
    pending_.append(data);
    size_t pos;
    while ((pos = pending_.find("\n\n")) != std::string::npos) {
      const std::string event = pending_.substr(0, pos);
      pending_.erase(0, pos + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        result_.done_marker = true;
        continue;
      }
      json j = json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        result_.error = j["error"].value("message", std::string("error event"));
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        result_.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        result_.output_tokens = j["usage"].value("completion_tokens", 0);
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        const auto& c = j["choices"][0];
        if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) {
          result_.token_times.push_back(Clock::now());
        }
      }
    }
  }

  void finish() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    result_.end = Clock::now();
    if (status_error_) result_.error = "HTTP " + std::to_string(parser_.get().result_int()) + ": " + pending_;
    else if (!result_.done_marker && result_.error.empty()) result_.error = "stream ended without [DONE]";
    result_.ok = result_.error.empty();
    on_done_();
  }

  void fail(const std::string& message) {
    result_.end = Clock::now();
    result_.error = message;
    result_.ok = false;
    on_done_();
  }

  beast::tcp_stream stream_;
  tcp::endpoint ep_;
  std::string host_;
  std::string body_;
  std::string key_;
  RequestResult& result_;
  std::function<void()> on_done_;
  http::request<http::string_body> req_;
  beast::flat_buffer buffer_;
  http::response_parser<http::empty_body> parser_;
  std::function<std::size_t(std::uint64_t, beast::string_view, beast::error_code&)> chunk_cb_;
  std::string pending_;
  bool status_error_ = false;
};

// A plain GET returning the body ("" on failure).
std::string http_get(const std::string& host, int port, const std::string& target, const std::string& key) {
  try {
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.connect(resolver.resolve(host, std::to_string(port)));
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, host);
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    http::write(stream, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(stream, buf, res);
    return res.result_int() == 200 ? res.body() : std::string();
  } catch (const std::exception&) {
    return "";
  }
}

std::vector<json> make_prompts(const ServeBenchArgs& a, std::mt19937_64& rng) {
  std::vector<json> prompts;
  if (!a.dataset.empty()) {
    json data = json::parse(read_file(a.dataset, "--dataset"), nullptr, false);
    if (data.is_discarded() || !data.is_array() || data.empty()) {
      throw Error(ErrorCode::kFormatError, a.dataset + ": expected a JSON list of {\"text\": ...}");
    }
    // Code is about 3 characters per token: cut each text to roughly --input-len tokens.
    const size_t max_chars = static_cast<size_t>(a.input_len) * 3;
    for (int i = 0; i < a.num_prompts; ++i) {
      const json& item = data[static_cast<size_t>(i) % data.size()];
      std::string text = item.is_object() ? item.value("text", std::string()) : std::string();
      if (text.size() > max_chars) text.resize(max_chars);
      while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
      if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
      prompts.emplace_back(text);
    }
    return prompts;
  }
  std::uniform_int_distribution<int> pick(100, std::max(101, a.vocab_size - 1));
  for (int i = 0; i < a.num_prompts; ++i) {
    json ids = json::array();
    for (int k = 0; k < a.input_len; ++k) ids.push_back(pick(rng));
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

void run_serve_bench(const ServeBenchArgs& a) {
  if (a.num_prompts <= 0 || a.input_len <= 0 || a.output_len <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "--num-prompts, --input-len and --output-len must be positive");
  }
  std::string model = a.model;
  if (model.empty()) {
    json models = json::parse(http_get(a.host, a.port, "/v1/models", a.api_key), nullptr, false);
    if (models.is_discarded() || !models.contains("data") || models["data"].empty()) {
      throw Error(ErrorCode::kUnavailable, "no server answering /v1/models at " + a.host + ":" + std::to_string(a.port));
    }
    model = models["data"][0].value("id", std::string());
  }
  std::mt19937_64 rng(a.seed);
  const std::vector<json> prompts = make_prompts(a, rng);
  const std::string metrics_before = http_get(a.host, a.port, "/metrics", a.api_key);

  net::io_context ioc;
  tcp::resolver resolver(ioc);
  const tcp::endpoint ep = *resolver.resolve(a.host, std::to_string(a.port)).begin();
  std::vector<RequestResult> results(prompts.size());
  std::deque<size_t> ready;  // arrived, waiting for a concurrency slot
  int in_flight = 0;
  size_t next = 0;
  std::exponential_distribution<double> gap(a.request_rate > 0 ? a.request_rate : 1.0);
  net::steady_timer arrivals(ioc);
  const auto bench_start = Clock::now();
  std::function<void()> launch_ready = [&] {
    while (!ready.empty() && (a.max_concurrency <= 0 || in_flight < a.max_concurrency)) {
      const size_t i = ready.front();
      ready.pop_front();
      json body = {{"model", model},     {"prompt", prompts[i]}, {"max_tokens", a.output_len},
                   {"temperature", 0.0}, {"ignore_eos", true},   {"stream", true},
                   {"stream_options", {{"include_usage", true}}}};
      if (!a.extra_body.empty()) body.update(json::parse(a.extra_body));
      ++in_flight;
      std::make_shared<Client>(ioc, ep, a.host, body.dump(), a.api_key, results[i], [&] {
        --in_flight;
        launch_ready();
      })->start();
    }
  };
  std::function<void()> arrive = [&] {
    ready.push_back(next++);
    launch_ready();
    if (next >= prompts.size()) return;
    if (a.request_rate <= 0) return arrive();
    arrivals.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng))));
    arrivals.async_wait([&](beast::error_code ec) {
      if (!ec) arrive();
    });
  };
  arrive();
  ioc.run();
  const double duration = std::chrono::duration<double>(Clock::now() - bench_start).count();
  const std::string metrics_after = http_get(a.host, a.port, "/metrics", a.api_key);

  std::printf("server    %s:%d, model %s\n", a.host.c_str(), a.port, model.c_str());
  std::printf("workload  %d requests, %s prompts (%d tokens), %d output tokens, rate %s, max concurrency %s\n",
              a.num_prompts, a.dataset.empty() ? "random-id" : a.dataset.c_str(), a.input_len, a.output_len,
              a.request_rate > 0 ? std::to_string(a.request_rate).c_str() : "inf",
              a.max_concurrency > 0 ? std::to_string(a.max_concurrency).c_str() : "unbounded");
  print_serving_report(results, duration);
  print_step_split(metrics_before, metrics_after);
}

}  // namespace

void register_bench_serve(CLI::App& bench) {
  auto args = std::make_shared<ServeBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("serve", "Poisson-arrival load against a running server (TTFT/TPOT/ITL)");
  cmd->add_option("--host", args->host, "Server address")->capture_default_str();
  cmd->add_option("--port", args->port, "Server port")->capture_default_str();
  cmd->add_option("--model", args->model, "Model name to request (default: the server's first)");
  cmd->add_option("--api-key", args->api_key, "Bearer key, when the server wants one");
  cmd->add_option("--num-prompts", args->num_prompts, "Requests to send")->capture_default_str();
  cmd->add_option("--request-rate", args->request_rate, "Poisson arrival rate (requests/s); 0 = all at once")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", args->max_concurrency, "Requests in flight at most (0 = unbounded)");
  cmd->add_option("--input-len", args->input_len, "Prompt tokens (random prompts; approximate for a dataset)")
      ->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "Output tokens per request (ignore_eos)")->capture_default_str();
  cmd->add_option("--vocab-size", args->vocab_size, "Random prompt ids are drawn below this")->capture_default_str();
  cmd->add_option("--dataset", args->dataset, "JSON list of {\"text\": ...} prompts (e.g. ../shared/data/code-dev.json)");
  cmd->add_option("--seed", args->seed, "Seed for prompts and arrivals")->capture_default_str();
  cmd->add_option("--extra-body", args->extra_body,
                  "JSON object merged into every request, e.g. '{\"guided_regex\": \"[a-z ]+\"}'")
      ->check([](const std::string& v) {
        const json j = json::parse(v, nullptr, false);
        return j.is_object() ? std::string() : std::string("--extra-body must be a JSON object");
      });
  cmd->callback([args] { run_serve_bench(*args); });
}

}  // namespace peregrine::cli
