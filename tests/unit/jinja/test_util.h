// Helpers for the Jinja unit tests: render a template string with a JSON context, and expect an error whose
// message contains given text.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja/template.h"

namespace peregrine::jinja::testing {

inline std::string render(const std::string& source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object(),
                          const RenderOptions& options = {}) {
  return Template(source).render(context, options);
}

// Runs fn and returns the peregrine::Error it throws (fails the test when it does not throw).
template <typename Fn>
Error capture_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a peregrine::Error";
  return Error(ErrorCode::kInternal, "no error");
}

inline Error render_error(const std::string& source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object(),
                          const RenderOptions& options = {}) {
  return capture_error([&] { render(source, context, options); });
}

}  // namespace peregrine::jinja::testing
