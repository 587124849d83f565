// HttpServer: asynchronous HTTP/1.1 on Boost.Asio with Peregrine's own request parser (http_parser.h). It parses
// requests (byte limits in every parser state, timeouts), hands each one to a Handler together with a
// ResponseChannel, and writes what the handler sends: a whole response, or a Server-Sent-Events stream (chunked;
// close-delimited for HTTP/1.0). It keeps reading the socket while a response is pending, so a client that
// disconnects is noticed at once (the channel's on_close callback runs) and pipelined requests are kept, in
// order, for when the response is complete. Any framing error is answered and the connection closed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/http_parser.h"

namespace peregrine::server {

class Session;

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// The way back to one client for one request. Every method is thread-safe and returns at once (the bytes are
// queued on the connection's strand). Exactly one of send() or start_stream()...end_stream() should be used.
class ResponseChannel {
 public:
  explicit ResponseChannel(std::weak_ptr<Session> session) : session_(std::move(session)) {}

  void send(int status, std::string_view content_type, std::string body, const HeaderList& extra = {});
  void send_json(int status, std::string body, const HeaderList& extra = {}) {
    send(status, "application/json", std::move(body), extra);
  }
  // 200, text/event-stream: chunked for HTTP/1.1, close-delimited for HTTP/1.0.
  void start_stream(const HeaderList& extra = {});
  // One "data: <data>\n\n" event ("event: <event>\n" before it when named: the Responses API's events).
  void send_event(std::string_view data, std::string_view event = {});
  void end_stream();                       // "data: [DONE]" and the end of the response
  // Headers added to whatever response this channel sends (CORS); set before the response is sent.
  void set_default_headers(HeaderList headers);
  // fn runs once (on an I/O thread) when the client goes away before the response is complete; immediately
  // when that already happened.
  void on_close(std::function<void()> fn);
  bool is_closed() const { return closed_.load(); }

 private:
  friend class Session;
  void notify_closed();

  std::weak_ptr<Session> session_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::function<void()> on_close_;
  HeaderList default_headers_;  // guarded by mutex_
};

using Handler = std::function<void(HttpRequest&&, std::shared_ptr<ResponseChannel>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port
  size_t max_body_bytes = size_t{16} << 20;
  size_t max_header_bytes = size_t{64} << 10;
  int io_threads = 2;
  double request_timeout_s = 60.0;  // to receive a whole request from its first byte, and idle keep-alive
  double write_timeout_s = 120.0;   // for one write to drain into a slow client
  size_t max_connections = 4096;    // open connections; one more is answered 503 and closed
  // Host names (or IP literals) the Host header may name besides the bound address. On a loopback address the
  // Host header is always checked (DNS rebinding: a browser page of another site must not reach this server
  // through a name that resolves to 127.0.0.1); "localhost" and the bound address are allowed, and these.
  // On other addresses it is checked only when this list is given. "*" turns the check off.
  std::vector<std::string> allowed_hosts;
};

// Counts since start, for /metrics. A response is counted when it is queued, before its bytes leave, so a client
// that has its response always finds it counted.
struct HttpCounters {
  uint64_t requests = 0;  // requests parsed (and answered, or being answered)
  uint64_t responses_2xx = 0;
  uint64_t responses_4xx = 0;
  uint64_t responses_5xx = 0;
  uint64_t responses_503 = 0;    // of the 5xx: queue full, shutting down, too many connections
  uint64_t protocol_errors = 0;  // requests refused by the parser (the connection is closed after the answer)
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;  // over max_connections
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();

  // Binds and listens (throws Error(kUnavailable) naming the address when that fails) and starts the I/O threads.
  void start();
  int port() const { return bound_port_; }
  // Stops accepting; idle connections are closed, busy ones close once their response is complete, and
  // requests that arrive meanwhile are answered 503.
  void begin_shutdown();
  // Stops the I/O threads (pending responses are dropped) and joins them.
  void stop();
  size_t num_connections() const;
  // Requests whose response is not complete yet.
  size_t num_active_requests() const;
  // CPU time the I/O threads have used (parsing, handlers, JSON, writes): the HTTP share of the work.
  double io_cpu_seconds() const;
  HttpCounters counters() const;
  bool shutting_down() const { return shutting_down_.load(); }
  // The names the Host header is checked against (empty: not checked). Known after start().
  const std::vector<std::string>& checked_hosts() const;

 private:
  friend class Session;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int bound_port_ = 0;
  std::atomic<bool> shutting_down_{false};
};

// The host of an authority ("Example.COM:80" -> "example.com", "[::1]:8000" -> "[::1]"), lower-cased, without a
// trailing dot.
std::string authority_host(std::string_view authority);

}  // namespace peregrine::server
