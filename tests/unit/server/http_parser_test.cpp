// HttpRequestParser: RFC 9112 framing (request line, fields, Content-Length, chunked with extensions and trailers),
// the smuggling defences (conflicting or unsupported framing is an error), a byte limit in every state, and the
// same result whether the bytes arrive at once or one at a time.
#include <gtest/gtest.h>

#include "server/http_parser.h"

namespace peregrine::server {
namespace {

struct Parsed {
  HttpRequestParser::State state;
  int status = 0;
  std::string message;
  HttpRequest request;
  size_t consumed = 0;
};

Parsed parse_with(const std::string& bytes, const HttpParserLimits& limits, size_t piece) {
  HttpRequestParser p(limits);
  Parsed out;
  size_t off = 0;
  while (off < bytes.size() && p.state() == HttpRequestParser::State::kIncomplete) {
    const size_t n = std::min(piece, bytes.size() - off);
    const size_t used = p.feed(std::string_view(bytes).substr(off, n));
    EXPECT_LE(used, n);
    off += used;
    if (used < n) break;
  }
  out.state = p.state();
  out.status = p.error_status();
  out.message = p.error_message();
  out.consumed = off;
  if (out.state == HttpRequestParser::State::kComplete) out.request = p.take();
  return out;
}

// Parses whole and byte by byte; both must agree.
Parsed parse(const std::string& bytes, const HttpParserLimits& limits = {}) {
  Parsed whole = parse_with(bytes, limits, bytes.size() + 1);
  Parsed bytewise = parse_with(bytes, limits, 1);
  EXPECT_EQ(whole.state, bytewise.state) << bytes.substr(0, 200);
  EXPECT_EQ(whole.status, bytewise.status) << bytes.substr(0, 200);
  EXPECT_EQ(whole.request.body, bytewise.request.body);
  if (whole.state == HttpRequestParser::State::kComplete) {
    EXPECT_EQ(whole.consumed, bytewise.consumed);
  }
  return whole;
}

int status_of(const std::string& bytes, const HttpParserLimits& limits = {}) {
  const Parsed p = parse(bytes, limits);
  if (p.state == HttpRequestParser::State::kComplete) return 0;
  if (p.state == HttpRequestParser::State::kIncomplete) return -1;
  return p.status;
}

TEST(HttpParser, ParsesARequestWithABody) {
  const Parsed p = parse(
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\n"
      "Content-Length: 7\r\nX-A: 1\r\nx-a:  2 \r\n\r\n{\"a\":1}");
  ASSERT_EQ(p.state, HttpRequestParser::State::kComplete);
  EXPECT_EQ(p.request.method, "POST");
  EXPECT_EQ(p.request.path, "/v1/completions");
  EXPECT_EQ(p.request.query, "x=1");
  EXPECT_EQ(p.request.version, 11);
  EXPECT_EQ(p.request.body, "{\"a\":1}");
  EXPECT_EQ(p.request.authority, "localhost:8000");
  EXPECT_EQ(*p.request.header("x-a"), "1, 2");  // repeated fields are joined
  EXPECT_EQ(*p.request.header("content-type"), "application/json");
  EXPECT_TRUE(p.request.keep_alive);
}

TEST(HttpParser, LeavesPipelinedBytesForTheNextRequest) {
  const std::string a = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string b = "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi";
  const std::string both = a + b + a;
  HttpRequestParser p;
  size_t off = 0;
  std::vector<std::string> paths;
  while (off < both.size()) {
    off += p.feed(std::string_view(both).substr(off));
    ASSERT_EQ(p.state(), HttpRequestParser::State::kComplete);
    paths.push_back(p.take().path);
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/a", "/b", "/a"}));
}

TEST(HttpParser, ChunkedBodiesWithExtensionsAndTrailers) {
  const Parsed p = parse(
      "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value;q=\"quoted\"\r\nhello\r\n0006 ; ext\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n");
  ASSERT_EQ(p.state, HttpRequestParser::State::kComplete) << p.message;
  EXPECT_EQ(p.request.body, "hello world");
  EXPECT_EQ(p.request.header("x-trailer"), nullptr);  // trailers are checked, not merged
  EXPECT_EQ(*p.request.header("transfer-encoding"), "chunked");
  // Transfer codings are case-insensitive; an empty list element is skipped.
  EXPECT_EQ(status_of("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: , Chunked\r\n\r\n0\r\n\r\n"), 0);
}

// Defect 1: a chunked trailer field of 64 KB or more crashed the server (Beast threw from an I/O thread).
TEST(HttpParser, HugeTrailerFieldsAreAnErrorNotACrash) {
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ";
  EXPECT_EQ(status_of(head + std::string(65534, 't') + "\r\n\r\n"), 431);
  EXPECT_EQ(status_of(head + std::string(200000, 't') + "\r\n\r\n"), 431);
  // A trailer within the limit is fine.
  EXPECT_EQ(status_of(head + std::string(1000, 't') + "\r\n\r\n"), 0);
  EXPECT_EQ(status_of(head + "t\r\nbad trailer\r\n\r\n"), 400);
}

// Defect 4: endless chunk extensions and zero-padded chunk sizes were buffered whole.
TEST(HttpParser, ChunkSizeLinesAndExtensionsAreBounded) {
  const std::string head = "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  // An endless extension fails once the line passes its limit, long before the bytes end.
  HttpRequestParser p;
  p.feed(head + "1;");
  const std::string ext(4096, 'e');
  size_t fed = 0;
  while (p.state() == HttpRequestParser::State::kIncomplete && fed < (size_t{64} << 20)) fed += p.feed(ext);
  EXPECT_EQ(p.state(), HttpRequestParser::State::kError);
  EXPECT_EQ(p.error_status(), 400);
  EXPECT_LE(fed, HttpParserLimits{}.max_chunk_line + ext.size());
  // Zero padding counts toward the line: a megabyte of zeros is refused.
  HttpRequestParser z;
  z.feed(head);
  const std::string zeros(4096, '0');
  fed = 0;
  while (z.state() == HttpRequestParser::State::kIncomplete && fed < (size_t{64} << 20)) fed += z.feed(zeros);
  EXPECT_EQ(z.state(), HttpRequestParser::State::kError);
  EXPECT_LE(fed, HttpParserLimits{}.max_chunk_line + zeros.size());
  EXPECT_EQ(z.error_status(), 400);  // a long line, not a large size
  EXPECT_EQ(status_of(head + std::string(900, '0') + "5\r\nhello\r\n0\r\n\r\n"), 0);
  // A little padding is fine; many small extensions are bounded in total.
  EXPECT_EQ(status_of(head + "0005\r\nhello\r\n0\r\n\r\n"), 0);
  std::string many = head;
  for (int i = 0; i < 3000; ++i) many += "1;abcdefgh\r\nx\r\n";
  EXPECT_EQ(status_of(many + "0\r\n\r\n"), 400);
  // Sizes beyond the body limit, or beyond 64 bits, are 413.
  HttpParserLimits small;
  small.max_body_bytes = 10;
  EXPECT_EQ(status_of(head + "b\r\nhello world\r\n0\r\n\r\n", small), 413);
  EXPECT_EQ(status_of(head + "6\r\nhello \r\n6\r\nworld!\r\n0\r\n\r\n", small), 413);
  EXPECT_EQ(status_of(head + "fffffffffffffffffffff\r\n"), 413);
  // Malformed framing.
  EXPECT_EQ(status_of(head + "x\r\n"), 400);
  EXPECT_EQ(status_of(head + "5\r\nhelloXX"), 400);          // data not followed by CRLF
  EXPECT_EQ(status_of(head + "5\nhello\r\n"), 400);          // bare LF
  EXPECT_EQ(status_of(head + "5 \r\nhello\r\n"), 400);       // whitespace without an extension
  EXPECT_EQ(status_of(head + "5;a\x01\r\nhello\r\n"), 400);  // control character
}

// Defect 5: framing the server does not implement, or ambiguous framing, is an error (and the server closes the
// connection after answering, so nothing after it is read as a request).
TEST(HttpParser, AmbiguousOrUnsupportedFramingIsAnError) {
  const std::string start = "POST /x HTTP/1.1\r\nHost: h\r\n";
  EXPECT_EQ(status_of(start + "Transfer-Encoding: gzip\r\n\r\n"), 400);
  EXPECT_EQ(status_of(start + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"), 400);
  EXPECT_EQ(status_of(start + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of(start + "Transfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(status_of(start + "Transfer-Encoding: chunked, gzip\r\n\r\n"), 400);
  EXPECT_EQ(status_of(start + "Transfer-Encoding:\r\n\r\n"), 400);
  EXPECT_EQ(status_of(start + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400);
  EXPECT_EQ(status_of(start + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"), 400);
  EXPECT_EQ(status_of(start + "Content-Length: 5, 6\r\n\r\nhello!"), 400);
  EXPECT_EQ(status_of(start + "Content-Length: 5, 5\r\n\r\nhello"), 0);
  EXPECT_EQ(status_of(start + "Content-Length: +5\r\n\r\nhello"), 400);
  EXPECT_EQ(status_of(start + "Content-Length: 0x5\r\n\r\nhello"), 400);
  EXPECT_EQ(status_of(start + "Content-Length: 99999999999999999999999\r\n\r\n"), 413);
  EXPECT_EQ(status_of(start + "Content-Length : 5\r\n\r\nhello"), 400);            // whitespace before the colon
  EXPECT_EQ(status_of(start + "Content-Length: 5\r\n folded\r\n\r\nhello"), 400);  // obs-fold
  EXPECT_EQ(status_of(start + "X: a\rb\r\n\r\n"), 400);                            // bare CR
  EXPECT_EQ(status_of(start + "X: a\nb: c\r\n\r\n"), 400);                         // bare LF
  EXPECT_EQ(status_of(start + std::string("X: a\0b\r\n\r\n", 10)), 400);           // NUL
  EXPECT_EQ(status_of(start + "X\r\n\r\n"), 400);
  EXPECT_EQ(status_of(start + "Expect: something\r\n\r\n"), 417);
}

TEST(HttpParser, HostRulesAndTargetForms) {
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n\r\n"), 400);                        // missing Host
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"), 400);  // duplicate Host
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400);           // invalid Host
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a:80:90\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: [::1]:8000\r\n\r\n"), 0);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: \r\n\r\n"), 0);  // empty is valid (RFC 9112 3.2)
  EXPECT_EQ(status_of("GET / HTTP/1.0\r\n\r\n"), 0);            // HTTP/1.0 needs none
  // Absolute form: the target's authority wins over Host.
  Parsed p = parse("GET http://Example.com:8000/v1/models?a=b HTTP/1.1\r\nHost: other\r\n\r\n");
  ASSERT_EQ(p.state, HttpRequestParser::State::kComplete);
  EXPECT_EQ(p.request.path, "/v1/models");
  EXPECT_EQ(p.request.query, "a=b");
  EXPECT_EQ(p.request.authority, "Example.com:8000");
  p = parse("GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_EQ(p.state, HttpRequestParser::State::kComplete);
  EXPECT_EQ(p.request.path, "/");
  EXPECT_EQ(status_of("GET http://user@h/ HTTP/1.1\r\nHost: h\r\n\r\n"), 400);  // userinfo
  EXPECT_EQ(status_of("GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET relative HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"), 0);
  EXPECT_EQ(status_of("GET * HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
}

TEST(HttpParser, RequestLineVersionsAndConnection) {
  EXPECT_EQ(status_of("GARBAGE\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1 \r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("G(T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / HTTP/1.1\nHost: h\n\n"), 400);  // bare LF fails at once
  EXPECT_EQ(status_of("GET /\x7f HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_EQ(parse("GET / HTTP/1.2\r\nHost: h\r\n\r\n").request.version, 11);
  // Empty lines before the request line are skipped (a few).
  EXPECT_EQ(status_of("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 0);
  EXPECT_EQ(status_of(std::string(40, '\r') + "GET / HTTP/1.1\r\n"), 400);
  std::string crlfs;
  for (int i = 0; i < 20; ++i) crlfs += "\r\n";
  EXPECT_EQ(status_of(crlfs + "GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive, CLOSE\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").request.keep_alive);
  EXPECT_TRUE(parse("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nx")
                  .request.expects_continue);
  EXPECT_FALSE(parse("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx").request.expects_continue);
}

TEST(HttpParser, EveryStateHasALimit) {
  HttpParserLimits l;
  // Request line: 414 as soon as it is too long, without waiting for a CRLF.
  HttpRequestParser p(l);
  p.feed("GET /" + std::string(l.max_request_line, 'a'));
  EXPECT_EQ(p.state(), HttpRequestParser::State::kError);
  EXPECT_EQ(p.error_status(), 414);
  // Header section: 431 once it passes the limit, whether one field or many.
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(l.max_header_bytes, 'v') + "\r\n\r\n"), 431);
  std::string many = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (size_t i = 0; i <= l.max_header_fields; ++i) {
    many += "X";  // NOTE: not "X" + to_string(i) (a GCC 12 -Wrestrict false positive)
    many += std::to_string(i);
    many += ": 1\r\n";
  }
  EXPECT_EQ(status_of(many + "\r\n"), 431);
  // Header bytes without an end: the parser holds at most the limit.
  HttpRequestParser h(l);
  h.feed("GET / HTTP/1.1\r\nHost: h\r\n");
  const std::string filler = "X-Filler: " + std::string(1000, 'f') + "\r\n";
  size_t fed = 0;
  while (h.state() == HttpRequestParser::State::kIncomplete) fed += h.feed(filler);
  EXPECT_EQ(h.error_status(), 431);
  EXPECT_LE(fed, l.max_header_bytes + filler.size());
  // Body: a declared length over the limit fails before any body byte.
  HttpParserLimits small;
  small.max_body_bytes = 100;
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n", small), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'b'), small), 0);
  // Incomplete input stays incomplete (the server's timeout ends it).
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc"), -1);
}

TEST(HttpParser, ResetAndStartedFlags) {
  HttpRequestParser p;
  EXPECT_FALSE(p.started());
  p.feed("\r\n");
  EXPECT_FALSE(p.started());  // an empty line is not a request
  p.feed("G");
  EXPECT_TRUE(p.started());
  EXPECT_FALSE(p.headers_complete());
  p.feed("ET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n");
  EXPECT_TRUE(p.headers_complete());
  p.feed("abc");
  ASSERT_EQ(p.state(), HttpRequestParser::State::kComplete);
  EXPECT_EQ(p.take().body, "abc");
  EXPECT_FALSE(p.started());
  EXPECT_EQ(p.state(), HttpRequestParser::State::kIncomplete);
}

}  // namespace
}  // namespace peregrine::server
