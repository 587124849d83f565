// HttpRequestParser (see http_parser.h). Every phase consumes what it is given or stops at its byte limit: the
// header section is buffered up to max_header_bytes, everything after it (bodies, chunk-size lines, chunk
// extensions, trailers) is handled a byte or a block at a time with its own counter, so no input makes the parser
// hold more than max_header_bytes + max_body_bytes, or scan a byte twice (apart from the header section, which is
// split into lines once it is complete).
#include "server/http_parser.h"

#include <algorithm>

namespace peregrine::server {
namespace {

bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

// Field-value octets: HTAB, SP, VCHAR, obs-text (RFC 9110 5.5). NUL, CR, LF and other controls are refused.
bool is_field_char(unsigned char c) {
  return c == '\t' || (c >= 0x20 && c != 0x7f);
}

bool is_ows(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// host [":" port] as in RFC 9110 7.2 / RFC 3986: reg-name or IPv4 (unreserved, pct-encoded, sub-delims), or an
// IP literal in brackets; the port is digits. Empty is allowed (a target without an authority).
bool valid_host(std::string_view v) {
  if (v.empty()) return true;
  std::string_view port;
  if (v.front() == '[') {
    const size_t close = v.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (char c : v.substr(1, close - 1)) {
      if (!(hex_value(static_cast<unsigned char>(c)) >= 0 || c == ':' || c == '.')) return false;
    }
    std::string_view rest = v.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
    }
  } else {
    const size_t colon = v.find(':');
    const std::string_view host = v.substr(0, colon);
    if (host.empty()) return false;
    for (char c : host) {
      const unsigned char u = static_cast<unsigned char>(c);
      const bool ok = (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
                      std::string_view("-._~%!$&'()*+,;=").find(c) != std::string_view::npos;
      if (!ok) return false;
    }
    if (colon != std::string_view::npos) port = v.substr(colon + 1);
  }
  if (port.size() > 5) return false;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

void HttpRequestParser::reset() {
  const HttpParserLimits limits = limits_;
  *this = HttpRequestParser(limits);
}

HttpRequest HttpRequestParser::take() {
  HttpRequest out = std::move(request_);
  reset();
  return out;
}

void HttpRequestParser::fail(int status, std::string message) {
  if (state_ != State::kIncomplete) return;
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

size_t HttpRequestParser::fail_at(size_t consumed, int status, std::string message) {
  fail(status, std::move(message));
  return consumed;
}

void HttpRequestParser::complete() {
  state_ = State::kComplete;
  phase_ = Phase::kDone;
  head_.clear();
  head_.shrink_to_fit();
}

size_t HttpRequestParser::feed(std::string_view data) {
  size_t used = 0;
  while (used < data.size() && state_ == State::kIncomplete) {
    const std::string_view rest = data.substr(used);
    switch (phase_) {
      case Phase::kHead:
        used += feed_head(rest);
        break;
      case Phase::kBody:
      case Phase::kChunkData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(rest.size(), body_remaining_));
        request_.body.append(rest.data(), n);
        body_remaining_ -= n;
        used += n;
        if (body_remaining_ == 0) {
          if (phase_ == Phase::kBody)
            complete();
          else
            phase_ = Phase::kChunkDataCr;
        }
        break;
      }
      case Phase::kTrailer:
        used += feed_trailer(rest);
        break;
      case Phase::kDone:
        return used;
      default: {
        // The chunk framing, a byte at a time.
        const unsigned char c = static_cast<unsigned char>(rest.front());
        ++used;
        if (phase_ == Phase::kChunkDataCr) {
          if (c != '\r') return fail_at(used, 400, "malformed chunked body: chunk data is not followed by CRLF");
          phase_ = Phase::kChunkDataLf;
          break;
        }
        if (phase_ == Phase::kChunkDataLf || phase_ == Phase::kChunkSizeLf) {
          if (c != '\n') return fail_at(used, 400, "malformed chunked body: CR without LF");
          if (phase_ == Phase::kChunkDataLf) {
            phase_ = Phase::kChunkSize;
            chunk_line_ = chunk_digits_ = 0;
            chunk_any_digit_ = chunk_ext_seen_semicolon_ = false;
            chunk_size_ = 0;
            break;
          }
          if (chunk_size_ == 0) {
            phase_ = Phase::kTrailer;
            break;
          }
          if (chunk_size_ > limits_.max_body_bytes - request_.body.size()) {
            return fail_at(used, 413,
                           "request body exceeds the limit of " + std::to_string(limits_.max_body_bytes) + " bytes");
          }
          body_remaining_ = chunk_size_;
          phase_ = Phase::kChunkData;
          break;
        }
        if (++chunk_line_ > limits_.max_chunk_line) {
          return fail_at(used, 400,
                         "malformed chunked body: a chunk-size line is longer than " +
                             std::to_string(limits_.max_chunk_line) + " bytes");
        }
        if (phase_ == Phase::kChunkSize) {
          const int v = hex_value(c);
          if (v >= 0) {
            if (v != 0 || chunk_digits_ > 0) {
              // Leading zeros are not significant; 15 hex digits already exceed any body limit.
              if (++chunk_digits_ > 15) {
                return fail_at(
                    used, 413,
                    "request body exceeds the limit of " + std::to_string(limits_.max_body_bytes) + " bytes");
              }
              chunk_size_ = chunk_size_ * 16 + static_cast<uint64_t>(v);
            }
            chunk_any_digit_ = true;
            break;
          }
          if (!chunk_any_digit_) return fail_at(used, 400, "malformed chunked body: expected a hexadecimal chunk size");
          if (c == '\r') {
            phase_ = Phase::kChunkSizeLf;
            break;
          }
          if (c == ';' || c == ' ' || c == '\t') {
            phase_ = Phase::kChunkExt;
            chunk_ext_seen_semicolon_ = c == ';';
            ++chunk_ext_total_;
            break;
          }
          return fail_at(used, 400, "malformed chunked body: invalid character after the chunk size");
        }
        // Phase::kChunkExt: BWS ";" name [= value] ..., checked for its characters and counted, never kept.
        if (c == '\r') {
          if (!chunk_ext_seen_semicolon_)
            return fail_at(used, 400, "malformed chunked body: whitespace after the chunk size");
          phase_ = Phase::kChunkSizeLf;
          break;
        }
        if (++chunk_ext_total_ > limits_.max_chunk_ext_bytes) {
          return fail_at(used, 400,
                         "malformed chunked body: chunk extensions exceed " +
                             std::to_string(limits_.max_chunk_ext_bytes) + " bytes");
        }
        if (!is_field_char(c))
          return fail_at(used, 400, "malformed chunked body: control character in a chunk extension");
        if (!chunk_ext_seen_semicolon_) {
          if (c == ';')
            chunk_ext_seen_semicolon_ = true;
          else if (!is_ows(static_cast<char>(c)))
            return fail_at(used, 400, "malformed chunked body: invalid chunk extension");
        }
        break;
      }
    }
  }
  return used;
}

size_t HttpRequestParser::feed_head(std::string_view data) {
  size_t used = 0;
  // Empty lines before the request line are skipped (a few of them).
  while (head_.empty() && used < data.size()) {
    const char c = data[used];
    if (leading_cr_) {
      if (c != '\n') return fail_at(used + 1, 400, "malformed HTTP request: CR without LF");
      leading_cr_ = false;
      if (++leading_crlf_ > limits_.max_leading_empty_lines) {
        return fail_at(used + 1, 400, "malformed HTTP request: too many empty lines before the request line");
      }
      ++used;
    } else if (c == '\r') {
      leading_cr_ = true;
      ++used;
    } else if (c == '\n') {
      return fail_at(used + 1, 400, "malformed HTTP request: lines must end with CRLF");
    } else {
      break;
    }
  }
  if (used == data.size()) return used;
  started_ = true;
  // Take at most one byte beyond the limit, so going over it shows.
  const size_t room = limits_.max_header_bytes + 1 - std::min(head_.size(), limits_.max_header_bytes);
  const std::string_view chunk = data.substr(used, std::min(room, data.size() - used));
  const size_t old_size = head_.size();
  head_.append(chunk.data(), chunk.size());
  // The end of the header section, if it is in; bytes after it belong to the body or the next request and are
  // not looked at here.
  const size_t from = head_scanned_ >= 3 ? head_scanned_ - 3 : 0;
  const size_t end = head_.find("\r\n\r\n", from);
  const size_t head_end = end == std::string::npos ? head_.size() : end + 4;
  // Checks run in byte order, so the outcome does not depend on how the bytes were split into reads: CR and LF
  // only as pairs (no bare CR or LF) over the new bytes, the request line as soon as its CRLF is in (garbage
  // fails without waiting for more), its length limit when no CRLF came in time.
  size_t bad = 0;  // index just past an offending byte
  auto crlf_ok = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const char c = head_[i];
      const char prev = i > 0 ? head_[i - 1] : '\0';
      if ((c == '\n' && prev != '\r') || (prev == '\r' && c != '\n')) {
        bad = i + 1;
        return false;
      }
    }
    return true;
  };
  auto crlf_error = [&] {
    const bool lf = head_[bad - 1] == '\n';
    return fail_at(used + (bad - old_size), 400,
                   lf ? "malformed HTTP request: lines must end with CRLF" : "malformed HTTP request: CR without LF");
  };
  size_t checked = old_size;
  if (request_.method.empty()) {
    const size_t line_end = head_.find("\r\n", line_scanned_ > 0 ? line_scanned_ - 1 : 0);
    // A line longer than the limit shows when max + 2 bytes hold no CRLF (the byte at max may be its CR).
    if (line_end == std::string::npos || line_end > limits_.max_request_line) {
      const size_t shows_at = limits_.max_request_line + 2;
      if (!crlf_ok(old_size, std::min(head_.size(), shows_at))) return crlf_error();
      line_scanned_ = head_.size();
      if (head_.size() >= shows_at) {
        return fail_at(used + chunk.size(), 414,
                       "the request line exceeds " + std::to_string(limits_.max_request_line) + " bytes");
      }
      return used + chunk.size();  // no CRLF yet, so no end of the header section either
    }
    if (!crlf_ok(old_size, std::min(line_end + 2, head_end))) return crlf_error();
    if (!parse_request_line(std::string_view(head_).substr(0, line_end))) return used + chunk.size();
    checked = std::max(old_size, line_end + 2);
  }
  if (!crlf_ok(checked, head_end)) return crlf_error();
  if (end == std::string::npos) {
    head_scanned_ = head_.size();
    if (head_.size() > limits_.max_header_bytes) {
      return fail_at(used + chunk.size(), 431,
                     "request headers exceed the limit of " + std::to_string(limits_.max_header_bytes) + " bytes");
    }
    return used + chunk.size();
  }
  const size_t extra = head_.size() - head_end;  // bytes of the body or of the next request
  head_.resize(head_end);
  if (head_.size() > limits_.max_header_bytes) {
    return fail_at(used + chunk.size() - extra, 431,
                   "request headers exceed the limit of " + std::to_string(limits_.max_header_bytes) + " bytes");
  }
  parse_head();
  return used + chunk.size() - extra;
}

bool HttpRequestParser::parse_request_line(std::string_view line) {
  if (line.size() > limits_.max_request_line) {
    fail(414, "the request line exceeds " + std::to_string(limits_.max_request_line) + " bytes");
    return false;
  }
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) {
    fail(400, "malformed HTTP request line");
    return false;
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || method.size() > 32 ||
      !std::all_of(method.begin(), method.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); })) {
    fail(400, "malformed HTTP request line: invalid method");
    return false;
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
      version[5] > '9' || version[7] < '0' || version[7] > '9') {
    fail(400, "malformed HTTP request line: invalid HTTP version");
    return false;
  }
  if (version[5] != '1') {
    fail(505, "HTTP version not supported (HTTP/1.0 and HTTP/1.1 are)");
    return false;
  }
  request_.version = version[7] == '0' ? 10 : 11;
  request_.method = std::string(method);
  if (!parse_target(target)) return false;
  return true;
}

bool HttpRequestParser::parse_target(std::string_view target) {
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
        const unsigned char u = static_cast<unsigned char>(c);
        return u > 0x20 && u < 0x7f;
      })) {
    fail(400, "malformed HTTP request line: invalid request target");
    return false;
  }
  if (target.find('#') != std::string_view::npos) {
    fail(400, "malformed HTTP request line: a request target has no fragment");
    return false;
  }
  request_.target = std::string(target);
  std::string_view path_and_query;
  if (target.front() == '/') {
    path_and_query = target;
  } else if (target == "*" && request_.method == "OPTIONS") {
    request_.path = "*";
    return true;
  } else if (request_.method == "CONNECT") {
    if (!valid_host(target)) {
      fail(400, "malformed HTTP request line: invalid authority");
      return false;
    }
    request_.authority = std::string(target);
    absolute_form_ = true;
    return true;
  } else {
    const size_t scheme_end = target.find("://");
    const std::string_view scheme =
        scheme_end == std::string_view::npos ? std::string_view() : target.substr(0, scheme_end);
    if (!iequals(scheme, "http") && !iequals(scheme, "https")) {
      fail(400, "malformed HTTP request line: invalid request target");
      return false;
    }
    const std::string_view rest = target.substr(scheme_end + 3);
    const size_t auth_end = std::min(rest.find('/'), rest.find('?'));
    const std::string_view authority = rest.substr(0, auth_end);
    if (authority.empty() || authority.find('@') != std::string_view::npos || !valid_host(authority)) {
      fail(400, "malformed HTTP request line: invalid authority in the request target");
      return false;
    }
    request_.authority = std::string(authority);
    absolute_form_ = true;
    path_and_query = auth_end == std::string_view::npos ? std::string_view() : rest.substr(auth_end);
  }
  const size_t q = path_and_query.find('?');
  request_.path = std::string(path_and_query.substr(0, q));
  if (request_.path.empty()) request_.path.push_back('/');  // NOTE: not = "/" (a GCC 12 -Wrestrict false positive)
  if (q != std::string_view::npos) request_.query = std::string(path_and_query.substr(q + 1));
  return true;
}

void HttpRequestParser::parse_head() {
  std::string_view rest(head_);
  rest.remove_suffix(2);  // the empty line's CRLF
  const size_t first = rest.find("\r\n");
  rest.remove_prefix(first + 2);  // the request line, parsed already
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    if (!parse_field(line)) return;
  }
  finish_fields();
}

bool HttpRequestParser::check_field_line(std::string_view line, std::string_view& name, std::string_view& value) {
  if (++num_fields_ > limits_.max_header_fields) {
    fail(431, "more than " + std::to_string(limits_.max_header_fields) + " header fields");
    return false;
  }
  if (is_ows(line.front())) {
    fail(400, "malformed header field: line folding (obs-fold) is not allowed");
    return false;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    fail(400, "malformed header field: expected name: value");
    return false;
  }
  name = line.substr(0, colon);
  if (is_ows(name.back())) {
    fail(400, "malformed header field: whitespace before the colon");
    return false;
  }
  if (!std::all_of(name.begin(), name.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); })) {
    fail(400, "malformed header field: invalid character in a field name");
    return false;
  }
  value = trim_ows(line.substr(colon + 1));
  if (!std::all_of(value.begin(), value.end(), [](char c) { return is_field_char(static_cast<unsigned char>(c)); })) {
    fail(400, "malformed header field: control character in a field value");
    return false;
  }
  return true;
}

bool HttpRequestParser::parse_field(std::string_view line) {
  std::string_view name, value;
  if (!check_field_line(line, name, value)) return false;
  const std::string lname = lower(name);
  if (lname == "host") {
    if (saw_host_) {
      fail(400, "more than one Host header field");
      return false;
    }
    saw_host_ = true;
    if (!valid_host(value)) {
      fail(400, "invalid Host header field");
      return false;
    }
  } else if (lname == "content-length") {
    // A list of identical values ("5, 5") is one length; anything else that is not digits is an error.
    std::string_view list = value;
    bool any = false;
    while (true) {
      const size_t comma = list.find(',');
      const std::string_view item = trim_ows(list.substr(0, comma));
      if (item.empty() || !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        fail(400, "invalid Content-Length");
        return false;
      }
      uint64_t v = 0;
      for (char c : item) {
        const uint64_t d = static_cast<uint64_t>(c - '0');
        if (v > (UINT64_MAX - d) / 10) {
          fail(413, "request body exceeds the limit of " + std::to_string(limits_.max_body_bytes) + " bytes");
          return false;
        }
        v = v * 10 + d;
      }
      if ((saw_content_length_ || any) && v != content_length_) {
        fail(400, "conflicting Content-Length values");
        return false;
      }
      content_length_ = v;
      any = true;
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
    saw_content_length_ = true;
    request_.headers[lname] = std::to_string(content_length_);
    return true;
  } else if (lname == "transfer-encoding") {
    saw_transfer_encoding_ = true;
    if (!transfer_encoding_.empty()) transfer_encoding_ += ",";
    transfer_encoding_ += value;
  }
  auto [it, inserted] = request_.headers.try_emplace(lname, value);
  if (!inserted) {
    it->second += ", ";
    it->second += value;
  }
  return true;
}

bool HttpRequestParser::finish_fields() {
  const bool http11 = request_.version == 11;
  if (http11 && !saw_host_) {
    fail(400, "missing Host header field (required in HTTP/1.1)");
    return false;
  }
  if (!absolute_form_) {
    if (const std::string* host = request_.header("host")) request_.authority = *host;
  }
  // Connection options.
  bool close = false, keep_alive = false;
  if (const std::string* conn = request_.header("connection")) {
    std::string_view list = *conn;
    while (!list.empty()) {
      const size_t comma = list.find(',');
      const std::string_view token = trim_ows(list.substr(0, comma));
      if (iequals(token, "close")) close = true;
      if (iequals(token, "keep-alive")) keep_alive = true;
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  request_.keep_alive = http11 ? !close : keep_alive && !close;
  if (const std::string* expect = request_.header("expect")) {
    if (http11) {
      if (!iequals(trim_ows(*expect), "100-continue")) {
        fail(417, "unsupported expectation (only 100-continue is)");
        return false;
      }
      request_.expects_continue = true;
    }
  }
  if (saw_transfer_encoding_) {
    if (!http11) {
      fail(400, "Transfer-Encoding in an HTTP/1.0 request");
      return false;
    }
    if (saw_content_length_) {
      fail(400, "both Content-Length and Transfer-Encoding");
      return false;
    }
    std::string_view list = transfer_encoding_;
    std::string last, other;
    int chunked = 0;
    while (true) {
      const size_t comma = list.find(',');
      const std::string_view coding = trim_ows(list.substr(0, comma));
      if (!coding.empty()) {
        last = lower(coding);
        if (last == "chunked")
          ++chunked;
        else if (other.empty())
          other = last;
      }
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
    if (last.empty()) {
      fail(400, "empty Transfer-Encoding");
      return false;
    }
    if (chunked > 1) {
      fail(400, "chunked is applied more than once in Transfer-Encoding");
      return false;
    }
    if (last != "chunked") {
      fail(400, "the final Transfer-Encoding is not chunked");
      return false;
    }
    if (!other.empty()) {
      fail(501, "transfer coding '" + other.substr(0, 32) + "' is not supported (only chunked is)");
      return false;
    }
    phase_ = Phase::kChunkSize;
    return true;
  }
  if (saw_content_length_ && content_length_ > 0) {
    if (content_length_ > limits_.max_body_bytes) {
      fail(413, "request body exceeds the limit of " + std::to_string(limits_.max_body_bytes) + " bytes");
      return false;
    }
    // Grown as bytes arrive: a declared length reserves nothing the client has not sent.
    request_.body.reserve(static_cast<size_t>(std::min<uint64_t>(content_length_, 64 * 1024)));
    body_remaining_ = content_length_;
    phase_ = Phase::kBody;
    return true;
  }
  complete();  // no body (RFC 9112 6.3: neither Content-Length nor Transfer-Encoding means none)
  return true;
}

size_t HttpRequestParser::feed_trailer(std::string_view data) {
  size_t used = 0;
  while (used < data.size()) {
    const char c = data[used++];
    if (++trailer_bytes_ > limits_.max_header_bytes) {
      return fail_at(used, 431,
                     "the chunked trailer section exceeds " + std::to_string(limits_.max_header_bytes) + " bytes");
    }
    if (!trailer_line_.empty() && trailer_line_.back() == '\r') {
      if (c != '\n') return fail_at(used, 400, "malformed chunked trailer: CR without LF");
      trailer_line_.pop_back();
      if (trailer_line_.empty()) {
        complete();
        return used;
      }
      // A trailer field is checked like a header field, then dropped (RFC 9110 6.5.1: not merged).
      std::string_view name, value;
      const bool ok = check_field_line(trailer_line_, name, value);
      trailer_line_.clear();
      if (!ok) return used;
      continue;
    }
    if (c == '\n') return fail_at(used, 400, "malformed chunked trailer: lines must end with CRLF");
    trailer_line_ += c;
  }
  return used;
}

}  // namespace peregrine::server
