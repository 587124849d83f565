// Python <-> public API conversions and the exception types (see convert.h).
#include "convert.h"

#include <cmath>

namespace peregrine::python {
namespace {

struct ErrorTypes {
  PyObject* base = nullptr;              // PeregrineError(RuntimeError)
  PyObject* invalid_argument = nullptr;  // InvalidArgumentError(PeregrineError, ValueError)
  PyObject* not_found = nullptr;         // NotFoundError(PeregrineError, FileNotFoundError)
  PyObject* unsupported = nullptr;       // UnsupportedError(PeregrineError, ValueError)
};
ErrorTypes g_errors;  // created once at import, never freed (module lifetime)

const char* code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kIoError: return "io_error";
    case ErrorCode::kFormatError: return "format_error";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kInternal: return "internal";
  }
  return "internal";
}

PyObject* type_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return g_errors.invalid_argument;
    case ErrorCode::kNotFound: return g_errors.not_found;
    case ErrorCode::kUnsupported: return g_errors.unsupported;
    default: return g_errors.base;
  }
}

PyObject* new_type(py::module_& module, const char* name, const char* doc, py::tuple bases) {
  const std::string qualified = std::string("peregrine.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  module.add_object(name, py::handle(type));  // the module takes a reference; g_errors keeps ours
  return type;
}

void to_json_into(py::handle value, const std::string& where, nlohmann::ordered_json& out, int depth) {
  if (depth > 64) throw py::type_error(where + ": nested deeper than 64 levels");
  if (value.is_none()) {
    out = nullptr;
  } else if (PyBool_Check(value.ptr())) {
    out = value.cast<bool>();
  } else if (PyLong_Check(value.ptr())) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow != 0) throw py::type_error(where + ": integer out of the 64-bit range");
    out = static_cast<int64_t>(v);
  } else if (PyFloat_Check(value.ptr())) {
    const double v = value.cast<double>();
    if (!std::isfinite(v)) throw py::type_error(where + ": JSON has no NaN or infinity");
    out = v;
  } else if (PyUnicode_Check(value.ptr())) {
    out = value.cast<std::string>();
  } else if (PyDict_Check(value.ptr())) {
    out = nlohmann::ordered_json::object();
    for (auto item : py::reinterpret_borrow<py::dict>(value)) {
      if (!PyUnicode_Check(item.first.ptr())) {
        throw py::type_error(where + ": dictionary keys must be strings, got " +
                             std::string(py::str(py::type::handle_of(item.first).attr("__name__"))));
      }
      const std::string key = item.first.cast<std::string>();
      to_json_into(item.second, where + "." + key, out[key], depth + 1);
    }
  } else if (PyList_Check(value.ptr()) || PyTuple_Check(value.ptr())) {
    out = nlohmann::ordered_json::array();
    size_t i = 0;
    for (py::handle item : value) {
      nlohmann::ordered_json element;
      to_json_into(item, where + "[" + std::to_string(i++) + "]", element, depth + 1);
      out.push_back(std::move(element));
    }
  } else {
    throw py::type_error(where + ": " + std::string(py::str(py::type::handle_of(value).attr("__name__"))) +
                         " is not a JSON value (use dict, list, str, int, float, bool or None)");
  }
}

}  // namespace

nlohmann::ordered_json to_json(py::handle value, const std::string& where) {
  nlohmann::ordered_json out;
  to_json_into(value, where, out, 0);
  return out;
}

py::str text(std::string_view bytes) {
  PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

void register_errors(py::module_& module) {
  py::handle runtime_error(PyExc_RuntimeError);
  g_errors.base = new_type(module, "PeregrineError",
                           "An error from the Peregrine engine; `code` names its kind (\"invalid_argument\", "
                           "\"not_found\", \"unsupported\", \"resource_exhausted\", \"unavailable\", ...).",
                           py::make_tuple(runtime_error));
  py::handle base(g_errors.base);
  g_errors.invalid_argument = new_type(module, "InvalidArgumentError",
                                       "A request, parameter or option the engine refused (also a ValueError).",
                                       py::make_tuple(base, py::handle(PyExc_ValueError)));
  g_errors.not_found = new_type(module, "NotFoundError",
                                "A model folder or file that does not exist (also a FileNotFoundError).",
                                py::make_tuple(base, py::handle(PyExc_FileNotFoundError)));
  g_errors.unsupported = new_type(module, "UnsupportedError",
                                  "Well-formed but not implemented by Peregrine yet (also a ValueError).",
                                  py::make_tuple(base, py::handle(PyExc_ValueError)));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* type = type_for(e.code());
      try {
        py::object error = py::reinterpret_borrow<py::object>(type)(e.message());
        error.attr("code") = code_name(e.code());
        PyErr_SetObject(type, error.ptr());
      } catch (py::error_already_set& nested) {
        nested.restore();
      }
    }
  });
}

}  // namespace peregrine::python
