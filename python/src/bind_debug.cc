// Debug levels and C++ stacks in errors (tdist/debug.h): tdist.DebugLevel,
// get_debug_level, set_debug_level, set_debug_level_from_env, as torch's.

#include "bindings.h"
#include "tdist/debug.h"

namespace tdist::python {

void bind_debug(py::module_& m) {
  py::enum_<DebugLevel>(
      m, "DebugLevel",
      "The debug level of tdist (torch.distributed.DebugLevel): OFF, INFO or DETAIL, set by "
      "TDIST_DEBUG or TORCH_DISTRIBUTED_DEBUG or with set_debug_level().")
      .value("OFF", DebugLevel::kOff)
      .value("INFO", DebugLevel::kInfo)
      .value("DETAIL", DebugLevel::kDetail);
  m.def("get_debug_level", &debug_level, "The debug level in force (a DebugLevel).");
  m.def("set_debug_level", &set_debug_level, py::arg("level"),
        "Sets the debug level of this process (a DebugLevel); every rank must set the same.");
  m.def("set_debug_level_from_env", &set_debug_level_from_env,
        "Sets the debug level from TDIST_DEBUG, else TORCH_DISTRIBUTED_DEBUG (OFF when both are unset); "
        "DistInvalidArgument for a value other than OFF, INFO or DETAIL.");
  m.def("_show_cpp_stacktraces", &show_cpp_stacktraces,
        "True if errors carry their C++ stack (TORCH_SHOW_CPP_STACKTRACES=1).");
  m.def("_set_show_cpp_stacktraces", &set_show_cpp_stacktraces, py::arg("show"));
}

}  // namespace tdist::python
