// The one error type of Peregrine: a code plus a message naming the offending file, field or parameter.
// Errors are thrown as peregrine::Error inside a thread and caught at thread and API boundaries
// (engine loop, server handlers, CLI main); no exception crosses a thread boundary.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <utility>

namespace peregrine {

enum class ErrorCode {
  kInvalidArgument,    // a caller passed something wrong (bad flag, bad request field)
  kNotFound,           // a file, tensor, model or request that does not exist
  kIoError,            // the OS refused a read, write or map
  kFormatError,        // a file exists but its content is malformed
  kUnsupported,        // well-formed but not something we implement (architecture, dtype)
  kResourceExhausted,  // out of memory, KV blocks, queue slots
  kUnavailable,        // temporarily unable (shutting down, queue full)
  kInternal,           // a bug: an invariant did not hold
};

std::string_view error_code_name(ErrorCode code);

class Error : public std::exception {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  ErrorCode code_;
  std::string message_;
};

// Throws Error(kInternal) when an invariant fails; used for programming errors, not user input.
#define PEREGRINE_CHECK(cond, msg)                                                                   \
  do {                                                                                               \
    if (!(cond)) throw ::peregrine::Error(::peregrine::ErrorCode::kInternal,                         \
                                          std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                              ": check failed: " #cond ": " + std::string(msg));     \
  } while (0)

}  // namespace peregrine
