// HttpRequestParser: an incremental HTTP/1.1 request parser (RFC 9112) with a byte limit on every state, written
// for the server's hostile-input boundary. It knows nothing of sockets: bytes go in through feed(), which
// consumes at most one request and leaves the rest (pipelined requests) to the caller.
//
// What it accepts: origin-form, absolute-form (http/https: its authority replaces Host), asterisk-form (OPTIONS)
// and authority-form (CONNECT) targets; HTTP/1.0 and 1.1 (1.x above 1 reads as 1.1); Content-Length or
// `Transfer-Encoding: chunked` bodies (chunk extensions and trailers are checked and discarded, never stored);
// `Expect: 100-continue`. Lines end with CRLF only: a bare CR or LF is an error, so no two parsers disagree on
// where a message ends. What it refuses, and how (every error closes the connection after the response):
//   400  a malformed request line, field line (whitespace before the colon, obs-fold, control characters), Host
//        (missing in HTTP/1.1, repeated, or not host[:port]), Content-Length (not digits, conflicting values),
//        Transfer-Encoding with Content-Length, in HTTP/1.0, not ending in chunked, or chunked twice; a malformed
//        chunk-size line or chunk terminator; chunk extensions over their limits
//   413  a body over max_body_bytes (declared or chunked)          414  a request line over max_request_line
//   417  an expectation other than 100-continue                    431  header or trailer section over its limit
//   501  a transfer coding other than chunked                      505  an HTTP version other than 1.x
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace peregrine::server {

struct HttpRequest {
  std::string method;             // "GET", "POST", ... (case-sensitive, as sent)
  std::string target;             // the request target as sent
  std::string path;               // target path without the query string ("/v1/models"; "*" for OPTIONS *)
  std::string query;              // after '?', without it
  std::string authority;          // the absolute-form target's authority, else the Host header ("" when absent)
  int version = 11;               // 10 = HTTP/1.0, 11 = HTTP/1.1
  bool keep_alive = true;         // the client allows another request on this connection
  bool expects_continue = false;  // Expect: 100-continue (HTTP/1.1)
  // Field names lower-cased; repeated fields joined with ", " (RFC 9110 5.3).
  std::map<std::string, std::string> headers;
  std::string body;    // decoded (chunked bodies de-chunked)
  std::string remote;  // peer address, for logs

  const std::string* header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? nullptr : &it->second;
  }
};

struct HttpParserLimits {
  size_t max_request_line = 8 * 1024;        // 414 beyond (the line itself, without CRLF)
  size_t max_header_bytes = 64 * 1024;       // request line + fields + CRLFs: 431 beyond; also the trailer limit
  size_t max_header_fields = 256;            // 431 beyond
  size_t max_body_bytes = size_t{16} << 20;  // 413 beyond
  size_t max_chunk_line = 1024;              // one chunk-size line with its extensions: 400 beyond
  size_t max_chunk_ext_bytes = 16 * 1024;    // all chunk extensions of one message: 400 beyond
  size_t max_leading_empty_lines = 8;        // CRLFs tolerated before a request line (RFC 9112 2.2)
};

class HttpRequestParser {
 public:
  enum class State { kIncomplete, kComplete, kError };

  explicit HttpRequestParser(HttpParserLimits limits = {}) : limits_(limits) {}

  // Consumes bytes of the current request; returns how many (less than data.size() only when the request
  // completed or failed: the rest belongs to the next request). Never throws on any input.
  size_t feed(std::string_view data);

  State state() const { return state_; }
  // Any byte of a request has been seen (a timeout then deserves a 408, not a silent close).
  bool started() const { return started_; }
  // The header section is complete (the request line and fields are available in request()).
  bool headers_complete() const { return phase_ > Phase::kHead; }
  // After kError: the status to answer (400, 413, 414, 417, 431, 501, 505) and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

  const HttpRequest& request() const { return request_; }
  // Moves the complete request out and resets the parser for the next one.
  HttpRequest take();
  void reset();

 private:
  enum class Phase {
    kHead,
    kBody,
    kChunkSize,
    kChunkExt,
    kChunkSizeLf,
    kChunkData,
    kChunkDataCr,
    kChunkDataLf,
    kTrailer,
    kDone
  };

  size_t feed_head(std::string_view data);
  void parse_head();  // head_ holds the request line and fields, each ending in CRLF, then the empty line
  bool parse_request_line(std::string_view line);
  bool parse_target(std::string_view target);
  bool check_field_line(std::string_view line, std::string_view& name, std::string_view& value);
  bool parse_field(std::string_view line);
  bool finish_fields();
  size_t feed_trailer(std::string_view data);
  void fail(int status, std::string message);
  size_t fail_at(size_t consumed, int status, std::string message);  // fail(); returns consumed
  void complete();

  HttpParserLimits limits_;
  State state_ = State::kIncomplete;
  Phase phase_ = Phase::kHead;
  bool started_ = false;
  HttpRequest request_;
  int error_status_ = 0;
  std::string error_message_;

  std::string head_;         // the header section so far (bounded by max_header_bytes)
  size_t head_scanned_ = 0;  // head_[0, head_scanned_) holds no CRLFCRLF
  size_t line_scanned_ = 0;  // head_[0, line_scanned_) holds no CRLF (until the request line is parsed)
  size_t leading_crlf_ = 0;  // empty lines skipped before the request line
  bool leading_cr_ = false;  // a CR of a leading empty line was consumed
  size_t num_fields_ = 0;
  bool saw_host_ = false;
  bool saw_content_length_ = false;
  bool saw_transfer_encoding_ = false;
  bool absolute_form_ = false;  // the target carried the authority
  uint64_t content_length_ = 0;
  std::string transfer_encoding_;  // all Transfer-Encoding fields joined

  uint64_t body_remaining_ = 0;  // Content-Length bytes still to read, or the current chunk's
  size_t chunk_line_ = 0;        // bytes of the current chunk-size line
  size_t chunk_digits_ = 0;      // significant hex digits of the current chunk size
  bool chunk_any_digit_ = false;
  uint64_t chunk_size_ = 0;
  size_t chunk_ext_total_ = 0;
  bool chunk_ext_seen_semicolon_ = false;
  std::string trailer_line_;  // the current trailer line (bounded by max_header_bytes)
  size_t trailer_bytes_ = 0;
};

// Case-insensitive ASCII comparison (HTTP tokens).
bool iequals(std::string_view a, std::string_view b);

}  // namespace peregrine::server
