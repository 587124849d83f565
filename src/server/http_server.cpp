// HttpServer and its per-connection Session (see http_server.h). Each session runs on its own strand and owns
// one socket, one parser, an input buffer and an output queue:
//   reading   one read is outstanding whenever the input buffer has room, whatever else happens, so a client
//             that goes away is noticed while its response is being produced or written. Bytes are parsed only
//             while no response is pending; bytes of pipelined requests wait in the buffer (at most
//             kMaxBufferedBytes, then reading pauses until the response is complete) and are parsed, in order,
//             as soon as it is.
//   writing   response bytes are queued on the strand and coalesced into one write at a time.
//   timers    a read deadline (a whole request from its first byte; idle keep-alive) and a write deadline.
// Every completion handler runs inside guard(): an exception there (bad_alloc, a bug) closes that connection
// and never leaves the I/O thread; the I/O threads themselves restart io_context::run() if one escapes anyway.
#include "server/http_server.h"

#include <utility>  // NOTE: before Asio: Boost 1.74 uses std::exchange without including it

#include <pthread.h>
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <optional>
#include <unordered_map>

#include "peregrine/error.h"
#include "server/errors.h"

namespace peregrine::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Pipelined bytes kept while a response is pending; beyond this the socket is not read until it is complete.
constexpr size_t kMaxBufferedBytes = 64 * 1024;
constexpr size_t kReadChunk = 8 * 1024;
// Response bytes queued for a client that does not read them (a stream it stopped consuming); beyond this the
// connection is closed (its requests are aborted) instead of growing the queue.
constexpr size_t kMaxQueuedBytes = size_t{32} << 20;
// Connections beyond max_connections that are still answered 503 (more are closed at once).
constexpr size_t kMaxRefusing = 64;
constexpr auto kLinger = std::chrono::seconds(3);

std::chrono::steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 421:
      return "Misdirected Request";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 500 ? "Client Error" : "Server Error";
  }
}

std::string status_line(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
}

// Header values we write come from handlers; a CR or LF in one would split the response.
bool safe_header(const std::string& name, const std::string& value) {
  for (char c : name) {
    if (c == '\r' || c == '\n' || c == ':' || c == ' ') return false;
  }
  for (char c : value) {
    if (c == '\r' || c == '\n') return false;
  }
  return !name.empty();
}

bool is_loopback(const net::ip::address& a) {
  return a.is_loopback();
}

}  // namespace

std::string authority_host(std::string_view authority) {
  std::string_view host = authority;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    host = host.substr(0, close == std::string_view::npos ? host.size() : close + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  std::string out(host);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (out.size() > 1 && out.back() == '.') out.pop_back();
  return out;
}

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  std::atomic<bool>* shutting_down = nullptr;
  std::vector<std::string> checked_hosts;  // empty: any Host
  // NOTE: declared before the io_context, so sessions destroyed with its pending handlers can still unregister.
  mutable std::mutex sessions_mutex;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::atomic<size_t> num_sessions{0};
  std::atomic<size_t> num_refusing{0};
  std::atomic<size_t> active_requests{0};
  struct AtomicCounters {
    std::atomic<uint64_t> requests{0}, r2xx{0}, r4xx{0}, r5xx{0}, r503{0}, protocol_errors{0}, accepted{0}, refused{0};
  } counters;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;

  void do_accept();
  void count_status(int status) {
    if (status >= 500)
      ++counters.r5xx;
    else if (status >= 400)
      ++counters.r4xx;
    else if (status >= 200)
      ++counters.r2xx;
    if (status == 503) ++counters.r503;
  }
  bool host_allowed(const std::string& authority) const {
    if (checked_hosts.empty() || authority.empty()) return true;  // HTTP/1.0 without Host: nothing to check
    const std::string host = authority_host(authority);
    for (const std::string& h : checked_hosts) {
      if (h == host) return true;
    }
    return false;
  }
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServer::Impl& server, bool refuse)
      : socket_(std::move(socket)),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        server_(server),
        parser_(limits(server.options)),
        refuse_(refuse) {
    boost::system::error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~Session() {
    if (refuse_) --server_.num_refusing;
    if (registered_) {
      std::lock_guard<std::mutex> lock(server_.sessions_mutex);
      server_.sessions.erase(this);
      --server_.num_sessions;
    }
    if (counted_active_) --server_.active_requests;
  }

  // A refused session (over max_connections) is not registered: it is not counted as a connection, and
  // shutdown does not wait for it.
  void start() {
    if (!refuse_) {
      std::lock_guard<std::mutex> lock(server_.sessions_mutex);
      server_.sessions[this] = weak_from_this();
      ++server_.num_sessions;
      registered_ = true;
    }
    net::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      self->guard([&] {
        self->arm_read_timer();
        self->do_read();
      });
    });
  }
  auto executor() { return socket_.get_executor(); }

  // Runs fn; an exception closes this connection instead of leaving the I/O thread.
  template <typename Fn>
  void guard(Fn&& fn) noexcept {
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "peregrine serve: closing connection %s after an internal error: %s\n", remote_.c_str(),
                   e.what());
      close_quietly();
    } catch (...) {
      std::fprintf(stderr, "peregrine serve: closing connection %s after an unknown internal error\n", remote_.c_str());
      close_quietly();
    }
  }

  // All of the below run on the session's strand.
  void queue_response(int status, std::string_view content_type, const std::string& body, const HeaderList& extra) {
    if (!response_pending_ || response_started_) return;
    response_started_ = true;
    server_.count_status(status);
    std::string head = status_line(status);
    head += "Server: peregrine\r\n";
    const bool no_body = status == 204 || status == 304 || status < 200;
    if (!no_body) {
      head += "Content-Type: ";
      head += content_type;
      head += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    }
    head += "X-Content-Type-Options: nosniff\r\n";
    for (const auto& [k, v] : extra) {
      if (safe_header(k, v)) head += k + ": " + v + "\r\n";
    }
    response_keep_alive_ = keep_alive();
    head += response_keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    if (!head_only_ && !no_body) head += body;
    queue_bytes(std::move(head), true);
  }
  void queue_stream_start(const HeaderList& extra) {
    if (!response_pending_ || response_started_) return;
    response_started_ = true;
    server_.count_status(200);
    std::string head = status_line(200);
    head +=
        "Server: peregrine\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"
        "X-Content-Type-Options: nosniff\r\n";
    for (const auto& [k, v] : extra) {
      if (safe_header(k, v)) head += k + ": " + v + "\r\n";
    }
    if (http10_) {
      // HTTP/1.0 has no chunked coding: the end of the stream is the end of the connection.
      close_delimited_ = true;
      response_keep_alive_ = false;
      head += "Connection: close\r\n\r\n";
    } else {
      head += "Transfer-Encoding: chunked\r\n";
      response_keep_alive_ = keep_alive();
      head += response_keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    }
    streaming_ = true;
    queue_bytes(std::move(head), false);
  }
  void queue_chunk(std::string_view payload, bool last) {
    if (!streaming_) return;
    std::string chunk;
    if (head_only_) {
      // HEAD: the headers only.
    } else if (close_delimited_) {
      chunk = payload;
    } else {
      if (!payload.empty()) {
        char size[32];
        std::snprintf(size, sizeof(size), "%zx\r\n", payload.size());
        chunk = size;
        chunk += payload;
        chunk += "\r\n";
      }
      if (last) chunk += "0\r\n\r\n";
    }
    if (last) streaming_ = false;
    queue_bytes(std::move(chunk), last);
  }
  void close_if_idle() {
    if (response_pending_) {
      close_after_response_ = true;
    } else if (parser_.started()) {
      respond_now(503, "the server is shutting down");
    } else {
      close_now();
    }
  }

 private:
  static HttpParserLimits limits(const HttpServerOptions& o) {
    HttpParserLimits l;
    l.max_body_bytes = o.max_body_bytes;
    l.max_header_bytes = o.max_header_bytes;
    return l;
  }

  bool keep_alive() const { return keep_alive_ && !close_after_response_ && !server_.shutting_down->load(); }

  // ---- reading ----

  void do_read() {
    if (reading_ || closed_) return;
    if (!draining_ && in_.size() - in_off_ >= kMaxBufferedBytes) return;  // resumed when the response is complete
    reading_ = true;
    socket_.async_read_some(net::buffer(rbuf_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      self->guard([&] { self->on_read(ec, n); });
    });
  }

  void on_read(boost::system::error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      // End of stream, reset, or an error: no more requests come. A client that leaves while its response is
      // pending is told to the channel (its engine requests are aborted).
      return close_now();
    }
    if (draining_) return do_read();  // discarded
    in_.append(rbuf_.data(), n);
    process_input();
    do_read();
  }

  // Parses buffered bytes while no response is pending: the next request is dispatched, a framing error answered.
  void process_input() {
    while (!closed_ && !draining_ && !response_pending_ && in_off_ < in_.size()) {
      const bool was_started = parser_.started();
      const size_t used = parser_.feed(std::string_view(in_).substr(in_off_));
      in_off_ += used;
      if (in_off_ == in_.size()) {
        in_.clear();
        in_off_ = 0;
      } else if (in_off_ >= kReadChunk) {
        in_.erase(0, in_off_);
        in_off_ = 0;
      }
      if (!was_started && parser_.started()) arm_read_timer();  // a request has begun: it must end in time
      switch (parser_.state()) {
        case HttpRequestParser::State::kIncomplete:
          if (parser_.headers_complete() && parser_.request().expects_continue && !continue_sent_) {
            continue_sent_ = true;
            queue_bytes("HTTP/1.1 100 Continue\r\n\r\n", false);
          }
          return;
        case HttpRequestParser::State::kError:
          ++server_.counters.protocol_errors;
          return respond_now(parser_.error_status(), parser_.error_message());
        case HttpRequestParser::State::kComplete:
          dispatch(parser_.take());
          break;
      }
    }
  }

  void begin_response(bool keep_alive) {
    response_pending_ = true;
    response_started_ = false;
    keep_alive_ = keep_alive;
    continue_sent_ = false;
    close_delimited_ = false;
    streaming_ = false;
    cancel_read_timer();
    if (!counted_active_) {
      counted_active_ = true;
      ++server_.active_requests;
    }
  }

  void dispatch(HttpRequest req) {
    ++server_.counters.requests;
    head_only_ = req.method == "HEAD";
    http10_ = req.version == 10;
    begin_response(req.keep_alive);
    if (refuse_) {
      close_after_response_ = true;
      return respond_now(503, "too many connections; retry later", {{"Retry-After", "1"}}, false);
    }
    if (server_.shutting_down->load()) {
      close_after_response_ = true;
      return respond_now(503, "the server is shutting down", {}, false);
    }
    if (!server_.host_allowed(req.authority)) {
      std::string host = authority_host(req.authority).substr(0, 64);
      return respond_now(
          421, "the Host header names '" + host + "', which this server does not answer to (see --allowed-hosts)", {},
          false);
    }
    req.remote = remote_;
    channel_ = std::make_shared<ResponseChannel>(weak_from_this());
    auto channel = channel_;
    try {
      server_.handler(std::move(req), channel);
    } catch (const std::exception& e) {
      channel->send_json(500, error_body(500, std::string("internal error: ") + e.what()));
    } catch (...) {
      channel->send_json(500, error_body(500, "internal error"));
    }
  }

  // An answer from the server itself (framing errors, timeouts, refusals). close: the connection ends after it.
  void respond_now(int status, const std::string& message, const HeaderList& extra = {}, bool close = true) {
    if (!response_pending_) {
      head_only_ = false;
      begin_response(false);
    }
    if (close) close_after_response_ = true;
    queue_response(status, "application/json", error_body(status, message), extra);
  }

  // ---- writing ----

  void queue_bytes(std::string bytes, bool final) {
    if (closed_) return;
    queued_bytes_ += bytes.size();
    if (queued_bytes_ > kMaxQueuedBytes) {
      std::fprintf(stderr, "peregrine serve: closing connection %s: it has not read %zu bytes of its response\n",
                   remote_.c_str(), queued_bytes_);
      return close_now();
    }
    outq_.push_back(std::move(bytes));
    if (final) final_queued_ = true;
    do_write();
  }

  void do_write() {
    if (writing_ || outq_.empty() || closed_) return;
    inflight_.clear();
    for (auto& s : outq_) inflight_ += s;
    outq_.clear();
    queued_bytes_ = inflight_.size();
    writing_ = true;
    write_timer_.expires_after(to_duration(server_.options.write_timeout_s));
    write_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->guard([&] { self->close_now(); });  // the client does not read
    });
    net::async_write(socket_, net::buffer(inflight_),
                     [self = shared_from_this()](boost::system::error_code ec, size_t) {
                       self->guard([&] { self->on_write(ec); });
                     });
  }

  void on_write(boost::system::error_code ec) {
    writing_ = false;
    if (inflight_.capacity() > (size_t{1} << 20)) std::string().swap(inflight_);  // after a large response
    queued_bytes_ = 0;
    for (const auto& q : outq_) queued_bytes_ += q.size();
    write_timer_.cancel();
    if (closed_) return;
    if (ec) return close_now();
    if (!outq_.empty()) return do_write();
    if (final_queued_) on_response_complete();
  }

  void on_response_complete() {
    final_queued_ = false;
    response_pending_ = false;
    streaming_ = false;
    channel_.reset();
    if (counted_active_) {
      counted_active_ = false;
      --server_.active_requests;
    }
    if (!response_keep_alive_ || close_after_response_ || server_.shutting_down->load()) return drain_and_close();
    arm_read_timer();  // idle keep-alive, until the next request begins
    process_input();   // a pipelined request may be waiting already
    do_read();
  }

  // ---- timers and closing ----

  void arm_read_timer() {
    ++read_timer_gen_;
    const uint64_t gen = read_timer_gen_;
    // A refused connection (over max_connections) gets a few seconds to send its request, not a minute.
    const double timeout =
        refuse_ ? std::min(5.0, server_.options.request_timeout_s) : server_.options.request_timeout_s;
    read_timer_.expires_after(to_duration(timeout));
    read_timer_.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
      if (ec || gen != self->read_timer_gen_) return;
      self->guard([&] { self->on_read_timeout(); });
    });
  }
  void cancel_read_timer() {
    ++read_timer_gen_;
    read_timer_.cancel();
  }
  void on_read_timeout() {
    if (closed_ || response_pending_ || draining_) return;
    if (parser_.started()) {
      respond_now(408, "the request was not received within " +
                           std::to_string(static_cast<int>(server_.options.request_timeout_s)) + " s");
    } else {
      close_now();  // idle keep-alive connection
    }
  }

  // Ends a connection without losing the response: stop sending, then read and discard what the client still
  // sends (e.g. the rest of a body over the limit) for a short while, so the kernel does not reset the
  // connection before the client has read the response.
  void drain_and_close() {
    if (draining_ || closed_) return;
    draining_ = true;
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    in_.clear();
    in_.shrink_to_fit();
    in_off_ = 0;
    ++read_timer_gen_;
    const uint64_t gen = read_timer_gen_;
    read_timer_.expires_after(kLinger);
    read_timer_.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
      if (!ec && gen == self->read_timer_gen_) self->guard([&] { self->close_now(); });
    });
    do_read();
  }

  void close_now() {
    if (closed_) return;
    closed_ = true;
    ++read_timer_gen_;
    read_timer_.cancel();
    write_timer_.cancel();
    auto channel = std::move(channel_);
    channel_.reset();
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (counted_active_) {
      counted_active_ = false;
      --server_.active_requests;
    }
    if (channel && response_pending_) channel->notify_closed();
  }
  // close_now() for the error path: nothing here may throw again.
  void close_quietly() noexcept {
    try {
      close_now();
    } catch (...) {
      closed_ = true;
      boost::system::error_code ignored;
      socket_.close(ignored);
    }
  }

  tcp::socket socket_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  HttpServer::Impl& server_;
  HttpRequestParser parser_;
  std::array<char, kReadChunk> rbuf_;
  std::string in_;  // bytes read and not yet parsed start at in_off_
  size_t in_off_ = 0;
  std::shared_ptr<ResponseChannel> channel_;
  std::deque<std::string> outq_;
  std::string inflight_;
  size_t queued_bytes_ = 0;  // in outq_ and inflight_
  std::string remote_;
  uint64_t read_timer_gen_ = 0;
  const bool refuse_;  // over max_connections: answer 503 and close
  bool registered_ = false;
  bool counted_active_ = false;  // counted in active_requests
  bool reading_ = false;
  bool writing_ = false;
  bool response_pending_ = false;  // a request was dispatched and its response is not complete
  bool response_started_ = false;  // its status line was queued
  bool response_keep_alive_ = true;
  bool final_queued_ = false;
  bool keep_alive_ = true;
  bool close_after_response_ = false;
  bool head_only_ = false;
  bool http10_ = false;
  bool close_delimited_ = false;
  bool streaming_ = false;
  bool continue_sent_ = false;
  bool closed_ = false;
  bool draining_ = false;
};

// ---- ResponseChannel ----

void ResponseChannel::set_default_headers(HeaderList headers) {
  std::lock_guard<std::mutex> lock(mutex_);
  default_headers_ = std::move(headers);
}

void ResponseChannel::send(int status, std::string_view content_type, std::string body, const HeaderList& extra) {
  bool expected = false;
  if (!done_.compare_exchange_strong(expected, true)) return;
  auto s = session_.lock();
  if (!s) return;
  HeaderList headers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    headers = default_headers_;
  }
  headers.insert(headers.end(), extra.begin(), extra.end());
  net::post(s->executor(),
            [s, status, ct = std::string(content_type), body = std::move(body), headers = std::move(headers)] {
              s->guard([&] { s->queue_response(status, ct, body, headers); });
            });
}

void ResponseChannel::start_stream(const HeaderList& extra) {
  if (done_.load()) return;
  auto s = session_.lock();
  if (!s) return;
  HeaderList headers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    headers = default_headers_;
  }
  headers.insert(headers.end(), extra.begin(), extra.end());
  net::post(s->executor(), [s, headers = std::move(headers)] { s->guard([&] { s->queue_stream_start(headers); }); });
}

void ResponseChannel::send_event(std::string_view data, std::string_view event) {
  if (done_.load()) return;
  std::string payload;
  if (!event.empty()) {
    payload += "event: ";
    payload += event;
    payload += "\n";
  }
  payload += "data: ";
  payload += data;
  payload += "\n\n";
  if (auto s = session_.lock()) {
    net::post(s->executor(), [s, payload = std::move(payload)] { s->guard([&] { s->queue_chunk(payload, false); }); });
  }
}

void ResponseChannel::end_stream() {
  bool expected = false;
  if (!done_.compare_exchange_strong(expected, true)) return;
  if (auto s = session_.lock()) {
    net::post(s->executor(), [s] { s->guard([&] { s->queue_chunk("data: [DONE]\n\n", true); }); });
  }
}

void ResponseChannel::on_close(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closed_.load()) {
      on_close_ = std::move(fn);
      return;
    }
  }
  if (fn) fn();
}

void ResponseChannel::notify_closed() {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_.exchange(true)) return;
    fn = std::move(on_close_);
  }
  if (fn) fn();
}

// ---- HttpServer ----

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    try {
      if (!ec) {
        socket.set_option(tcp::no_delay(true), ec);
        bool refuse = false;
        if (num_sessions.load() >= options.max_connections) {
          ++counters.refused;
          // A few are answered 503 (after their request, so the client reads it); beyond those the connection is
          // closed at once.
          if (num_refusing.load() >= kMaxRefusing) {
            socket.close(ec);
          } else {
            ++num_refusing;
            refuse = true;
          }
        } else {
          ++counters.accepted;
        }
        if (socket.is_open()) std::make_shared<Session>(std::move(socket), *this, refuse)->start();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "peregrine serve: accepting a connection failed: %s\n", e.what());
    }
    do_accept();  // keep accepting after transient errors (e.g. too many open files)
  });
}

HttpServer::HttpServer(HttpServerOptions options, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->shutting_down = &shutting_down_;
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  Impl& im = *impl_;
  boost::system::error_code ec;
  const auto address = net::ip::make_address(im.options.host, ec);
  if (ec) throw Error(ErrorCode::kInvalidArgument, "--host: '" + im.options.host + "' is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(im.options.port));
  const std::string where = im.options.host + ":" + std::to_string(im.options.port);
  im.acceptor.open(endpoint.protocol(), ec);
  if (!ec) im.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(endpoint, ec);
  if (!ec) im.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw Error(ErrorCode::kUnavailable, "cannot listen on " + where + ": " + ec.message());
  bound_port_ = im.acceptor.local_endpoint().port();

  // The Host names this server answers to (see HttpServerOptions::allowed_hosts).
  bool any = false;
  for (const std::string& h : im.options.allowed_hosts) any = any || h == "*";
  if (!any && (is_loopback(address) || !im.options.allowed_hosts.empty())) {
    if (is_loopback(address)) im.checked_hosts.push_back("localhost");
    if (!address.is_unspecified()) {
      im.checked_hosts.push_back(address.is_v6() ? "[" + address.to_string() + "]" : address.to_string());
    }
    for (const std::string& h : im.options.allowed_hosts) im.checked_hosts.push_back(authority_host(h));
  }

  im.work.emplace(im.ioc.get_executor());
  im.do_accept();
  for (int i = 0; i < std::max(1, im.options.io_threads); ++i) {
    im.threads.emplace_back([&im] {
      // Handlers catch their own exceptions (Session::guard); this is the last line, so one that escapes anyway
      // is logged and the thread keeps serving instead of taking the process down.
      for (;;) {
        try {
          im.ioc.run();
          return;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "peregrine serve: an I/O thread caught: %s\n", e.what());
        } catch (...) {
          std::fprintf(stderr, "peregrine serve: an I/O thread caught an unknown exception\n");
        }
      }
    });
  }
}

void HttpServer::begin_shutdown() {
  if (shutting_down_.exchange(true)) return;
  Impl& im = *impl_;
  net::post(im.ioc, [&im] {
    boost::system::error_code ignored;
    im.acceptor.close(ignored);
  });
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(im.sessions_mutex);
    for (auto& [raw, weak] : im.sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) net::post(s->executor(), [s] { s->guard([&] { s->close_if_idle(); }); });
}

void HttpServer::stop() {
  Impl& im = *impl_;
  if (im.threads.empty()) return;
  im.work.reset();
  im.ioc.stop();
  for (auto& t : im.threads) t.join();
  im.threads.clear();
}

double HttpServer::io_cpu_seconds() const {
  double total = 0;
  for (auto& t : impl_->threads) {
    clockid_t clock;
    timespec ts{};
    if (pthread_getcpuclockid(const_cast<std::thread&>(t).native_handle(), &clock) == 0 &&
        clock_gettime(clock, &ts) == 0) {
      total += static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    }
  }
  return total;
}

size_t HttpServer::num_connections() const {
  std::lock_guard<std::mutex> lock(impl_->sessions_mutex);
  return impl_->sessions.size();
}

size_t HttpServer::num_active_requests() const {
  return impl_->active_requests.load();
}

HttpCounters HttpServer::counters() const {
  const auto& c = impl_->counters;
  HttpCounters out;
  out.requests = c.requests.load();
  out.responses_2xx = c.r2xx.load();
  out.responses_4xx = c.r4xx.load();
  out.responses_5xx = c.r5xx.load();
  out.responses_503 = c.r503.load();
  out.protocol_errors = c.protocol_errors.load();
  out.connections_accepted = c.accepted.load();
  out.connections_refused = c.refused.load();
  return out;
}

const std::vector<std::string>& HttpServer::checked_hosts() const {
  return impl_->checked_hosts;
}

}  // namespace peregrine::server
