// peregrine::Error, the one error type of Peregrine: a code plus a message naming the offending file, field or
// parameter. Every public call throws it (and only it) for bad input, missing files and refused work; it is
// caught at thread and API boundaries (engine loop, server handlers, CLI main); none crosses a thread.
#pragma once

#include <exception>
#include <string>
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

class Error : public std::exception {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  // `field`: the request or config field at fault (e.g. "top_p"), for APIs that report it apart (OpenAI `param`).
  Error(ErrorCode code, std::string message, std::string field)
      : code_(code), message_(std::move(message)), field_(std::move(field)) {}
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& field() const noexcept { return field_; }  // empty when not about one field
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  ErrorCode code_;
  std::string message_;
  std::string field_;
};

}  // namespace peregrine
