"""A stand-in for the few paddle calls the tests make, standing for any
DLPack producer that is not paddle (the cases run on real paddle too): ``paddle.Tensor`` backed by a NumPy array that exports
itself through DLPack only (no buffer protocol, no __array__), as a CPU
paddle tensor does, plus to_tensor, empty, empty_like, arange and is_tensor.

``install()`` puts it in sys.modules as ``paddle`` (in a rank process only),
so tdist.paddle finds it exactly where it would find the real one.
"""

import sys
import types

import numpy


class Tensor:
    def __init__(self, array):
        self._array = numpy.ascontiguousarray(array)

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    @property
    def shape(self):
        return list(self._array.shape)

    @property
    def dtype(self):
        return str(self._array.dtype)

    def numpy(self):
        return self._array.copy()

    def __repr__(self):
        return f"Tensor({self._array.tolist()})"


def to_tensor(data, dtype=None):
    return Tensor(numpy.array(data, dtype=dtype))


def empty(shape, dtype="float32"):
    return Tensor(numpy.empty(shape, dtype=dtype))


def empty_like(t):
    return Tensor(numpy.empty_like(t._array))


def arange(n, dtype="int64"):
    return Tensor(numpy.arange(n, dtype=dtype))


def is_tensor(x):
    return isinstance(x, Tensor)


def install():
    module = types.ModuleType("paddle")
    for name in ("Tensor", "to_tensor", "empty", "empty_like", "arange", "is_tensor"):
        setattr(module, name, globals()[name])
    sys.modules["paddle"] = module
    return module
