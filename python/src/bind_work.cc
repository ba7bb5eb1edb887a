// Work handles (work.h). The Python layer wraps _C.Work in tdist.Work, which
// also keeps the operation's arrays alive and maps outputs back to the
// user's objects; this file gives it the blocking calls (GIL released) and a
// completion callback for Future.then().

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "tdist/errors.h"
#include "tdist/work.h"

namespace tdist::python {
namespace {

using Millis = std::chrono::milliseconds;

// True while Python code may still run: callbacks that fire on tdist's
// threads after the interpreter started shutting down are dropped.
bool interpreter_alive() {
  return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0;
}

// Holds a Python callable on a C++ thread; it is released under the GIL.
struct PyCallable {
  explicit PyCallable(py::object callable) : fn(callable.release().ptr()) {}
  ~PyCallable() {
    if (!interpreter_alive()) return;  // leaked on purpose: no GIL to take
    py::gil_scoped_acquire gil;
    Py_XDECREF(fn);
  }
  PyObject* fn;
};

}  // namespace

void bind_work(py::module_& m) {
  py::class_<Work, std::shared_ptr<Work>>(m, "Work",
                                          "Handle of one operation (low level; tdist.Work wraps it).")
      .def(py::init<std::string>(), py::arg("op"),
           "A pending handle for operation `op`, for backends written in Python; call finish().")
      .def("is_completed", &Work::is_completed, "True once finished, successfully or not.")
      .def("is_success", &Work::is_success, "True if finished without error; raises if still running.")
      .def(
          "exception", [](const Work& w) { return exception_object(w.exception()); },
          "The exception it failed with, or None.")
      .def(
          "wait",
          [](Work& w, std::optional<Millis> timeout) {
            py::gil_scoped_release release;
            return w.wait(timeout.value_or(Millis::max()));
          },
          py::arg("timeout") = py::none(),
          "Blocks (GIL released) until finished and raises its error; with a timeout, raises "
          "DistTimeoutError if it is still running then.")
      .def("source_rank", &Work::source_rank,
           "For a receive: the group rank the message came from (-1 before completion).")
      .def_property_readonly("op", &Work::op, "The operation's name.")
      .def(
          "finish",
          [](Work& w, py::object error) {
            std::exception_ptr ptr;
            if (!error.is_none()) ptr = std::make_exception_ptr(DistError(py::str(error)));
            w.finish(ptr);
          },
          py::arg("error") = py::none(),
          "Completes the operation (for backends written in Python); `error` (an exception or "
          "message) makes it fail with DistError.")
      .def(
          "add_done_callback",
          [](const Work& w, py::function fn) {
            auto callable = std::make_shared<PyCallable>(std::move(fn));
            // Runs on the thread that completes the work, or here if it already has.
            w.get_future()->then([callable](Future&) {
              if (interpreter_alive()) {
                py::gil_scoped_acquire gil;
                try {
                  py::reinterpret_borrow<py::object>(callable->fn)();
                } catch (py::error_already_set& e) {
                  e.discard_as_unraisable("tdist Work done callback");
                }
              }
              return std::vector<Tensor>{};
            });
          },
          py::arg("fn"), "Calls fn() once the work completes (on tdist's thread, with the GIL).");
}

}  // namespace tdist::python
