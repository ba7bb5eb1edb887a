// Tensors from Python: NumPy arrays and CPU torch tensors become
// tdist::Tensor views of their memory, with no copy, so collectives update
// them in place. torch is never imported here: a torch.Tensor can only exist
// if the user imported torch, so its classes are looked up in sys.modules.
// torch tensors are read through data_ptr() and their dtype, which also
// covers bfloat16 (NumPy has no such type, so tensor.numpy() would fail).

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "tdist/errors.h"

namespace tdist::python {
namespace {

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__"));
}

std::string where(const char* op, const char* arg) {
  return std::string(op) + ": " + arg;
}

// torch's classes, found once torch has been imported by the user. Never
// freed, so nothing is released after the interpreter is gone.
struct TorchClasses {
  PyObject* tensor_type = nullptr;
  PyObject* dtypes = nullptr;  // dict: torch.dtype -> int(DType)
};

const TorchClasses* torch_classes() {
  static auto* classes = new TorchClasses;
  if (classes->tensor_type != nullptr) return classes;
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (torch == nullptr || !PyObject_HasAttrString(torch, "Tensor")) return nullptr;
  auto module = py::reinterpret_borrow<py::object>(torch);
  py::dict dtypes;
  for (DType d : kAllDTypes) {
    if (py::hasattr(module, dtype_name(d))) dtypes[module.attr(dtype_name(d))] = static_cast<int>(d);
  }
  classes->dtypes = dtypes.release().ptr();
  classes->tensor_type = py::object(module.attr("Tensor")).release().ptr();
  return classes;
}

DType numpy_dtype(const py::dtype& dt, const char* op, const char* arg) {
  char kind = dt.kind();
  auto size = dt.itemsize();
  std::string order = py::str(dt.attr("byteorder"));
  if (order == ">") {
    throw DistInvalidArgument(where(op, arg) + " has a big-endian dtype (" +
                              std::string(py::str(py::handle(dt))) +
                              "); convert it with .astype(its native equivalent)");
  }
  switch (kind) {
    case 'b':
      return DType::kBool;
    case 'u':
      if (size == 1) return DType::kUInt8;
      break;
    case 'i':
      if (size == 1) return DType::kInt8;
      if (size == 2) return DType::kInt16;
      if (size == 4) return DType::kInt32;
      if (size == 8) return DType::kInt64;
      break;
    case 'f':
      if (size == 2) return DType::kFloat16;
      if (size == 4) return DType::kFloat32;
      if (size == 8) return DType::kFloat64;
      break;
    case 'c':
      if (size == 8) return DType::kComplex64;
      if (size == 16) return DType::kComplex128;
      break;
    case 'V':  // ml_dtypes' bfloat16 is a NumPy "void" type named bfloat16
      if (size == 2 && std::string(py::str(dt.attr("name"))) == "bfloat16") return DType::kBFloat16;
      break;
    default:
      break;
  }
  throw DistInvalidArgument(where(op, arg) + " has dtype " + std::string(py::str(py::handle(dt))) +
                            ", which tdist does not support (supported: bool, uint8, int8, int16, int32, "
                            "int64, float16, bfloat16, float32, float64, complex64, complex128)");
}

// bfloat16 from a producer whose bfloat16 NumPy cannot type (tdist.paddle's
// view of a paddle bfloat16 tensor): its bits in a uint16 array of an
// ndarray subclass with the class attribute `tdist_bfloat16`.
bool marked_bfloat16(py::handle obj, const py::dtype& dt) {
  if (dt.kind() != 'u' || dt.itemsize() != 2) return false;
  const py::handle type = py::type::handle_of(obj);
  return py::hasattr(type, "tdist_bfloat16") && py::bool_(type.attr("tdist_bfloat16"));
}

Tensor from_numpy(py::handle obj, const char* op, const char* arg, Access access) {
  auto array = py::reinterpret_borrow<py::array>(obj);
  DType dtype = marked_bfloat16(obj, array.dtype()) ? DType::kBFloat16 : numpy_dtype(array.dtype(), op, arg);
  if ((array.flags() & py::array::c_style) == 0) {
    throw DistInvalidArgument(where(op, arg) +
                              " is not C-contiguous; tdist works in place on contiguous memory, pass "
                              "numpy.ascontiguousarray(x) (and copy the result back if needed)");
  }
  if (access == Access::kWrite && !array.writeable()) {
    throw DistInvalidArgument(where(op, arg) +
                              " is read-only, but this operation writes into it; pass a writable array");
  }
  const std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
  return Tensor::wrap(const_cast<void*>(array.data()), dtype, shape);
}

Tensor from_torch(py::handle obj, const TorchClasses& torch, const char* op, const char* arg) {
  std::string device = py::str(obj.attr("device").attr("type"));
  if (device != "cpu") {
    throw DistInvalidArgument(where(op, arg) + " is on device " + std::string(py::str(obj.attr("device"))) +
                              "; tdist works on CPU tensors, pass tensor.cpu()");
  }
  std::string layout = py::str(obj.attr("layout"));
  if (layout != "torch.strided") {
    throw DistInvalidArgument(where(op, arg) + " has layout " + layout +
                              "; tdist works on dense (torch.strided) tensors");
  }
  if (!obj.attr("is_contiguous")().cast<bool>()) {
    throw DistInvalidArgument(where(op, arg) +
                              " is not contiguous; tdist works in place on contiguous memory, pass "
                              "tensor.contiguous() (and copy the result back if needed)");
  }
  PyObject* code = PyDict_GetItem(torch.dtypes, obj.attr("dtype").ptr());  // borrowed
  if (code == nullptr) {
    throw DistInvalidArgument(where(op, arg) + " has dtype " + std::string(py::str(obj.attr("dtype"))) +
                              ", which tdist does not support");
  }
  auto dtype = static_cast<DType>(PyLong_AsLong(code));
  if (is_complex(dtype) && (obj.attr("is_conj")().cast<bool>() || obj.attr("is_neg")().cast<bool>())) {
    throw DistInvalidArgument(where(op, arg) +
                              " is a lazily conjugated or negated view; pass tensor.resolve_conj()"
                              ".resolve_neg()");
  }
  std::vector<int64_t> shape;
  for (py::handle d : obj.attr("shape")) shape.push_back(d.cast<int64_t>());
  auto address = obj.attr("data_ptr")().cast<uintptr_t>();
  return Tensor::wrap(reinterpret_cast<void*>(address), dtype, shape);
}

}  // namespace

Tensor to_tensor(py::handle obj, const char* op, const char* arg, Access access) {
  if (py::isinstance<py::array>(obj)) return from_numpy(obj, op, arg, access);
  if (const TorchClasses* torch = torch_classes()) {
    if (PyObject_IsInstance(obj.ptr(), torch->tensor_type) == 1) return from_torch(obj, *torch, op, arg);
  }
  throw py::type_error(where(op, arg) + " must be a numpy.ndarray or a torch.Tensor, not " + type_name(obj));
}

std::vector<Tensor> to_tensor_list(py::handle seq, const char* op, const char* arg, Access access) {
  std::vector<Tensor> out;
  if (seq.is_none()) return out;
  if (!py::isinstance<py::sequence>(seq) || py::isinstance<py::str>(seq)) {
    throw py::type_error(where(op, arg) + " must be a list of tensors, not " + type_name(seq));
  }
  auto list = py::reinterpret_borrow<py::sequence>(seq);
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    std::string name = std::string(arg) + "[" + std::to_string(i) + "]";
    out.push_back(to_tensor(list[i], op, name.c_str(), access));
  }
  return out;
}

Bytes to_bytes(py::handle obj, const char* op) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (!PyBytes_Check(obj.ptr())) {
    throw py::type_error(std::string(op) + ": expected bytes, not " + type_name(obj));
  }
  PyBytes_AsStringAndSize(obj.ptr(), &data, &size);
  return Bytes(reinterpret_cast<uint8_t*>(data), reinterpret_cast<uint8_t*>(data) + size);
}

py::bytes from_bytes(const Bytes& bytes) {
  return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

py::object numpy_view(const Tensor& t, py::handle base) {
  // NumPy dtypes by tdist dtype, made once: building one from its name
  // costs microseconds, and RPC makes arrays at every call. Never freed
  // (they may outlive the interpreter's teardown of this module).
  static auto* dtypes = new std::vector<py::object>(kAllDTypes.size());
  py::object& dt = (*dtypes)[static_cast<size_t>(t.dtype())];
  if (!dt) dt = py::dtype(t.dtype() == DType::kBFloat16 ? "uint16" : dtype_name(t.dtype()));
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  return py::array(py::reinterpret_borrow<py::dtype>(dt), shape, {}, t.data(), base);
}

py::object numpy_owning(const Tensor& t) {
  auto* copy = new Tensor(t);
  py::capsule owner(copy, [](void* p) { delete static_cast<Tensor*>(p); });
  return numpy_view(*copy, owner);
}

void bind_tensor(py::module_& m) {
  // A view of a tensor an operation works on, as a backend written in Python
  // receives it. numpy() shares the memory (bfloat16 shows as uint16 bits).
  py::class_<Tensor>(m, "Tensor",
                     "A tensor as tdist sees it: dtype, shape and memory of a NumPy array or torch "
                     "tensor. Backends written in Python receive these; numpy() shares the memory.")
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_property_readonly("shape", [](const Tensor& t) { return t.shape().to_vector(); })
      .def("numel", &Tensor::numel)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); })
      .def(
          "numpy",
          // Keep `self` (and so the wrapped memory's owner) alive through the array's base.
          [](const py::object& self) { return numpy_view(self.cast<const Tensor&>(), self); },
          "A NumPy array sharing this tensor's memory (bfloat16 as uint16 bit patterns).")
      .def("__repr__", [](const Tensor& t) { return "tdist.Tensor(" + t.describe() + ")"; });

  m.def(
      "dtype_names",
      [] {
        std::vector<std::string> names;
        for (DType d : kAllDTypes) names.emplace_back(dtype_name(d));
        return names;
      },
      "The names of every dtype tdist supports, in torch's spelling.");
}

}  // namespace tdist::python
