// HttpServer and its per-connection Session on Boost.Beast (see http_server.h). Each session runs on its own
// strand: one read is always outstanding (the next request, or a "watch" read while a response is pending
// that notices disconnects), and queued response bytes are coalesced into one write at a time.
#include "server/http_server.h"

#include <utility>  // NOTE: before Asio: Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <ctime>
#include <pthread.h>
#include <deque>
#include <optional>
#include <unordered_map>

#include "core/status.h"
#include "server/errors.h"

namespace peregrine::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

std::chrono::steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

std::string status_line(int status) {
  const auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) + "\r\n";
}

std::string to_std(beast::string_view s) { return std::string(s.data(), s.size()); }

std::string to_lower(beast::string_view s) {
  std::string out = to_std(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  std::atomic<bool>* shutting_down = nullptr;
  // NOTE: declared before the io_context, so sessions destroyed with its pending handlers can still unregister.
  mutable std::mutex sessions_mutex;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;

  void do_accept();
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), idle_timer_(stream_.get_executor()), server_(server) {
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~Session() {
    std::lock_guard<std::mutex> lock(server_.sessions_mutex);
    server_.sessions.erase(this);
  }

  void start() {
    {
      std::lock_guard<std::mutex> lock(server_.sessions_mutex);
      server_.sessions[this] = weak_from_this();
    }
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }
  auto executor() { return stream_.get_executor(); }

  // All of the below run on the session's strand.
  void queue_response(int status, std::string_view content_type, const std::string& body, const HeaderList& extra) {
    std::string head = status_line(status);
    head += "Server: peregrine\r\nContent-Type: ";
    head += content_type;
    head += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    for (const auto& [k, v] : extra) head += k + ": " + v + "\r\n";
    head += keep_alive() ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    head += body;
    queue_bytes(std::move(head), true);
  }
  void queue_stream_start() {
    std::string head = status_line(200);
    head +=
        "Server: peregrine\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\n";
    head += keep_alive() ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    queue_bytes(std::move(head), false);
  }
  void queue_chunk(std::string_view payload, bool last) {
    std::string chunk;
    if (!payload.empty()) {
      char size[32];
      std::snprintf(size, sizeof(size), "%zx\r\n", payload.size());
      chunk = size;
      chunk += payload;
      chunk += "\r\n";
    }
    if (last) chunk += "0\r\n\r\n";
    queue_bytes(std::move(chunk), last);
  }
  void close_if_idle() {
    if (!response_pending_) close_now();
    else close_after_response_ = true;
  }

 private:
  bool keep_alive() const { return keep_alive_ && !close_after_response_ && !server_.shutting_down->load(); }

  void read_request() {
    if (closed_) return;
    if (server_.shutting_down->load()) return close_now();
    idle_timer_.cancel();
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header_bytes));
    stream_.expires_after(to_duration(server_.options.request_timeout_s));
    reading_ = true;
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_request, shared_from_this()));
  }

  void on_request(beast::error_code ec, std::size_t) {
    reading_ = false;
    if (closed_) return;
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == beast::error::timeout || ec == net::error::operation_aborted) {
      return close_now();
    }
    if (ec) {
      int status = 400;
      std::string message = "malformed HTTP request: " + ec.message();
      if (ec == http::error::body_limit) {
        status = 413;
        message = "request body exceeds the limit of " + std::to_string(server_.options.max_body_bytes) + " bytes";
      } else if (ec == http::error::header_limit) {
        status = 431;
        message = "request headers exceed the limit of " + std::to_string(server_.options.max_header_bytes) + " bytes";
      }
      keep_alive_ = false;
      response_pending_ = true;
      channel_ = std::make_shared<ResponseChannel>(weak_from_this());
      channel_->send_json(status, error_body(status, message));
      return;
    }
    auto& msg = parser_->get();
    HttpRequest req;
    req.method = to_std(msg.method_string());
    const std::string target = to_std(msg.target());
    const size_t q = target.find('?');
    req.path = target.substr(0, q);
    if (q != std::string::npos) req.query = target.substr(q + 1);
    for (const auto& field : msg) req.headers[to_lower(field.name_string())] = to_std(field.value());
    req.body = std::move(msg.body());
    req.remote = remote_;
    keep_alive_ = msg.keep_alive();
    response_pending_ = true;
    channel_ = std::make_shared<ResponseChannel>(weak_from_this());
    stream_.expires_never();
    start_watch();
    auto channel = channel_;
    try {
      server_.handler(std::move(req), channel);
    } catch (const std::exception& e) {
      channel->send_json(500, error_body(500, std::string("internal error: ") + e.what()));
    }
  }

  // While a response is pending, keep a read outstanding to notice a client that goes away.
  void start_watch() {
    if (reading_ || closed_ || buffer_.size() > (size_t{1} << 20)) return;
    reading_ = true;
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(4096), beast::bind_front_handler(&Session::on_watch, shared_from_this()));
  }

  void on_watch(beast::error_code ec, std::size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) return close_now();  // the client went away (or closed its idle keep-alive connection)
    buffer_.commit(n);
    if (draining_) {
      buffer_.consume(buffer_.size());
      return start_drain_read();
    }
    if (response_pending_) start_watch();
    else read_request();  // a pipelined or next request arrived
  }

  void queue_bytes(std::string bytes, bool final) {
    if (closed_) return;
    outq_.push_back(std::move(bytes));
    if (final) final_queued_ = true;
    do_write();
  }

  void do_write() {
    if (writing_ || outq_.empty() || closed_) return;
    inflight_.clear();
    for (auto& s : outq_) inflight_ += s;
    outq_.clear();
    writing_ = true;
    stream_.expires_after(to_duration(server_.options.write_timeout_s));  // the write timer only
    net::async_write(stream_, net::buffer(inflight_), beast::bind_front_handler(&Session::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, std::size_t) {
    writing_ = false;
    if (closed_) return;
    if (ec) return close_now();
    if (!outq_.empty()) return do_write();
    if (!final_queued_) return;
    // The response is complete.
    final_queued_ = false;
    response_pending_ = false;
    channel_.reset();
    if (!keep_alive()) return drain_and_close();
    if (!reading_) return read_request();
    // A watch read is still outstanding and will pick up the next request; bound how long we stay idle.
    idle_timer_.expires_after(to_duration(server_.options.request_timeout_s));
    idle_timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
      if (!wait_ec && !self->response_pending_) self->close_now();
    });
  }

  // Ends a connection without losing the response: stop sending, then read and discard what the client still
  // sends (e.g. the rest of a body over the limit) for a short while, so the kernel does not reset the
  // connection before the client has read the response.
  void drain_and_close() {
    draining_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    buffer_.consume(buffer_.size());
    idle_timer_.expires_after(std::chrono::seconds(3));
    idle_timer_.async_wait([self = shared_from_this()](beast::error_code wait_ec) {
      if (!wait_ec) self->close_now();
    });
    start_drain_read();
  }
  void start_drain_read() {
    if (reading_ || closed_) return;
    reading_ = true;
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(65536), beast::bind_front_handler(&Session::on_watch, shared_from_this()));
  }

  void close_now() {
    if (closed_) return;
    closed_ = true;
    idle_timer_.cancel();
    if (channel_ && response_pending_) channel_->notify_closed();
    channel_.reset();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  net::steady_timer idle_timer_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<ResponseChannel> channel_;
  std::deque<std::string> outq_;
  std::string inflight_;
  std::string remote_;
  bool reading_ = false;
  bool writing_ = false;
  bool response_pending_ = false;
  bool final_queued_ = false;
  bool keep_alive_ = true;
  bool close_after_response_ = false;
  bool closed_ = false;
  bool draining_ = false;
};

// ---- ResponseChannel ----

void ResponseChannel::send(int status, std::string_view content_type, std::string body, const HeaderList& extra) {
  bool expected = false;
  if (!done_.compare_exchange_strong(expected, true)) return;
  auto s = session_.lock();
  if (!s) return;
  net::post(s->executor(), [s, status, ct = std::string(content_type), body = std::move(body), extra] {
    s->queue_response(status, ct, body, extra);
  });
}

void ResponseChannel::start_stream() {
  if (done_.load()) return;
  if (auto s = session_.lock()) net::post(s->executor(), [s] { s->queue_stream_start(); });
}

void ResponseChannel::send_event(std::string_view data) {
  if (done_.load()) return;
  std::string payload = "data: ";
  payload += data;
  payload += "\n\n";
  if (auto s = session_.lock()) {
    net::post(s->executor(), [s, payload = std::move(payload)] { s->queue_chunk(payload, false); });
  }
}

void ResponseChannel::end_stream() {
  bool expected = false;
  if (!done_.compare_exchange_strong(expected, true)) return;
  if (auto s = session_.lock()) net::post(s->executor(), [s] { s->queue_chunk("data: [DONE]\n\n", true); });
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
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(std::move(socket), *this)->start();
    }
    do_accept();  // keep accepting after transient errors (e.g. too many open files)
  });
}

HttpServer::HttpServer(HttpServerOptions options, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->shutting_down = &shutting_down_;
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  Impl& im = *impl_;
  beast::error_code ec;
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
  im.work.emplace(im.ioc.get_executor());
  im.do_accept();
  for (int i = 0; i < std::max(1, im.options.io_threads); ++i) im.threads.emplace_back([&im] { im.ioc.run(); });
}

void HttpServer::begin_shutdown() {
  if (shutting_down_.exchange(true)) return;
  Impl& im = *impl_;
  net::post(im.ioc, [&im] {
    beast::error_code ignored;
    im.acceptor.close(ignored);
  });
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(im.sessions_mutex);
    for (auto& [raw, weak] : im.sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) net::post(s->executor(), [s] { s->close_if_idle(); });
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

}  // namespace peregrine::server
