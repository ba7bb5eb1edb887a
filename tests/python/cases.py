"""Test cases that run on every rank of a job: a name plus a function
fn(rank, world_size) that communicates and raises AssertionError on a wrong
result. References are computed here with NumPy from the inputs each rank
can rebuild (inputs are a function of rank and position), never with tdist.

run_cases() runs a whole list in one process group so hundreds of cases cost
one job; every rank runs every case, in order, and reports failures by name.
"""

import traceback

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - Debian's python3-torch is installed
    torch = None

NUMPY_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
                "complex128"]
TORCH_DTYPES = NUMPY_DTYPES + ["bfloat16"]
FLOATS = {"float16", "bfloat16", "float32", "float64"}
COMPLEX = {"complex64", "complex128"}
LIBS = ["numpy", "torch"] if torch is not None else ["numpy"]


def dtypes_of(lib):
    return NUMPY_DTYPES if lib == "numpy" else TORCH_DTYPES


def values(rank, shape, salt=0, dtype="float32"):
    """Reference inputs: small positive integers (exact in every float type),
    0/1 for bool, with an imaginary part for complex."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64)
    v = ((i * 3 + rank * 5 + salt * 11) % 7 + 1).astype(np.float64)
    if dtype == "bool":
        v = (v % 2).astype(np.float64)
    if dtype in COMPLEX:
        v = v + 1j * ((i + rank + salt) % 3)
    return v.reshape(shape)


def make(lib, dtype, array):
    """A tensor of `lib` and `dtype` holding `array` (a float/complex NumPy array)."""
    array = np.asarray(array)
    if lib == "numpy":
        if dtype == "bool":
            return array.real != 0
        return np.ascontiguousarray(array if dtype in COMPLEX else array.real).astype(dtype)
    if dtype in COMPLEX:
        return torch.from_numpy(np.ascontiguousarray(array.astype(np.complex128))).to(getattr(torch, dtype))
    return torch.from_numpy(np.ascontiguousarray(array.real.astype(np.float64))).to(getattr(torch, dtype))


def zeros(lib, dtype, shape):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if lib == "numpy":
        return np.zeros(shape, dtype=dtype)
    return torch.zeros(shape, dtype=getattr(torch, dtype))


def as_numpy(t):
    """float64 (complex128 for complex) NumPy copy of a tensor, for comparison."""
    if isinstance(t, np.ndarray):
        return t.astype(np.complex128 if np.iscomplexobj(t) else np.float64)
    if t.is_complex():
        return t.to(torch.complex128).numpy()
    return t.to(torch.float64).numpy()


def expect_equal(got, want, what):
    got_np = as_numpy(got)
    want = np.asarray(want)
    if got_np.shape != want.shape or not np.array_equal(got_np, want):
        raise AssertionError(f"{what}: got {got_np.tolist()} (shape {got_np.shape}), "
                             f"expected {want.tolist()} (shape {want.shape})")


def expect_raises(error_type, fn, what, match=None):
    try:
        fn()
    except error_type as error:
        if match is not None and match not in str(error):
            raise AssertionError(f"{what}: {error_type.__name__} without {match!r}: {error}") from None
        return error
    except BaseException as error:
        raise AssertionError(f"{what}: expected {error_type.__name__}, got {type(error).__name__}: {error}") from None
    raise AssertionError(f"{what}: expected {error_type.__name__}, nothing was raised")


def run_cases(cases, rank, world_size):
    """Runs every case; returns {name: None or the failure's text}."""
    results = {}
    for name, fn in cases:
        try:
            fn(rank, world_size)
            results[name] = None
        except BaseException:
            results[name] = traceback.format_exc(limit=4)
    return results


def merge(per_rank_results):
    """{name: None if every rank passed, else the failures by rank}."""
    merged = {}
    for rank, results in enumerate(per_rank_results):
        for name, failure in results.items():
            if failure is not None:
                merged[name] = (merged.get(name) or "") + f"\n--- rank {rank}:\n{failure}"
            else:
                merged.setdefault(name, None)
    return merged
