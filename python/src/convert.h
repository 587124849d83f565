// Conversions between Python objects and the public API's types for the `peregrine._core` extension: JSON-like
// Python values to nlohmann::ordered_json (chat messages, tools, template kwargs), text with invalid UTF-8
// replaced, and peregrine::Error to the package's exception types.
#pragma once

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "peregrine/error.h"

namespace peregrine::python {

namespace py = pybind11;

// dict (str keys, order kept), list/tuple, str, int, float, bool and None. Anything else raises TypeError naming
// `where` and the path inside it ("messages[0].content").
nlohmann::ordered_json to_json(py::handle value, const std::string& where);

// A Python str from bytes that may hold invalid UTF-8 (a token decoded alone): bad bytes become U+FFFD.
py::str text(std::string_view bytes);

// Creates the exception types (PeregrineError and its subclasses) in `module` and registers the translator
// from peregrine::Error.
void register_errors(py::module_& module);

}  // namespace peregrine::python
