"""What the Python layer needs to know about tensor arguments.

tdist._C wraps NumPy arrays and CPU torch tensors without copying. This module
only answers questions the C++ side does not: is an object a tensor (without
importing torch), what is its dtype, and -- for collectives whose inputs and
outputs sit on the same rank -- a converted copy of an input whose dtype
differs from the output's.
"""

import sys

from tdist._C import DistInvalidArgument


def _torch():
    """The torch module if the user imported it, else None (never imports it)."""
    return sys.modules.get("torch")


def is_torch_tensor(obj):
    torch = _torch()
    return torch is not None and hasattr(torch, "Tensor") and isinstance(obj, torch.Tensor)


def is_numpy_array(obj):
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray)


def is_tensor(obj):
    """True for a NumPy array or a torch tensor."""
    return is_numpy_array(obj) or is_torch_tensor(obj)


def dtype_name(obj):
    """torch's name of the element type ("float32", "bfloat16", ...)."""
    if is_torch_tensor(obj):
        return str(obj.dtype).replace("torch.", "")
    if getattr(type(obj), "tdist_bfloat16", False):  # tdist.paddle's view of bfloat16 bits
        return "bfloat16"
    return str(obj.dtype)


def _convert(tensor, like, op, arg):
    """`tensor` converted to the dtype of `like` (same library, same-kind cast)."""
    if is_torch_tensor(tensor) and is_torch_tensor(like):
        torch = _torch()
        if not torch.can_cast(tensor.dtype, like.dtype):
            raise DistInvalidArgument(
                f"{op}: {arg} has dtype {dtype_name(tensor)} but the output has {dtype_name(like)}, "
                "and that conversion would lose the kind of value (e.g. float to int)")
        return tensor.to(like.dtype).contiguous()
    if is_numpy_array(tensor) and is_numpy_array(like) and "bfloat16" not in (dtype_name(tensor), dtype_name(like)):
        import numpy
        if not numpy.can_cast(tensor.dtype, like.dtype, casting="same_kind"):
            raise DistInvalidArgument(
                f"{op}: {arg} has dtype {dtype_name(tensor)} but the output has {dtype_name(like)}, "
                "and that conversion would lose the kind of value (e.g. float to int)")
        return numpy.ascontiguousarray(tensor.astype(like.dtype, casting="same_kind"))
    raise DistInvalidArgument(
        f"{op}: {arg} ({type(tensor).__name__} of {dtype_name(tensor)}) and the output "
        f"({type(like).__name__} of {dtype_name(like)}) must have the same dtype")


def adopt_dtype(tensor, like, op, arg):
    """`tensor` itself if its dtype is that of `like`, else a converted copy.

    torch.distributed requires equal dtypes; tdist converts a rank's own
    inputs to the dtype of its output instead (as Tensor.copy_ would), which
    is what the spec's scatter, reduce_scatter and all_to_all programs need.
    Only same-kind conversions are made (int -> float yes, float -> int no).
    """
    if not is_tensor(tensor) or not is_tensor(like) or dtype_name(tensor) == dtype_name(like):
        return tensor  # (a NumPy input for a torch output of the same dtype is fine too)
    return _convert(tensor, like, op, arg)


def adopt_dtype_list(tensors, like, op, arg):
    """adopt_dtype over a list; the list itself if nothing changed."""
    if tensors is None or like is None or not isinstance(tensors, (list, tuple)):
        return tensors
    out = [adopt_dtype(t, like, op, f"{arg}[{i}]") for i, t in enumerate(tensors)]
    return tensors if all(a is b for a, b in zip(out, tensors)) else out


def common_output(tensors):
    """The first tensor of a list of outputs if every entry shares its dtype, else None."""
    if not isinstance(tensors, (list, tuple)) or not tensors or not is_tensor(tensors[0]):
        return None
    first = tensors[0]
    for t in tensors[1:]:
        if not is_tensor(t) or dtype_name(t) != dtype_name(first):
            return None
    return first
