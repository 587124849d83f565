// libFuzzer target over the server's input boundary: the HTTP/1.1 request parser (server/http_parser.h) and the
// request-JSON parsing behind it (server/request_parsing.h: the body, the sampling fields of both endpoints,
// messages, tools, the model check). Built and run by tests/fuzz/http_fuzz.sh (clang, ASan + UBSan).
//
// The first input byte picks what the rest is:
//   0  raw bytes on one connection: parsed into as many requests as they hold, fed at once, and again in pieces
//      whose sizes come from the byte itself; both runs must agree request by request (state, status, method,
//      path, headers, body) and every complete request must be within the limits; a complete request's body
//      goes through the JSON parsing as well
//   1  a request body: the JSON parsing only
// Only the errors the server maps to a 4xx (HttpError, peregrine::Error, nlohmann::json::exception) may leave
// the JSON parsing; anything else (std::out_of_range, std::length_error, ...) escapes and is reported as a crash.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/errors.h"
#include "server/http_parser.h"
#include "server/request_parsing.h"

using namespace peregrine;
using namespace peregrine::server;

namespace {

[[noreturn]] void violated(const char* what) {
  __builtin_printf("invariant violated: %s\n", what);
  std::abort();
}

struct Outcome {
  HttpRequestParser::State state;
  int status = 0;
  HttpRequest request;
};

HttpParserLimits fuzz_limits() {
  HttpParserLimits l;
  l.max_header_bytes = 4096;  // small, so the fuzzer reaches every limit
  l.max_request_line = 1024;
  l.max_header_fields = 32;
  l.max_body_bytes = 8192;
  l.max_chunk_line = 64;
  l.max_chunk_ext_bytes = 256;
  return l;
}

// Parses every request in `bytes`, feeding pieces of the sizes `piece(i)` gives.
template <typename Piece>
std::vector<Outcome> parse_all(std::string_view bytes, Piece piece) {
  std::vector<Outcome> out;
  const HttpParserLimits limits = fuzz_limits();
  HttpRequestParser p(limits);
  size_t off = 0, i = 0;
  while (off < bytes.size()) {
    const size_t n = std::min(piece(i++), bytes.size() - off);
    const size_t used = p.feed(bytes.substr(off, n));
    if (used > n) violated("feed consumed more than it was given");
    if (used < n && p.state() == HttpRequestParser::State::kIncomplete) violated("feed stopped early while incomplete");
    off += used;
    if (p.state() == HttpRequestParser::State::kError) {
      if (p.error_status() < 400 || p.error_status() > 505) violated("error status out of range");
      if (p.error_message().empty()) violated("error without a message");
      out.push_back({p.state(), p.error_status(), {}});
      return out;  // the server closes the connection here
    }
    if (p.state() == HttpRequestParser::State::kComplete) {
      HttpRequest r = p.take();
      if (r.body.size() > limits.max_body_bytes) violated("body over the limit");
      if (r.method.empty() || r.path.empty()) violated("complete request without method or path");
      size_t header_bytes = 0;
      for (const auto& [k, v] : r.headers) header_bytes += k.size() + v.size();
      if (header_bytes > limits.max_header_bytes) violated("headers over the limit");
      if (r.version != 10 && r.version != 11) violated("bad version");
      out.push_back({HttpRequestParser::State::kComplete, 0, std::move(r)});
    }
  }
  out.push_back({p.state(), 0, {}});  // the incomplete tail (or nothing)
  return out;
}

void parse_json_request(const std::string& body) {
  HttpRequest r;
  r.body = body;
  try {
    const Json json = parse_json_body(r);
    Fields f(json);
    for (Endpoint e : {Endpoint::kCompletions, Endpoint::kChat}) {
      try {
        ParsedSampling s = parse_sampling(f, SamplingParams{}, e);
        s.params.validate(32000);
      } catch (const HttpError&) {
      } catch (const Error&) {
      }
    }
    try {
      check_model(f, {"served", "other"});
    } catch (const HttpError&) {
    }
    if (const Json* m = f.get("messages")) {
      try {
        const Json n = normalize_messages(*m);
        if (!n.is_array()) violated("normalized messages are not a list");
      } catch (const HttpError&) {
      }
    }
    try {
      validate_tools(f.get("tools"));
    } catch (const HttpError&) {
    }
    if (const Json* p = f.get("prompt"); p && p->is_string()) (void)quote_input(p->get_ref<const std::string&>());
    (void)error_body(400, json.dump(-1, ' ', false, Json::error_handler_t::replace));
  } catch (const HttpError& e) {
    if (e.status() < 400 || e.status() > 599) violated("HttpError status out of range");
  } catch (const Error&) {
  } catch (const nlohmann::json::exception&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode % 2 == 1) {
    parse_json_request(std::string(input));
    return 0;
  }
  const auto whole = parse_all(input, [&](size_t) { return input.size(); });
  uint32_t seed = 0x9e3779b9u ^ mode;
  const auto pieces = parse_all(input, [&](size_t) {
    seed = seed * 1664525u + 1013904223u;
    return size_t{1} + (seed >> 24) % 17;
  });
  if (whole.size() != pieces.size()) violated("whole and piecewise parsing found different numbers of requests");
  for (size_t i = 0; i < whole.size(); ++i) {
    const Outcome& a = whole[i];
    const Outcome& b = pieces[i];
    if (a.state != b.state || a.status != b.status) violated("whole and piecewise parsing disagree on the outcome");
    if (a.request.method != b.request.method || a.request.path != b.request.path ||
        a.request.query != b.request.query || a.request.body != b.request.body ||
        a.request.headers != b.request.headers || a.request.authority != b.request.authority ||
        a.request.keep_alive != b.request.keep_alive) {
      violated("whole and piecewise parsing disagree on a request");
    }
  }
  for (const Outcome& o : whole) {
    if (o.state == HttpRequestParser::State::kComplete && !o.request.body.empty()) parse_json_request(o.request.body);
  }
  return 0;
}
