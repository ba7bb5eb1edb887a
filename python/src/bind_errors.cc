// The exception classes of tdist, as Python classes, and the translation of
// tdist's C++ exceptions into them. The Python hierarchy mirrors
// include/tdist/errors.h:
//
//     RuntimeError
//       DistError
//         DistBackendError, DistNetworkError, DistStoreError, DistTimeoutError
//         DistInvalidArgument           (also a ValueError)
//         DistStoreTimeoutError         (DistStoreError and DistTimeoutError)
//         DistNetworkTimeoutError       (DistNetworkError and DistTimeoutError)

#include <string>

#include "bindings.h"
#include "tdist/errors.h"

namespace tdist::python {
namespace {

// The classes live as long as the process: they are created once and never
// freed, so no destructor runs after the interpreter is gone.
struct ErrorTypes {
  PyObject* dist = nullptr;
  PyObject* backend = nullptr;
  PyObject* network = nullptr;
  PyObject* store = nullptr;
  PyObject* timeout = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* store_timeout = nullptr;
  PyObject* network_timeout = nullptr;
};

ErrorTypes& types() {
  static auto* instance = new ErrorTypes;
  return *instance;
}

PyObject* make_type(py::module_& m, const char* name, const char* doc,
                    std::initializer_list<PyObject*> bases) {
  py::tuple base_tuple(bases.size());
  size_t i = 0;
  for (PyObject* base : bases) base_tuple[i++] = py::reinterpret_borrow<py::object>(base);
  std::string qualified = std::string("tdist.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(type));
  return type;  // the new reference is kept forever
}

// The Python class for a C++ exception: the most derived tdist class first,
// since the combined timeout errors are also their parents.
PyObject* type_of(std::exception_ptr error, std::string& what) {
  const ErrorTypes& t = types();
  try {
    std::rethrow_exception(error);
  } catch (const DistStoreTimeoutError& e) {
    what = e.what();
    return t.store_timeout;
  } catch (const DistNetworkTimeoutError& e) {
    what = e.what();
    return t.network_timeout;
  } catch (const DistInvalidArgument& e) {
    what = e.what();
    return t.invalid_argument;
  } catch (const DistBackendError& e) {
    what = e.what();
    return t.backend;
  } catch (const DistNetworkError& e) {
    what = e.what();
    return t.network;
  } catch (const DistStoreError& e) {
    what = e.what();
    return t.store;
  } catch (const DistTimeoutError& e) {
    what = e.what();
    return t.timeout;
  } catch (const DistError& e) {
    what = e.what();
    return t.dist;
  } catch (const std::exception& e) {
    what = e.what();
    return nullptr;
  } catch (...) {
    what = "unknown C++ exception";
    return nullptr;
  }
}

}  // namespace

py::object exception_object(std::exception_ptr error) {
  if (!error) return py::none();
  try {
    std::rethrow_exception(error);
  } catch (py::error_already_set& e) {
    return e.value();  // raised by Python code, e.g. a backend written in Python
  } catch (...) {
  }
  std::string what;
  PyObject* type = type_of(error, what);
  if (type == nullptr) type = PyExc_RuntimeError;
  return py::reinterpret_borrow<py::object>(type)(what);
}

void bind_errors(py::module_& m) {
  ErrorTypes& t = types();
  t.dist = make_type(m, "DistError",
                     "Base of every error tdist raises (a RuntimeError, as torch.distributed.DistError).",
                     {PyExc_RuntimeError});
  t.backend =
      make_type(m, "DistBackendError",
                "A backend-specific failure, e.g. an operation the backend does not support.", {t.dist});
  t.network =
      make_type(m, "DistNetworkError",
                "The network failed: a peer refused, reset or closed its connection, or died.", {t.dist});
  t.store = make_type(m, "DistStoreError",
                      "The key-value store failed: unreachable server, unsupported operation, ...", {t.dist});
  t.timeout =
      make_type(m, "DistTimeoutError", "A deadline passed before an operation could finish.", {t.dist});
  t.invalid_argument =
      make_type(m, "DistInvalidArgument", "Bad input, found before anything ran (also a ValueError).",
                {t.dist, PyExc_ValueError});
  t.store_timeout =
      make_type(m, "DistStoreTimeoutError", "A store operation ran out of time (a key that never came).",
                {t.store, t.timeout});
  t.network_timeout = make_type(m, "DistNetworkTimeoutError",
                                "A network operation ran out of time (a peer that stopped answering).",
                                {t.network, t.timeout});

  py::register_exception_translator([](std::exception_ptr error) {
    std::string what;
    PyObject* type = type_of(error, what);
    if (type == nullptr) std::rethrow_exception(error);  // pybind11's own translators
    PyErr_SetString(type, what.c_str());
  });
}

}  // namespace tdist::python
