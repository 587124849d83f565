// OpenAI-shaped errors for the HTTP API: {"error": {"message", "type", "param", "code"}}. Handlers throw
// HttpError (or peregrine::Error, mapped by its code) and the router turns either into a response.
#pragma once

#include <exception>
#include <optional>
#include <string>

#include "core/status.h"

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
// The JSON body (no trailing newline).
std::string error_body(int status, const std::string& message, const std::optional<std::string>& param = std::nullopt);

}  // namespace peregrine::server
