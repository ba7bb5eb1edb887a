// tdist.torch._plugin: the Python face of ProcessGroupTdist. The class is
// registered as a subclass of torch's own c10d Backend binding, so the
// object it creates is what torch.distributed's Backend.register_backend
// expects a creator function to return. python/tdist/torch/ registers it.

#include <Python.h>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <mutex>
#include <vector>

#include "completion_pool.h"
#include "process_group_tdist.h"
#include "tdist/trace.h"
#include "tdist_c10d_store.h"

namespace tdist::torch_plugin {

// The holder of Python-owned ProcessGroupTdist objects. Dropping the last
// reference destroys the tdist group, which finishes outstanding work; that
// can run future callbacks written in Python, which take the GIL, so the
// reference is dropped with the GIL released. It is one intrusive_ptr, laid
// out like torch's own holder of Backend, so torch's bindings can read it.
template <typename T>
class GilFreeHolder {
 public:
  GilFreeHolder() = default;
  explicit GilFreeHolder(T* raw) : ptr_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(raw)) {}
  explicit GilFreeHolder(c10::intrusive_ptr<T> ptr) : ptr_(std::move(ptr)) {}
  GilFreeHolder(const GilFreeHolder&) = default;
  GilFreeHolder(GilFreeHolder&&) noexcept = default;
  GilFreeHolder& operator=(const GilFreeHolder&) = default;
  GilFreeHolder& operator=(GilFreeHolder&&) noexcept = default;
  ~GilFreeHolder() {
    if (ptr_ && Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release no_gil;
      ptr_.reset();
    }
  }
  T* get() const { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};

}  // namespace tdist::torch_plugin

PYBIND11_DECLARE_HOLDER_TYPE(T, tdist::torch_plugin::GilFreeHolder<T>, true);

namespace py = pybind11;
using tdist::torch_plugin::GilFreeHolder;
using tdist::torch_plugin::ProcessGroupTdist;

namespace {

// Every group this module made, weakly: _shutdown_all() shuts down those
// still alive at exit (tdist/torch/backend.py), while Python still runs. A
// group torch no longer names but a DDP model still holds would otherwise
// be destroyed as the interpreter finalizes, its threads still running
// into a GIL that is gone.
std::mutex g_groups_mutex;
std::vector<c10::weak_intrusive_ptr<ProcessGroupTdist>> g_groups;

void remember(const c10::intrusive_ptr<ProcessGroupTdist>& pg) {
  std::lock_guard<std::mutex> lock(g_groups_mutex);
  std::erase_if(g_groups, [](const auto& weak) { return weak.expired(); });
  g_groups.emplace_back(pg);
}

void shutdown_all() {
  std::vector<c10::intrusive_ptr<ProcessGroupTdist>> live;
  {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    for (auto& weak : g_groups) {
      if (auto pg = weak.lock()) live.push_back(std::move(pg));
    }
    g_groups.clear();
  }
  for (auto& pg : live) {
    try {
      pg->shutdown();
    } catch (const std::exception&) {
      // An aborted or broken group: nothing left to stop.
    }
  }
}

}  // namespace

PYBIND11_MODULE(_plugin, m) {
  m.doc() = "The tdist backend of torch.distributed (a c10d Backend running on tdist).";
  // Registers torch's Backend and Store classes, which the binding below
  // derives from and takes.
  py::module_::import("torch.distributed");
  tdist::handle_sigusr1();  // a SIGUSR1 sent for evidence never ends the rank (tdist/trace.h)

  py::class_<ProcessGroupTdist, c10d::Backend, GilFreeHolder<ProcessGroupTdist>>(m, "ProcessGroupTdist",
                                                                                 R"(
A torch.distributed backend whose operations run on tdist (CPU tensors).

torch.distributed creates it through the "tdist" backend that
``import tdist.torch`` registers; it can also be created directly from a
torch store, as Backend.register_backend's four-argument creators are:
``ProcessGroupTdist(store, rank, size, timeout)``. Construction blocks until
every rank has joined (or ``timeout`` passed).
)")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, std::vector<int64_t> global_ranks,
                       std::string group_name) {
             c10::intrusive_ptr<ProcessGroupTdist> pg;
             {
               // The rendezvous blocks; other Python threads keep running.
               py::gil_scoped_release no_gil;
               pg = c10::make_intrusive<ProcessGroupTdist>(store, rank, size, timeout,
                                                           std::move(global_ranks), std::move(group_name));
             }
             remember(pg);
             return GilFreeHolder<ProcessGroupTdist>(std::move(pg));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout") = std::chrono::milliseconds(std::chrono::minutes(30)),
           py::arg("global_ranks") = std::vector<int64_t>{}, py::arg("group_name") = std::string())
      .def_property_readonly("timeout", &ProcessGroupTdist::timeout,
                             "The deadline of every operation of the group.")
      .def_property_readonly("group_name", &ProcessGroupTdist::group_name,
                             "The name torch.distributed gave the group (its store prefix).")
      .def_property_readonly("detail_checks", &ProcessGroupTdist::detail_checks,
                             "True if every collective is first checked across ranks (DETAIL debug level "
                             "when the group was created).")
      // torch_npu's additions; tdist.torch's functions of the same names call them.
      .def("_all_gather_into_tensor_uneven", &ProcessGroupTdist::all_gather_into_tensor_uneven,
           py::arg("output"), py::arg("input"), py::arg("output_split_sizes"),
           py::call_guard<py::gil_scoped_release>())
      .def("_reduce_scatter_tensor_uneven", &ProcessGroupTdist::reduce_scatter_tensor_uneven,
           py::arg("output"), py::arg("input"), py::arg("input_split_sizes"), py::arg("op"),
           py::call_guard<py::gil_scoped_release>())
      .def("reinit", &ProcessGroupTdist::reinit, py::arg("rebuild_link") = true,
           py::call_guard<py::gil_scoped_release>(),
           "Rebuilds (or, rebuild_link=False, checks) the group's connections in place; "
           "tdist.torch.reinit_process_group calls it on every member.")
      .def("get_comm_name", &ProcessGroupTdist::comm_name,
           "The group's communicator name: unique in the job, equal on every member, stable for the "
           "group's life.")
      .def(
          "get_hccl_comm_name",
          [](const ProcessGroupTdist& pg, int64_t rankid, bool /*init_comm*/) {
            if (rankid < 0) {
              throw py::value_error("get_hccl_comm_name: rankid must be a rank (>= 0), got " +
                                    std::to_string(rankid));
            }
            return pg.comm_name();
          },
          py::arg("rankid"), py::arg("init_comm") = true,
          "torch_npu's spelling of get_comm_name (rankid picks a device there; tdist's groups have one "
          "name per group); torch_npu programs reach it as "
          "ProcessGroup._get_backend(device).get_hccl_comm_name(rank).");

  py::class_<tdist::torch_plugin::TdistC10dStore, c10d::Store,
             c10::intrusive_ptr<tdist::torch_plugin::TdistC10dStore>>(m, "TCPStore", R"(
A torch.distributed Store over tdist's own TCPStore, for torch programs on any
backend: ``init_process_group(backend, store=tdist.torch.TCPStore(...), rank=r,
world_size=n)``. Its arguments are those of torch's TCPStore, but the master
listens only on the addresses ``host_name`` resolves to (``listen_host``, or
TDIST_STORE_LISTEN_HOST, says otherwise), and with the job's token
(``auth_token``; by default TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE; ""
turns it off) every connection is authenticated both ways. It speaks tdist's
store protocol: its clients are tdist stores (this class, tdist.TCPStore,
tdistrun's --agent-store), not torch's TCPStore. docs/security.md.
)")
      .def(py::init([](const std::string& host_name, int port, std::optional<int> world_size, bool is_master,
                       std::chrono::milliseconds timeout, bool wait_for_workers, bool multi_tenant,
                       std::optional<int> master_listen_fd, std::optional<std::string> listen_host,
                       std::optional<std::string> auth_token) {
             if (port < 0 || port > 65535) {
               throw py::value_error("port must have value from 0 to 65535 but was " + std::to_string(port));
             }
             tdist::TCPStoreOptions options;
             options.port = static_cast<uint16_t>(port);
             options.world_size = world_size;
             options.is_master = is_master;
             options.timeout = timeout;
             options.wait_for_workers = wait_for_workers;
             options.multi_tenant = multi_tenant;
             options.master_listen_fd = master_listen_fd.value_or(-1);
             options.listen_host = std::move(listen_host);
             options.auth_token = std::move(auth_token);
             // Connecting (and the master's wait for its users) blocks.
             py::gil_scoped_release no_gil;
             return c10::make_intrusive<tdist::torch_plugin::TdistC10dStore>(host_name, options);
           }),
           py::arg("host_name"), py::arg("port"), py::arg("world_size") = py::none(),
           py::arg("is_master") = false,
           py::arg("timeout") = std::chrono::milliseconds(std::chrono::minutes(5)),
           py::arg("wait_for_workers") = true, py::arg("multi_tenant") = false,
           py::arg("master_listen_fd") = py::none(), py::arg("listen_host") = py::none(),
           py::arg("auth_token") = py::none())
      .def_property_readonly("host", &tdist::torch_plugin::TdistC10dStore::host,
                             "The host this store connects to.")
      .def_property_readonly("port", &tdist::torch_plugin::TdistC10dStore::port,
                             "The port of the server (the one picked when 0 was asked for).");

  // For the tests: what a profiler observer sees of record_param_comms events.
  m.def("_start_param_comms_observer", &tdist::torch_plugin::ParamCommsObserver::start);
  m.def("_stop_param_comms_observer", [] {
    py::list out;
    for (const auto& e : tdist::torch_plugin::ParamCommsObserver::stop()) {
      py::dict d;
      d["op"] = e.op;
      d["rank"] = e.rank;
      d["in_numel"] = e.in_numel;
      d["out_numel"] = e.out_numel;
      d["dtype"] = e.dtype;
      d["in_splits"] = e.in_splits;
      d["out_splits"] = e.out_splits;
      d["seq"] = e.seq;
      d["group_name"] = e.group_name;
      d["group_size"] = e.group_size;
      out.append(d);
    }
    return out;
  });

  // torch 1.13 binds no Work.abort in Python; tdist.torch.compat installs
  // this as Work.abort (WorkTdist::abort aborts the work's group).
  m.def(
      "_abort_work", [](const c10::intrusive_ptr<c10d::Work>& work) { work->abort(); }, py::arg("work"),
      py::call_guard<py::gil_scoped_release>());

  m.def("_shutdown_all", &shutdown_all, py::call_guard<py::gil_scoped_release>(),
        "Shuts down every tdist group this process made that is still alive (at exit).");

  m.def(
      "_drain_completions",
      [](std::chrono::milliseconds timeout) {
        return tdist::torch_plugin::CompletionPool::instance().drain(timeout);
      },
      py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
      "Waits (GIL released) until no future completion is queued or running, at most `timeout`. "
      "Run at exit, before Python finalizes: a completion still dropping a Python callback then "
      "would abort the process.");

  // The flight recorder of the plugin's copy of tdist (tdist.dump_trace
  // writes it beside the Python package's; docs/debugging.md).
  tdist::set_trace_component("torch");
  m.def(
      "_dump_trace", [](const std::string& path) { return tdist::dump_trace(path); },
      py::arg("path") = std::string(), py::call_guard<py::gil_scoped_release>());
  m.def("_trace_json", &tdist::trace_json, py::call_guard<py::gil_scoped_release>());

  m.attr("TORCH_VERSION_BUILT_AGAINST") = TORCH_PLUGIN_TORCH_VERSION;
}
