// HttpServer tests over loopback with raw sockets: whole responses with keep-alive, SSE streams (chunked),
// disconnect notification while a response is pending, the body limit (413), and shutdown.
#include <utility>  // NOTE: before Asio (Boost 1.74 uses std::exchange without including it)

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <thread>

#include "server/http_server.h"

namespace peregrine::server {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions o;
    o.port = 0;
    o.max_body_bytes = 1000;
    o.io_threads = 2;
    server_ = std::make_unique<HttpServer>(o, [this](HttpRequest&& r, std::shared_ptr<ResponseChannel> c) {
      if (r.path == "/echo") {
        c->send(200, "text/plain", r.method + " " + r.body);
      } else if (r.path == "/stream") {
        c->start_stream();
        for (const char* e : {"a", "b", "c"}) c->send_event(e);
        c->end_stream();
      } else if (r.path == "/hold") {
        c->on_close([this] { closed_ = true; });
        held_ = c;
      } else {
        c->send(404, "text/plain", "no");
      }
    });
    server_->start();
  }
  void TearDown() override {
    held_.reset();
    server_->begin_shutdown();
    server_->stop();
  }

  tcp::socket connect() {
    tcp::socket s(ioc_);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server_->port())));
    return s;
  }
  // Reads until `needle` appears or the peer closes.
  static std::string read_until(tcp::socket& s, const std::string& needle) {
    std::string data;
    char buf[4096];
    boost::system::error_code ec;
    while (data.find(needle) == std::string::npos) {
      const size_t n = s.read_some(net::buffer(buf), ec);
      if (ec) break;
      data.append(buf, n);
    }
    return data;
  }

  net::io_context ioc_;
  std::unique_ptr<HttpServer> server_;
  std::shared_ptr<ResponseChannel> held_;
  std::atomic<bool> closed_{false};
};

TEST_F(HttpServerTest, WholeResponsesOnAKeptAliveConnection) {
  tcp::socket s = connect();
  for (int i = 0; i < 2; ++i) {
    net::write(s, net::buffer(std::string("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")));
    const std::string res = read_until(s, "POST hello");
    EXPECT_EQ(res.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << res;
    EXPECT_NE(res.find("Content-Length: 10"), std::string::npos);
    EXPECT_NE(res.find("Connection: keep-alive"), std::string::npos);
  }
}

TEST_F(HttpServerTest, ServerSentEventsAreChunked) {
  tcp::socket s = connect();
  net::write(s, net::buffer(std::string("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")));
  const std::string res = read_until(s, "0\r\n\r\n");
  EXPECT_NE(res.find("Content-Type: text/event-stream"), std::string::npos);
  EXPECT_NE(res.find("Transfer-Encoding: chunked"), std::string::npos);
  const size_t a = res.find("data: a\n\n"), c = res.find("data: c\n\n"), done = res.find("data: [DONE]\n\n");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(c, std::string::npos);
  ASSERT_NE(done, std::string::npos);
  EXPECT_LT(a, c);
  EXPECT_LT(c, done);
}

TEST_F(HttpServerTest, ADisconnectWhileAResponseIsPendingIsNoticed) {
  {
    tcp::socket s = connect();
    net::write(s, net::buffer(std::string("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")));
    for (int i = 0; i < 200 && !held_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(held_);
    EXPECT_FALSE(closed_.load());
  }  // the client goes away
  for (int i = 0; i < 200 && !closed_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(closed_.load());
  EXPECT_TRUE(held_->is_closed());
  held_->send(200, "text/plain", "late");  // harmless after the client left
}

TEST_F(HttpServerTest, BodiesOverTheLimitGet413AndMalformedRequests400) {
  tcp::socket s = connect();
  std::string req = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'x');
  net::write(s, net::buffer(req));
  const std::string res = read_until(s, "}}");
  EXPECT_EQ(res.rfind("HTTP/1.1 413", 0), 0u) << res;
  EXPECT_NE(res.find("\"code\":413"), std::string::npos);
  tcp::socket g = connect();
  net::write(g, net::buffer(std::string("NOT HTTP AT ALL\r\n\r\n")));
  EXPECT_EQ(read_until(g, "}}").rfind("HTTP/1.1 400", 0), 0u);
}

TEST_F(HttpServerTest, ShutdownClosesIdleConnections) {
  tcp::socket s = connect();
  net::write(s, net::buffer(std::string("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")));
  read_until(s, "GET ");
  for (int i = 0; i < 100 && server_->num_connections() != 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(server_->num_connections(), 1u);
  server_->begin_shutdown();
  // The server ends the connection (at once when idle, or after the response it may still be finishing, by
  // shutting down its sending side and draining): the client sees end-of-stream and closes, as a real one does.
  read_until(s, std::string("\x01never"));
  s.close();
  for (int i = 0; i < 1000 && server_->num_connections() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(server_->num_connections(), 0u);
  EXPECT_GE(server_->io_cpu_seconds(), 0.0);
}

}  // namespace
}  // namespace peregrine::server
