// Errors inside Peregrine: the public peregrine::Error (include/peregrine/error.h) plus PEREGRINE_CHECK for
// invariants. Errors are thrown inside a thread and caught at thread and API boundaries (engine loop, server
// handlers, CLI main); no exception crosses a thread boundary.
#pragma once

#include <string>

#include "peregrine/error.h"

namespace peregrine {

// Throws Error(kInternal) when an invariant fails; used for programming errors, not user input.
#define PEREGRINE_CHECK(cond, msg)                                                                   \
  do {                                                                                               \
    if (!(cond)) throw ::peregrine::Error(::peregrine::ErrorCode::kInternal,                         \
                                          std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                              ": check failed: " #cond ": " + std::string(msg));     \
  } while (0)

}  // namespace peregrine
