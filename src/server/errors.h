// OpenAI-shaped errors for the HTTP API: {"error": {"message", "type", "param", "code"}}. Handlers throw
// HttpError (or peregrine::Error, mapped by its code) and the router turns either into a response.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "peregrine/error.h"

namespace peregrine::server {

class HttpError : public std::exception {
 public:
  HttpError(int status, std::string message, std::optional<std::string> param = std::nullopt)
      : status_(status), message_(std::move(message)), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& message() const { return message_; }
  const std::optional<std::string>& param() const { return param_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  int status_;
  std::string message_;
  std::optional<std::string> param_;
};

// 400 with the offending field named in `param` and in the message.
[[noreturn]] void throw_bad_field(const std::string& field, const std::string& problem);

int http_status_for(ErrorCode code);
// "BadRequestError", "AuthenticationError", "NotFoundError", ... (vLLM's names).
const char* error_type_for(int status);
// User input for an error message: at most max_bytes of it (cut on a UTF-8 boundary, "..." marking the cut), so
// an error never echoes a whole hostile request back.
std::string quote_input(std::string_view input, size_t max_bytes = 64);

// The JSON body (no trailing newline). Messages longer than 1024 bytes are cut (a last guard against echoing
// input that was not passed through quote_input).
std::string error_body(int status, const std::string& message, const std::optional<std::string>& param = std::nullopt);

}  // namespace peregrine::server
