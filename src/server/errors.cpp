// OpenAI-shaped error bodies and the mapping from peregrine::ErrorCode to HTTP statuses (see errors.h).
#include "server/errors.h"

#include <nlohmann/json.hpp>

namespace peregrine::server {

void throw_bad_field(const std::string& field, const std::string& problem) {
  throw HttpError(400, field + ": " + problem, field);
}

int http_status_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return 400;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kFormatError: return 400;
    case ErrorCode::kUnsupported: return 400;
    case ErrorCode::kResourceExhausted: return 503;
    case ErrorCode::kUnavailable: return 503;
    case ErrorCode::kIoError: return 500;
    case ErrorCode::kInternal: return 500;
  }
  return 500;
}

const char* error_type_for(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 408: return "RequestTimeoutError";
    case 411: return "LengthRequiredError";
    case 413: return "RequestEntityTooLargeError";
    case 414: return "URITooLongError";
    case 415: return "UnsupportedMediaTypeError";
    case 417: return "ExpectationFailedError";
    case 421: return "MisdirectedRequestError";
    case 422: return "UnprocessableEntityError";
    case 431: return "RequestHeaderFieldsTooLargeError";
    case 501: return "NotImplementedError";
    case 503: return "ServiceUnavailableError";
    case 505: return "HTTPVersionNotSupportedError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

std::string quote_input(std::string_view input, size_t max_bytes) {
  if (input.size() <= max_bytes) return std::string(input);
  size_t cut = max_bytes;
  // Back up over UTF-8 continuation bytes so a character is not split.
  while (cut > 0 && (static_cast<unsigned char>(input[cut]) & 0xC0) == 0x80) --cut;
  return std::string(input.substr(0, cut)) + "...";
}

std::string error_body(int status, const std::string& message, const std::optional<std::string>& param) {
  constexpr size_t kMaxMessage = 1024;
  nlohmann::ordered_json e;
  e["message"] = message.size() > kMaxMessage ? quote_input(message, kMaxMessage) : message;
  e["type"] = error_type_for(status);
  e["param"] = param ? nlohmann::ordered_json(*param) : nlohmann::ordered_json(nullptr);
  e["code"] = status;
  nlohmann::ordered_json body;
  body["error"] = std::move(e);
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace peregrine::server
