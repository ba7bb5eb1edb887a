// The flight recorder (tdist/trace.h): tdist.dump_trace(), its JSON text, and
// the Chrome trace of several ranks' dumps (tdist.trace_calls).

#include <pybind11/stl.h>
#include "bindings.h"

#include "tdist/trace.h"

namespace tdist::python {

void bind_trace(py::module_& m) {
  m.def(
      "_dump_trace", [](const std::string& path) { return dump_trace(path); },
      py::arg("path") = std::string(), py::call_guard<py::gil_scoped_release>(),
      "Writes this process's flight recorder as JSON; returns the file written.");
  m.def("_trace_json", &trace_json, py::call_guard<py::gil_scoped_release>());
  m.def(
      "_chrome_trace", [](const std::vector<std::string>& dumps) { return chrome_trace(dumps); },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_summarize_traces", [](const std::vector<std::string>& dumps) { return summarize_traces(dumps); },
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace tdist::python
