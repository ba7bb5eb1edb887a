"""Tensor arguments of tdist.paddle: paddle tensors, NumPy arrays, CPU torch
tensors, and any other CPU tensor that speaks DLPack or the buffer protocol.

tdist's core takes NumPy arrays and torch tensors. Everything else is turned
into a writable NumPy view of the same memory (no copy), so results land in
the caller's tensor, as paddle's in-place collectives do. Neither paddle nor
torch is ever imported here: their classes are only looked up in
``sys.modules``, where they are once the program created such a tensor.

NumPy's own ``from_dlpack`` (1.x) returns read-only arrays, which tdist
rightly refuses as outputs, so the DLPack capsule is read here with ctypes:
the view's buffer keeps the capsule (whose destructor releases the producer's
memory) and the producer's tensor alive.
"""

import ctypes
import sys

import numpy

from tdist._C import DistInvalidArgument
from tdist._tensors import is_numpy_array, is_torch_tensor

_KDL_CPU = 1
_KDL_CUDA_HOST = 3  # pinned host memory: also readable by the CPU


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# DLPack type code -> NumPy kind letter (kDLInt, kDLUInt, kDLFloat, kDLComplex, kDLBool).
_DL_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}


def paddle_module():
    """The paddle module if the program imported it, else None (never imports it)."""
    return sys.modules.get("paddle")


def is_paddle_tensor(obj):
    paddle = paddle_module()
    return paddle is not None and isinstance(getattr(paddle, "Tensor", None), type) and isinstance(obj, paddle.Tensor)


def is_tensor(obj):
    """paddle.is_tensor's question for every kind tdist.paddle accepts: a
    tensor (not a list of them)."""
    if obj is None or isinstance(obj, (list, tuple, str, dict)):
        return False
    if is_numpy_array(obj) or is_torch_tensor(obj) or is_paddle_tensor(obj) or hasattr(obj, "__dlpack__"):
        return True
    try:
        memoryview(obj)
    except TypeError:
        return False
    return True


_KDL_BFLOAT = 4


class BFloat16Bits(numpy.ndarray):
    """A uint16 NumPy view of bfloat16 memory, which tdist's core reduces as
    bfloat16 (NumPy has no bfloat16; the class attribute says what it is)."""

    tdist_bfloat16 = True


def _dlpack_dtype(dl, fn, arg):
    if dl.lanes == 1 and dl.code == _KDL_BFLOAT and dl.bits == 16:
        return numpy.dtype("uint16")
    kind = _DL_KINDS.get(dl.code)
    if dl.lanes != 1 or kind is None:
        raise DistInvalidArgument(f"{fn}: {arg} has DLPack type code {dl.code} with {dl.bits} bits and {dl.lanes} "
                                  "lanes, which tdist.paddle cannot view (use float16, bfloat16, float32, float64, "
                                  "integers, bool or complex)")
    return numpy.dtype("bool") if kind == "b" else numpy.dtype(f"{kind}{dl.bits // 8}")


def _dlpack_view(obj, fn, arg):
    """A writable NumPy array sharing the memory of DLPack producer `obj`."""
    if hasattr(obj, "__dlpack_device__"):
        device_type = obj.__dlpack_device__()[0]
        if int(device_type) not in (_KDL_CPU, _KDL_CUDA_HOST):
            raise DistInvalidArgument(f"{fn}: {arg} is on device type {int(device_type)} (DLPack), not the CPU; "
                                      "tdist runs on CPUs: move it with .cpu() first")
    if is_paddle_tensor(obj) and not getattr(obj, "stop_gradient", True):
        # paddle refuses DLPack on a tensor that requires gradients (a
        # parameter); its detached twin shares the same memory.
        obj = obj.detach()
    if hasattr(obj, "__dlpack__"):
        capsule = obj.__dlpack__()
    else:  # older paddle: no __dlpack__ method, but paddle.utils.dlpack
        capsule = paddle_module().utils.dlpack.to_dlpack(obj)
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    t = managed.dl_tensor
    if t.device.device_type not in (_KDL_CPU, _KDL_CUDA_HOST):
        raise DistInvalidArgument(f"{fn}: {arg} is not in CPU memory (DLPack device type "
                                  f"{t.device.device_type}); tdist runs on CPUs")
    dtype = _dlpack_dtype(t.dtype, fn, arg)
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    count = 1
    for n in shape:
        count *= n
    if t.strides and count > 1:
        expected = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and int(t.strides[i]) != expected:
                raise DistInvalidArgument(f"{fn}: {arg} is not contiguous (shape {list(shape)}, strides "
                                          f"{[int(t.strides[k]) for k in range(t.ndim)]}); pass a contiguous "
                                          "copy and copy the result back")
            expected *= shape[i]
    bfloat16 = t.dtype.code == _KDL_BFLOAT
    if count == 0:
        view = numpy.empty(shape, dtype)
    else:
        buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(t.data + t.byte_offset)
        buffer._keep = (capsule, obj)  # the memory lives as long as the view
        view = numpy.frombuffer(buffer, dtype).reshape(shape)
    return view.view(BFloat16Bits) if bfloat16 else view


def as_tdist(obj, fn, arg):
    """`obj` as tdist's core takes it: a NumPy array or torch tensor itself,
    anything else as a zero-copy NumPy view. TypeError for non-tensors."""
    if is_numpy_array(obj) or is_torch_tensor(obj):
        return obj
    if is_paddle_tensor(obj) or hasattr(obj, "__dlpack__"):
        return _dlpack_view(obj, fn, arg)
    if obj is not None and not isinstance(obj, (list, tuple, str, dict)):
        try:
            view = memoryview(obj)
        except TypeError:
            pass
        else:
            return numpy.asarray(view)
    raise TypeError(f"{fn}: {arg} must be a tensor (paddle.Tensor, numpy.ndarray, CPU torch.Tensor, or an "
                    f"object with DLPack or the buffer protocol), not {type(obj).__name__}")


def as_tdist_list(objs, fn, arg):
    """as_tdist over a list or tuple of tensors."""
    if not isinstance(objs, (list, tuple)):
        raise TypeError(f"{fn}: {arg} must be a list of tensors, not {type(objs).__name__}")
    return [as_tdist(t, fn, f"{arg}[{i}]") for i, t in enumerate(objs)]


def shape_of(obj):
    """The shape of a tensor of any accepted kind, as a list of ints."""
    return [int(n) for n in obj.shape]


def empty_like(obj):
    """A new uninitialized tensor like `obj`, of the same kind (paddle, torch
    or NumPy; NumPy for other producers)."""
    if is_paddle_tensor(obj):
        return paddle_module().empty_like(obj)
    if is_torch_tensor(obj):
        return sys.modules["torch"].empty_like(obj)
    if is_numpy_array(obj):
        return numpy.empty_like(obj)
    view = as_tdist(obj, "empty_like", "tensor")
    return numpy.empty_like(view)


def split_rows(view, parts, fn, arg):
    """`view` (NumPy or torch) cut along its first dimension into `parts`
    equal contiguous blocks (views, no copy)."""
    shape = shape_of(view)
    if not shape or shape[0] % parts:
        raise DistInvalidArgument(f"{fn}: the first dimension of {arg} (shape {shape}) must divide by the "
                                  f"group size {parts}")
    rows = shape[0] // parts
    return [view[i * rows:(i + 1) * rows] for i in range(parts)]
