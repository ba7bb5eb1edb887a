// ReduceOp (reduce_op.h), ProcessGroup and the backend registry
// (process_group.h). A ProcessGroup can be subclassed in Python to write a
// backend (the spec's third-party backends): tdist calls the overrides with
// the GIL held, on the thread that issued the operation.

#include <pybind11/chrono.h>
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "tdist/errors.h"
#include "tdist/process_group.h"

namespace tdist::python {
namespace {

// Forwards every virtual of ProcessGroup to a Python override if there is
// one; otherwise the base class raises "backend X does not support Y".
class PyProcessGroup : public ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;
  using Tensors = std::vector<Tensor>;
  using Splits = std::vector<int64_t>;

  std::string backend_name() const override {
    PYBIND11_OVERRIDE_PURE(std::string, ProcessGroup, backend_name);
  }
  WorkPtr broadcast(const Tensor& t, int root) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, broadcast, t, root);
  }
  WorkPtr all_reduce(const Tensor& t, const ReduceOp& op) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, all_reduce, t, op);
  }
  WorkPtr reduce(const Tensor& t, int root, const ReduceOp& op) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, reduce, t, root, op);
  }
  WorkPtr all_gather(const Tensors& outputs, const Tensor& input) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, all_gather, outputs, input);
  }
  WorkPtr all_gather_into_tensor(const Tensor& output, const Tensor& input) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, all_gather_into_tensor, output, input);
  }
  WorkPtr all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input, const Splits& s) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, all_gather_into_tensor_uneven, output, input, s);
  }
  WorkPtr gather(const Tensors& outputs, const Tensor& input, int root) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, gather, outputs, input, root);
  }
  WorkPtr scatter(const Tensor& output, const Tensors& inputs, int root) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, scatter, output, inputs, root);
  }
  WorkPtr reduce_scatter(const Tensor& output, const Tensors& inputs, const ReduceOp& op) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, reduce_scatter, output, inputs, op);
  }
  WorkPtr reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceOp& op) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, reduce_scatter_tensor, output, input, op);
  }
  WorkPtr reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input, const Splits& s,
                                       const ReduceOp& op) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, reduce_scatter_tensor_uneven, output, input, s, op);
  }
  WorkPtr all_to_all(const Tensors& outputs, const Tensors& inputs) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, all_to_all, outputs, inputs);
  }
  WorkPtr all_to_all_single(const Tensor& output, const Tensor& input, const Splits& out_splits,
                            const Splits& in_splits) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, all_to_all_single, output, input, out_splits, in_splits);
  }
  WorkPtr barrier() override { PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, barrier); }
  WorkPtr send(const Tensor& t, int dst, int tag) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, send, t, dst, tag);
  }
  WorkPtr recv(const Tensor& t, int src, int tag) override {
    PYBIND11_OVERRIDE(WorkPtr, ProcessGroup, recv, t, src, tag);
  }
};

bool interpreter_alive() {
  return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0;
}

// A backend factory that calls a Python function. The group it returns
// keeps its Python object alive (a Python subclass loses its overrides when
// its Python half dies); the reference is dropped under the GIL.
BackendFactory python_factory(py::function fn) {
  PyObject* callable = fn.release().ptr();  // kept for the life of the process, like the registry
  return [callable](std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options) {
    py::gil_scoped_acquire gil;
    py::object result = py::reinterpret_borrow<py::object>(callable)(store, rank, size, options.timeout);
    auto group = result.cast<std::shared_ptr<ProcessGroup>>();
    if (!group) throw DistBackendError("register_backend: the backend's factory returned None");
    auto* owner = new py::object(std::move(result));
    std::shared_ptr<void> keep(owner, [](py::object* o) {
      if (!interpreter_alive()) return;  // leaked on purpose: no GIL to take
      py::gil_scoped_acquire inner;
      delete o;
    });
    return Group(keep, group.get());
  };
}

}  // namespace

void bind_process_group(py::module_& m) {
  py::class_<ReduceOp> reduce_op(m, "ReduceOp",
                                 "A reduction operator: ReduceOp.SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR, "
                                 "AVG, or PREMUL_SUM with a factor (ReduceOp.premul_sum(factor)).");
  py::enum_<ReduceOp::Kind>(reduce_op, "RedOpType", "The kinds of ReduceOp (torch's ReduceOp.RedOpType).")
      .value("SUM", ReduceOp::SUM)
      .value("PRODUCT", ReduceOp::PRODUCT)
      .value("MIN", ReduceOp::MIN)
      .value("MAX", ReduceOp::MAX)
      .value("BAND", ReduceOp::BAND)
      .value("BOR", ReduceOp::BOR)
      .value("BXOR", ReduceOp::BXOR)
      .value("AVG", ReduceOp::AVG)
      .value("PREMUL_SUM", ReduceOp::PREMUL_SUM)
      .export_values();
  reduce_op.def(py::init<>())
      .def(py::init<ReduceOp::Kind>(), py::arg("op"))
      .def_static("premul_sum", &ReduceOp::premul_sum, py::arg("factor"),
                  "PREMUL_SUM: every input is multiplied by `factor` before the sum.")
      .def_property_readonly(
          "op", [](const ReduceOp& op) { return op.kind; }, "The RedOpType.")
      .def_readonly("premul_factor", &ReduceOp::premul_factor)
      .def(py::self == py::self)
      .def("__eq__", [](const ReduceOp& a, ReduceOp::Kind b) { return a == ReduceOp(b); })
      .def("__hash__",
           [](const ReduceOp& op) {
             return py::hash(py::make_tuple(static_cast<int>(op.kind), op.premul_factor));
           })
      .def("__repr__", [](const ReduceOp& op) {
        std::string name = std::string("ReduceOp.") + reduce_op_name(op);
        if (op.kind == ReduceOp::PREMUL_SUM) name += "(" + std::to_string(op.premul_factor) + ")";
        return name;
      });
  py::implicitly_convertible<ReduceOp::Kind, ReduceOp>();
  m.def(
      "is_reduce_supported",
      [](const std::string& dtype, const ReduceOp& op) {
        return is_reduce_supported(parse_dtype(dtype), op);
      },
      py::arg("dtype"), py::arg("op"), "True if `op` is defined for tensors of dtype `dtype` (a name).");

  py::class_<ProcessGroup, PyProcessGroup, std::shared_ptr<ProcessGroup>>(
      m, "ProcessGroup",
      "A group of ranks running collectives together (what new_group returns). Subclass it in Python "
      "to write a backend: override backend_name() and the operations it supports, each taking "
      "tdist._C.Tensor views and returning a finished or pending _C.Work.")
      .def(py::init([](int rank, int size, std::vector<int> global_ranks, std::chrono::milliseconds timeout) {
             ProcessGroupOptions options;
             options.global_ranks = std::move(global_ranks);
             options.timeout = timeout;
             return std::make_shared<PyProcessGroup>(rank, size, options);
           }),
           py::arg("rank"), py::arg("size"), py::arg("global_ranks") = std::vector<int>{},
           py::arg("timeout") = std::chrono::milliseconds(std::chrono::minutes(30)))
      .def("rank", &ProcessGroup::rank, "This process's rank in the group (-1 if not a member).")
      .def("size", &ProcessGroup::size, "The number of ranks in the group.")
      .def("backend_name", &ProcessGroup::backend_name, "The backend's registered name.")
      .def("name", &ProcessGroup::backend_name,
           "The backend's registered name (torch's ProcessGroup.name()).")
      .def_property_readonly("global_ranks", &ProcessGroup::global_ranks, "Global rank of each group rank.")
      .def_property_readonly("timeout", &ProcessGroup::timeout, "The deadline of each operation.")
      .def("_get_sequence_number_for_group", &ProcessGroup::sequence_number,
           "How many collectives this group has started (torch's ProcessGroup method of that name): the "
           "number the next collective carries, alike on every rank that made the same calls. Point-to-point "
           "operations are not counted; 0 for backends that do not count.")
      .def("comm_name", &ProcessGroup::comm_name,
           "The group's communicator name: unique in the job, equal on every member, the same for the "
           "group's life (torch_npu's get_hccl_comm_name).")
      .def("abort", &ProcessGroup::abort, py::arg("reason") = std::string(),
           py::call_guard<py::gil_scoped_release>(),
           "Aborts the group (tdist.abort): its running operation fails on every rank that can be reached, "
           "later calls raise until reinit_process_group rebuilds it.")
      .def("broadcast", &ProcessGroup::broadcast)
      .def("all_reduce", &ProcessGroup::all_reduce)
      .def("reduce", &ProcessGroup::reduce)
      .def("all_gather", &ProcessGroup::all_gather)
      .def("all_gather_into_tensor", &ProcessGroup::all_gather_into_tensor)
      .def("all_gather_into_tensor_uneven", &ProcessGroup::all_gather_into_tensor_uneven)
      .def("gather", &ProcessGroup::gather)
      .def("scatter", &ProcessGroup::scatter)
      .def("reduce_scatter", &ProcessGroup::reduce_scatter)
      .def("reduce_scatter_tensor", &ProcessGroup::reduce_scatter_tensor)
      .def("reduce_scatter_tensor_uneven", &ProcessGroup::reduce_scatter_tensor_uneven)
      .def("all_to_all", &ProcessGroup::all_to_all)
      .def("all_to_all_single", &ProcessGroup::all_to_all_single)
      .def("barrier", &ProcessGroup::barrier)
      .def("send", &ProcessGroup::send)
      .def("recv", &ProcessGroup::recv)
      .def("__repr__", [](const ProcessGroup& g) {
        return "<tdist.ProcessGroup backend=" + g.backend_name() + " rank=" + std::to_string(g.rank()) +
               " size=" + std::to_string(g.size()) + ">";
      });

  m.def(
      "register_backend",
      [](const std::string& name, py::function fn) { register_backend(name, python_factory(std::move(fn))); },
      py::arg("name"), py::arg("func"),
      "Registers backend `name`: func(store, rank, size, timeout) returns a ProcessGroup.");
  m.def("registered_backends", &registered_backends, "Names of the registered backends.");
  m.def("backend_name", &backend_name, py::arg("name"),
        "The canonical (lower-case) name of a registered backend; DistInvalidArgument otherwise.");
}

}  // namespace tdist::python
