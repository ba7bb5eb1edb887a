"""The few array operations redistribution needs, for NumPy arrays and CPU
torch tensors alike (torch is used only if the tensor is one)."""

from tdist._tensors import is_torch_tensor


def element_size(t):
    return t.element_size() if is_torch_tensor(t) else t.itemsize


def shape(t):
    return tuple(int(s) for s in t.shape)


def contiguous_copy(t):
    """A contiguous copy that owns its memory."""
    if is_torch_tensor(t):
        return t.contiguous().clone()
    import numpy
    return numpy.array(t, copy=True, order="C")


def dim_first(t, dim):
    """`t` with dimension `dim` moved to the front, contiguous (a copy only if needed)."""
    if is_torch_tensor(t):
        return t.movedim(dim, 0).contiguous()
    import numpy
    return numpy.ascontiguousarray(numpy.moveaxis(t, dim, 0))


def dim_back(t, dim):
    """Inverse of dim_first: the front dimension moved back to `dim`, contiguous."""
    if is_torch_tensor(t):
        return t.movedim(0, dim).contiguous()
    import numpy
    return numpy.ascontiguousarray(numpy.moveaxis(t, 0, dim))


def empty(like, shape_):
    if is_torch_tensor(like):
        import torch
        return torch.empty(tuple(shape_), dtype=like.dtype)
    import numpy
    return numpy.empty(tuple(shape_), dtype=like.dtype)


def narrow(t, dim, start, length):
    """A contiguous copy of `t[..., start:start+length, ...]` along `dim`."""
    if is_torch_tensor(t):
        return t.narrow(dim, start, length).contiguous().clone()
    import numpy
    index = [slice(None)] * t.ndim
    index[dim] = slice(start, start + length)
    return numpy.array(t[tuple(index)], copy=True, order="C")


def concatenate(parts, dim):
    if is_torch_tensor(parts[0]):
        import torch
        return torch.cat(parts, dim)
    import numpy
    return numpy.concatenate(parts, axis=dim)


def fill(t, value):
    """A new tensor like `t` filled with `value`."""
    if is_torch_tensor(t):
        import torch
        return torch.full_like(t, value)
    import numpy
    return numpy.full_like(t, value)


def sum_over(t, dims, keepdim):
    """The sum over `dims` (a tuple; empty: a copy of `t`)."""
    if not dims:
        return contiguous_copy(t)
    if is_torch_tensor(t):
        return t.sum(dim=dims, keepdim=keepdim)
    return t.sum(axis=dims, keepdims=keepdim)


def reshape(t, shape_):
    return t.reshape(tuple(shape_))


def split(t, dim, lengths):
    """Contiguous copies of consecutive pieces of `t` along `dim`."""
    pieces, start = [], 0
    for n in lengths:
        pieces.append(narrow(t, dim, start, n))
        start += n
    return pieces


def kind(t):
    """"float", "complex", "bool" or "int": the kind of t's dtype."""
    if is_torch_tensor(t):
        import torch
        if t.dtype == torch.bool:
            return "bool"
        return "complex" if t.is_complex() else "float" if t.is_floating_point() else "int"
    return {"b": "bool", "f": "float", "c": "complex"}.get(t.dtype.kind, "int")


def negative_zero(t):
    """The additive identity that keeps every value's bits: -0.0 for floats
    (+0.0 would turn -0.0 into +0.0), 0 otherwise."""
    k = kind(t)
    return -0.0 if k == "float" else complex(-0.0, -0.0) if k == "complex" else 0
