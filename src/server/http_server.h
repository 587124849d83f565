// HttpServer: asynchronous HTTP/1.1 on Boost.Beast/Asio. It parses requests (with size limits and timeouts),
// hands each one to a Handler together with a ResponseChannel, and writes what the handler sends: a whole
// response, or a Server-Sent-Events stream (chunked). While a response is pending it keeps reading the socket,
// so a client that disconnects is noticed at once and the channel's on_close callback runs.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace peregrine::server {

class Session;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // target without the query string
  std::string query;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;  // peer address, for logs

  const std::string* header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? nullptr : &it->second;
  }
};

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
  void start_stream();                 // 200, text/event-stream, chunked
  void send_event(std::string_view data);  // one "data: <data>\n\n" event
  void end_stream();                   // "data: [DONE]" and the end of the response
  // fn runs once (on an I/O thread) when the client goes away before the response is complete; immediately
  // when that already happened.
  void on_close(std::function<void()> fn);
  bool is_closed() const { return closed_.load(); }

 private:
  friend class Session;
  void enqueue(std::string bytes, bool final);
  void notify_closed();

  std::weak_ptr<Session> session_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::function<void()> on_close_;
};

using Handler = std::function<void(HttpRequest&&, std::shared_ptr<ResponseChannel>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port
  size_t max_body_bytes = size_t{16} << 20;
  size_t max_header_bytes = size_t{64} << 10;
  int io_threads = 2;
  double request_timeout_s = 60.0;  // to receive a whole request once it started, and idle keep-alive
  double write_timeout_s = 120.0;   // for one write to drain into a slow client
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();

  // Binds and listens (throws Error(kUnavailable) naming the address when that fails) and starts the I/O threads.
  void start();
  int port() const { return bound_port_; }
  // Stops accepting; idle connections are closed, busy ones close once their response is complete.
  void begin_shutdown();
  // Stops the I/O threads (pending responses are dropped) and joins them.
  void stop();
  size_t num_connections() const;
  // CPU time the I/O threads have used (parsing, handlers, JSON, writes): the HTTP share of the work.
  double io_cpu_seconds() const;
  bool shutting_down() const { return shutting_down_.load(); }

 private:
  friend class Session;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int bound_port_ = 0;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace peregrine::server
