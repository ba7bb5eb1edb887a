#pragma once

// Shared declarations of the tdist._C extension: one bind_* function per
// public header, plus the helpers every binding file uses (tensor conversion
// and exception translation).

#include <pybind11/pybind11.h>

#include <exception>
#include <vector>

#include "tdist/store.h"
#include "tdist/tensor.h"

namespace tdist::python {

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_tensor(py::module_& m);
void bind_store(py::module_& m);
void bind_work(py::module_& m);
void bind_process_group(py::module_& m);
void bind_distributed(py::module_& m);
void bind_objects(py::module_& m);
void bind_trace(py::module_& m);
void bind_debug(py::module_& m);
void bind_mesh(py::module_& m);
void bind_rpc(py::module_& m);

/// Whether an operation writes into a tensor argument. Read-only NumPy arrays
/// are accepted only where nothing is written.
enum class Access { kRead, kWrite };

/// Wraps a NumPy array or a CPU torch.Tensor as a tdist::Tensor without
/// copying. Raises DistInvalidArgument naming `op` and `arg` for a
/// non-contiguous, read-only (when written), non-CPU or unsupported-dtype
/// tensor, and TypeError for anything that is not a tensor. The caller keeps
/// `obj` alive while the Tensor is used.
Tensor to_tensor(py::handle obj, const char* op, const char* arg, Access access);

/// Converts every element of a Python sequence with to_tensor; None or an
/// empty sequence gives an empty vector.
std::vector<Tensor> to_tensor_list(py::handle seq, const char* op, const char* arg, Access access);

/// A new Python exception object of the class tdist raises for `error`
/// (DistError and subclasses, or RuntimeError for anything else).
py::object exception_object(std::exception_ptr error);

/// Bytes of a Python bytes object, and back.
Bytes to_bytes(py::handle obj, const char* op);
py::bytes from_bytes(const Bytes& bytes);

/// A NumPy array of `t`'s memory (bfloat16 as uint16 bit patterns) whose
/// base is `base`: whatever keeps the memory alive.
py::object numpy_view(const Tensor& t, py::handle base);
/// The same, its base owning a copy of `t` (and so its memory).
py::object numpy_owning(const Tensor& t);

}  // namespace tdist::python
