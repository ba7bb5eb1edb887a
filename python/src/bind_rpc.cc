// tdist._C's RPC layer (include/tdist/rpc.h) for tdist.rpc: the agent, its
// futures, and the one C++ function through which every Python call runs
// ("tdist.python"): it hands the pickled call and its tensors to the Python
// handler tdist.rpc installs, and the handler's answer (or the exception it
// describes) back to the caller.

#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <chrono>
#include <mutex>

#include "bindings.h"
#include "rpc/rpc_wire.h"
#include "tdist/rendezvous.h"
#include "tdist/rpc.h"
#include "tdist/tcp_store.h"

namespace tdist::python {
namespace {

using Millis = std::chrono::milliseconds;

// The Python handler: handler(payload: bytes, tensors: list[Tensor],
// caller: str) -> (ok: bool, payload or (type, message, traceback), tensors).
std::mutex handler_mutex;
py::object* handler = nullptr;  // leaked on purpose: it may be called while the interpreter exits

// Python objects C++ let go of on a thread without the GIL (the transport's
// loop thread, once a send is done). Taking the GIL there would stall the
// loop behind whatever Python code runs (up to the interpreter's 5 ms switch
// interval, every message), so they wait here and go the next time a thread
// holding the GIL passes (release_dropped), at the latest at the interpreter's
// next pending-call check, which the first one dropped schedules.
std::mutex dropped_mutex;
std::vector<py::object*>* dropped = nullptr;  // leaked on purpose, as `handler`
bool drop_scheduled = false;

// Needs the GIL.
void release_dropped() {
  std::vector<py::object*> batch;
  {
    std::lock_guard<std::mutex> lock(dropped_mutex);
    drop_scheduled = false;
    if (dropped == nullptr || dropped->empty()) return;
    batch.swap(*dropped);
  }
  for (py::object* p : batch) delete p;
}

int release_dropped_pending(void* /*unused*/) {
  release_dropped();
  return 0;
}

void drop(py::object* p) {
  if (PyGILState_Check() != 0) {
    delete p;
    return;
  }
  bool schedule = false;
  {
    std::lock_guard<std::mutex> lock(dropped_mutex);
    if (dropped == nullptr) dropped = new std::vector<py::object*>();
    dropped->push_back(p);
    schedule = !drop_scheduled;
    drop_scheduled = true;
  }
  // Safe without the GIL (Python 3.11's C API docs); a full queue just
  // leaves the objects to the next thread that passes with the GIL.
  if (schedule && Py_IsInitialized() != 0 && Py_AddPendingCall(release_dropped_pending, nullptr) != 0) {
    std::lock_guard<std::mutex> lock(dropped_mutex);
    drop_scheduled = false;
  }
}

// A reference to `obj` that C++ may drop on any thread.
std::shared_ptr<py::object> shared_object(py::object obj) {
  return {new py::object(std::move(obj)), drop};
}

// A tensor of a Python array or torch tensor, keeping the object alive as
// long as the tensor lives (it may outlive the call: until sent).
Tensor owned_tensor(py::handle obj, const char* op, const char* arg) {
  Tensor view = to_tensor(obj, op, arg, Access::kRead);
  return Tensor::wrap(view.data(), view.dtype(), view.shape(),
                      shared_object(py::reinterpret_borrow<py::object>(obj)));
}

// The tensors of `list`. snapshot: copies of those the agent would read
// later (larger than what travels inside a header), so that a caller that
// changes them after the call sends what they held at the call.
std::vector<Tensor> owned_tensors(const py::list& list, const char* op, bool snapshot) {
  std::vector<Tensor> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    std::string arg = "tensors[" + std::to_string(i) + "]";
    Tensor t = owned_tensor(list[i], op, arg.c_str());
    // (A tensor that travels inside its header is copied there at once.)
    out.push_back(snapshot && t.nbytes() > rpc::wire::kInlineMaxBytes ? rpc::snapshot(t) : std::move(t));
  }
  return out;
}

// The tensors of a message as NumPy arrays of their buffers (tdist.rpc's
// unpickler makes torch tensors of them where the sender had those).
py::list arrays_of(const std::vector<Tensor>& tensors) {
  py::list arrays;
  for (const Tensor& t : tensors) arrays.append(numpy_owning(t));
  return arrays;
}

py::tuple to_python(const rpc::Message& m) {
  return py::make_tuple(from_bytes(m.payload), arrays_of(m.tensors));
}

rpc::Message serve_python(const rpc::Message& args, const rpc::CallInfo& call) {
  py::gil_scoped_acquire gil;
  // A serving thread keeps its Python thread state from call to call
  // instead of making a new one each time (it goes with the interpreter).
  thread_local bool kept = false;
  if (!kept) {
    gil.inc_ref();
    kept = true;
  }
  release_dropped();
  py::object fn;
  {
    std::lock_guard<std::mutex> lock(handler_mutex);
    if (handler == nullptr) throw rpc::RemoteException("RuntimeError", "tdist.rpc is not initialized here");
    fn = *handler;
  }
  py::tuple answer = fn(from_bytes(args.payload), arrays_of(args.tensors), call.caller.name);
  if (!answer[0].cast<bool>()) {
    auto what = answer[1].cast<py::tuple>();
    throw rpc::RemoteException(what[0].cast<std::string>(), what[1].cast<std::string>(),
                               what[2].cast<std::string>());
  }
  rpc::Message out;
  out.payload = to_bytes(answer[1], "rpc");
  // A result may be state the function keeps and changes later (a server's
  // weights): it goes as it was when the function returned, as in torch.
  out.tensors = owned_tensors(answer[2].cast<py::list>(), "rpc result", true);
  return out;
}

py::dict info_dict(const rpc::WorkerInfo& w) {
  py::dict d;
  d["name"] = w.name;
  d["id"] = w.id;
  d["ip"] = w.ip;
  d["port"] = w.port;
  return d;
}

}  // namespace

void bind_rpc(py::module_& m) {
  static std::once_flag registered;
  std::call_once(registered, [] { rpc::register_function("tdist.python", serve_python); });

  m.def(
      "rpc_set_handler",
      [](py::object fn) {
        std::lock_guard<std::mutex> lock(handler_mutex);
        if (handler == nullptr) handler = new py::object();
        *handler = std::move(fn);
      },
      py::arg("handler"), "Installs the function every incoming Python call runs through (tdist.rpc does).");

  py::class_<rpc::Future>(m, "RpcFuture")
      .def(
          "wait",
          [](const rpc::Future& f) {
            rpc::Message result;
            {
              py::gil_scoped_release release;
              result = f.wait();
            }
            release_dropped();
            return to_python(result);
          },
          "(payload, tensors) of the answer; raises the call's error.")
      .def("done", &rpc::Future::done)
      .def(
          "add_done_callback",
          [](const rpc::Future& f, py::function callback) {
            std::shared_ptr<py::object> cb = shared_object(std::move(callback));
            f.then([cb](const rpc::Future&) {
              py::gil_scoped_acquire gil;
              try {
                (*cb)();
              } catch (py::error_already_set& e) {
                e.discard_as_unraisable("tdist.rpc: a done-callback");
              }
              return rpc::Message{};
            });
          },
          py::arg("callback"),
          "Runs callback() once the answer is there, on the thread that completes the call.");

  py::class_<rpc::Agent, std::shared_ptr<rpc::Agent>>(m, "RpcAgent")
      .def_static(
          "start",
          [](const std::string& name, int rank, int world_size, const std::string& init_method,
             Millis rpc_timeout, int num_worker_threads, int max_queued, Millis init_timeout) {
            py::gil_scoped_release release;
            rpc::AgentOptions options;
            options.rpc_timeout = rpc_timeout;
            options.num_worker_threads = num_worker_threads;
            options.max_queued_requests = max_queued;
            options.init_timeout = init_timeout;
            RendezvousResult r =
                rendezvous(init_method.empty() ? "env://" : init_method, rank, world_size, init_timeout);
            if (auto* tcp = dynamic_cast<TCPStore*>(r.store.get())) options.reach_host = tcp->host();
            std::shared_ptr<rpc::Agent> agent =
                rpc::Agent::start(name, r.rank, r.world_size, r.store, options);
            // Destroying an agent joins threads that may wait for the GIL
            // (serving a Python call, a done-callback): Python drops its last
            // reference holding the GIL, so the deleter lets go of it first.
            return std::shared_ptr<rpc::Agent>(agent.get(), [agent](rpc::Agent*) mutable {
              if (PyGILState_Check() != 0) {
                py::gil_scoped_release without_gil;
                agent.reset();
              } else {
                agent.reset();
              }
            });
          },
          py::arg("name"), py::arg("rank"), py::arg("world_size"), py::arg("init_method"),
          py::arg("rpc_timeout"), py::arg("num_worker_threads"), py::arg("max_queued_requests"),
          py::arg("init_timeout"))
      .def(
          "call_async",
          [](rpc::Agent& agent, const std::string& to, const std::string& function, const py::bytes& payload,
             const py::list& tensors, Millis timeout, const std::string& label, bool snapshot) {
            release_dropped();
            rpc::Message args{to_bytes(payload, "rpc"), owned_tensors(tensors, "rpc", snapshot)};
            py::gil_scoped_release release;
            return agent.call_async(to, function, std::move(args), timeout, label);
          },
          py::arg("to"), py::arg("function"), py::arg("payload"), py::arg("tensors"), py::arg("timeout"),
          py::arg("label") = "", py::arg("snapshot") = true)
      .def(
          "shutdown",
          [](rpc::Agent& agent, bool graceful) {
            py::gil_scoped_release release;
            agent.shutdown(graceful);
          },
          py::arg("graceful"))
      .def("current_worker_info", [](const rpc::Agent& a) { return info_dict(a.current_worker_info()); })
      .def("worker_info_by_name",
           [](const rpc::Agent& a, const std::string& n) { return info_dict(a.worker_info(n)); })
      .def("worker_info_by_id", [](const rpc::Agent& a, int id) { return info_dict(a.worker_info(id)); })
      .def("all_worker_infos",
           [](const rpc::Agent& a) {
             py::list out;
             for (const auto& w : a.all_worker_infos()) out.append(info_dict(w));
             return out;
           })
      .def("pending_calls", &rpc::Agent::pending_calls);
}

}  // namespace tdist::python
