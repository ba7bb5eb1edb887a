// tdist._C: the compiled half of the tdist Python package. The public API is
// the pure-Python layer in tdist/*.py, which calls these bindings.

#include "bindings.h"
#include "tdist/trace.h"

PYBIND11_MODULE(_C, m) {
  namespace tp = tdist::python;
  m.doc() = "Low-level bindings of the tdist C++ library (use the tdist package instead).";
  tp::bind_errors(m);  // first: the other bindings' errors translate through it
  tp::bind_tensor(m);
  tp::bind_store(m);
  tp::bind_work(m);
  tp::bind_process_group(m);
  tp::bind_distributed(m);
  tp::bind_objects(m);
  tp::bind_trace(m);
  tp::bind_debug(m);
  tp::bind_mesh(m);
  tp::bind_rpc(m);
  // A SIGUSR1 sent to a job for its flight recorders must not end a rank
  // that has imported tdist but not yet made a group.
  tdist::handle_sigusr1();
#ifdef TDIST_VERSION
  m.attr("__version__") = TDIST_VERSION;
#endif
}
