// The reference backend: plain loops with double accumulation over host memory, any float dtype.
// It is the oracle every other backend is tested against, so it favours clarity over speed.
#pragma once

#include <memory>

#include "ops/backend.h"

namespace peregrine::ops {

std::unique_ptr<Backend> make_ref_backend();

}  // namespace peregrine::ops
