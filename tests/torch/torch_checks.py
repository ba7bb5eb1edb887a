"""Inputs and independent references shared by the test suites.

Every rank can compute every other rank's input (make_input is a pure
function of rank, count and dtype), so each rank computes the expected
result of a collective itself, with plain torch ops on those inputs. Values
are small integers so that every dtype (float16 and bfloat16 included)
represents inputs and results exactly, whatever the summation order.
"""

import functools

import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.uint8, torch.int8, torch.int16, torch.bool]
FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INT_DTYPES = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]
COUNTS = [0, 1, 7, 1001]


class Context:
    def __init__(self, rank, world_size):
        self.rank = rank
        self.world_size = world_size

    @property
    def ranks(self):
        return range(self.world_size)


def make_input(rank, count, dtype, salt=0, low=0, high=4):
    """Rank `rank`'s deterministic input: integers in [low, high) as `dtype`."""
    base = (torch.arange(count, dtype=torch.int64) * (rank + 3) + rank * 5 + salt * 7) % (high - low) + low
    if dtype == torch.bool:
        return base % 2 == 1
    return base.to(dtype)


def reduce_reference(tensors, op, world_size, dtype, factor=None):
    """The expected result of reducing `tensors` (one per rank) with `op`."""
    if op == "SUM":
        return functools.reduce(torch.add, tensors)
    if op == "PRODUCT":
        return functools.reduce(torch.mul, tensors)
    if op == "MIN":
        return functools.reduce(torch.minimum, tensors)
    if op == "MAX":
        return functools.reduce(torch.maximum, tensors)
    if op == "BAND":
        return functools.reduce(torch.bitwise_and, tensors)
    if op == "BOR":
        return functools.reduce(torch.bitwise_or, tensors)
    if op == "BXOR":
        return functools.reduce(torch.bitwise_xor, tensors)
    if op == "AVG":
        total = functools.reduce(torch.add, [t.to(torch.float64) for t in tensors])
        if dtype.is_floating_point:
            return (total / world_size).to(dtype)
        return torch.div(total, world_size, rounding_mode="trunc").to(dtype)
    if op == "PREMUL_SUM":
        return functools.reduce(torch.add, [t * int(factor) if not dtype.is_floating_point else t * factor
                                            for t in tensors])
    raise ValueError(op)


def ops_for(dtype):
    """The reduce ops torch defines for `dtype` (tdist implements each)."""
    if dtype == torch.bool:
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    ops = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM"]
    if not dtype.is_floating_point:
        ops += ["BAND", "BOR", "BXOR"]
    return ops


def torch_op(name, factor=2.0):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(factor)
    return getattr(dist.ReduceOp, name)


def assert_equal(actual, expected, what):
    if actual.dtype != expected.dtype or actual.shape != expected.shape or not torch.equal(actual, expected):
        raise AssertionError("%s: got %s %s %s, expected %s %s %s" % (
            what, actual.dtype, tuple(actual.shape), actual.flatten()[:16].tolist(),
            expected.dtype, tuple(expected.shape), expected.flatten()[:16].tolist()))


def expect_error(fn, *fragments, errors=RuntimeError):
    """Runs fn(); it must raise RuntimeError (or `errors`) whose message contains every fragment."""
    try:
        fn()
    except errors as e:
        message = str(e)
        for fragment in fragments:
            if fragment.lower() not in message.lower():
                raise AssertionError("error message %r lacks %r" % (message, fragment))
        return message
    raise AssertionError("no RuntimeError raised (expected one mentioning %r)" % (fragments,))
