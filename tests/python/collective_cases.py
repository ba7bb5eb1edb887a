"""The collective matrix: every collective x NumPy/torch x every dtype x
element counts 0, 1 and 7 (plus each reduce op), checked against NumPy
references. build(world_size) lists (name, fn) cases for cases.run_cases.
"""

import numpy as np

import tdist as dist
from cases import (COMPLEX, FLOATS, LIBS, as_numpy, dtypes_of, expect_equal, expect_raises, make, values, zeros)

COUNTS = [0, 1, 7]
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG", "PREMUL_SUM"]


def reduce_supported(op, dtype):
    """Which ops torch.distributed defines for which dtypes (see ReduceOp)."""
    if dtype == "bool":
        return op not in ("AVG", "PREMUL_SUM")
    if dtype in COMPLEX:
        return op in ("SUM", "AVG", "PREMUL_SUM")
    if dtype in FLOATS:
        return op not in ("BAND", "BOR", "BXOR")
    return True


def op_object(op):
    return dist._make_nccl_premul_sum(2.0) if op == "PREMUL_SUM" else getattr(dist.ReduceOp, op)


def op_inputs(op, rank, n, salt=0, dtype="float32"):
    """Inputs of a reduction; PRODUCT uses 1s and 2s so products stay exact."""
    v = values(rank, n, salt, dtype)
    if op == "PRODUCT" and dtype != "bool":
        v = 1 + (np.arange(n) + rank + salt) % 2
    return v


def reduce_ref(op, arrays, dtype):
    """The reduction of the ranks' inputs, as float64/complex128."""
    s = np.stack(arrays)
    if dtype == "bool":
        b = s.real != 0
        out = {"SUM": b.any(0), "MAX": b.any(0), "BOR": b.any(0), "PRODUCT": b.all(0), "MIN": b.all(0),
               "BAND": b.all(0), "BXOR": b.sum(0) % 2 == 1}[op]
        return out.astype(np.float64)
    if op in ("BAND", "BOR", "BXOR"):
        ufunc = {"BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}[op]
        return ufunc.reduce(s.real.astype(np.int64), axis=0).astype(np.float64)
    if op == "SUM":
        return s.sum(0)
    if op == "PREMUL_SUM":
        return (2 * s).sum(0)
    if op == "PRODUCT":
        return s.prod(0)
    if op == "MIN":
        return s.min(0)
    if op == "MAX":
        return s.max(0)
    avg = s.sum(0) / len(arrays)  # AVG: integers truncate toward zero
    return avg if dtype in FLOATS or dtype in COMPLEX else np.trunc(avg)


def _wait(work, async_op):
    if async_op:
        assert work is not None and work.wait() is True
        assert work.is_completed() and work.is_success()
    else:
        assert work is None


def case_all_reduce(lib, dtype, count, op, async_op=False):
    def fn(rank, world):
        t = make(lib, dtype, op_inputs(op, rank, count, dtype=dtype))
        if not reduce_supported(op, dtype):
            expect_raises(dist.DistInvalidArgument, lambda: dist.all_reduce(t, op=op_object(op)), "all_reduce")
            return
        _wait(dist.all_reduce(t, op=op_object(op), async_op=async_op), async_op)
        want = reduce_ref(op, [op_inputs(op, r, count, dtype=dtype) for r in range(world)], dtype)
        expect_equal(t, want, "all_reduce")
    return fn


def case_reduce(lib, dtype, count, op):
    def fn(rank, world):
        dst = world - 1
        mine = op_inputs(op, rank, count, dtype=dtype)
        t = make(lib, dtype, mine)
        dist.reduce(t, dst, op=op_object(op))
        if rank == dst:
            want = reduce_ref(op, [op_inputs(op, r, count, dtype=dtype) for r in range(world)], dtype)
        else:  # other ranks' tensors are left as they were
            want = as_ref(lib, dtype, mine)
        expect_equal(t, want, "reduce")
    return fn


def as_ref(lib, dtype, v):
    """What a tensor of `dtype` holding `v` reads back as (e.g. bool: 0/1)."""
    return as_numpy(make(lib, dtype, v))


def case_broadcast(lib, dtype, count, async_op=False):
    def fn(rank, world):
        src = world - 1
        t = make(lib, dtype, values(rank, count, dtype=dtype))
        _wait(dist.broadcast(t, src, async_op=async_op), async_op)
        expect_equal(t, as_ref(lib, dtype, values(src, count, dtype=dtype)), "broadcast")
    return fn


def case_all_gather(lib, dtype, count, async_op=False):
    def fn(rank, world):
        out = [zeros(lib, dtype, count) for _ in range(world)]
        _wait(dist.all_gather(out, make(lib, dtype, values(rank, count, dtype=dtype)), async_op=async_op),
              async_op)
        for r in range(world):
            expect_equal(out[r], as_ref(lib, dtype, values(r, count, dtype=dtype)), f"all_gather[{r}]")
    return fn


def case_all_gather_into_tensor(lib, dtype, count, stacked, async_op=False):
    def fn(rank, world):
        out = zeros(lib, dtype, (world, count) if stacked else world * count)
        inp = make(lib, dtype, values(rank, count, dtype=dtype))
        _wait(dist.all_gather_into_tensor(out, inp, async_op=async_op), async_op)
        want = np.stack([as_ref(lib, dtype, values(r, count, dtype=dtype)) for r in range(world)])
        expect_equal(out, want if stacked else want.reshape(-1), "all_gather_into_tensor")
    return fn


def uneven_rows(world, count):
    """Rows per rank for the uneven collectives: includes 0 rows when count is 0."""
    return [(r + count) % 3 for r in range(world)]


def case_all_gather_uneven(lib, dtype, count):
    def fn(rank, world):
        rows = uneven_rows(world, count)
        out = zeros(lib, dtype, (sum(rows), 2))
        inp = make(lib, dtype, values(rank, (rows[rank], 2), dtype=dtype))
        dist.all_gather_into_tensor_uneven(out, inp, rows)
        want = np.concatenate([as_ref(lib, dtype, values(r, (rows[r], 2), dtype=dtype)) for r in range(world)])
        expect_equal(out, want, "all_gather_into_tensor_uneven")
    return fn


def case_gather(lib, dtype, count, async_op=False):
    def fn(rank, world):
        dst = world - 1
        out = [zeros(lib, dtype, count) for _ in range(world)] if rank == dst else None
        _wait(dist.gather(make(lib, dtype, values(rank, count, dtype=dtype)), out, dst=dst, async_op=async_op),
              async_op)
        if rank == dst:
            for r in range(world):
                expect_equal(out[r], as_ref(lib, dtype, values(r, count, dtype=dtype)), f"gather[{r}]")
    return fn


def case_scatter(lib, dtype, count, async_op=False):
    def fn(rank, world):
        src = 0
        inputs = [make(lib, dtype, values(r, count, salt=1, dtype=dtype)) for r in range(world)] if rank == src else None
        out = zeros(lib, dtype, count)
        _wait(dist.scatter(out, inputs, src=src, async_op=async_op), async_op)
        expect_equal(out, as_ref(lib, dtype, values(rank, count, salt=1, dtype=dtype)), "scatter")
    return fn


def case_reduce_scatter(lib, dtype, count, op, async_op=False):
    def fn(rank, world):
        inputs = [make(lib, dtype, op_inputs(op, rank, count, salt=i, dtype=dtype)) for i in range(world)]
        out = zeros(lib, dtype, count)
        _wait(dist.reduce_scatter(out, inputs, op=op_object(op), async_op=async_op), async_op)
        want = reduce_ref(op, [op_inputs(op, r, count, salt=rank, dtype=dtype) for r in range(world)], dtype)
        expect_equal(out, want, "reduce_scatter")
    return fn


def case_reduce_scatter_tensor(lib, dtype, count, op, stacked):
    def fn(rank, world):
        blocks = [op_inputs(op, rank, count, salt=i, dtype=dtype) for i in range(world)]
        inp = make(lib, dtype, np.stack(blocks) if stacked else np.concatenate(blocks))
        out = zeros(lib, dtype, count)
        dist.reduce_scatter_tensor(out, inp, op=op_object(op))
        want = reduce_ref(op, [op_inputs(op, r, count, salt=rank, dtype=dtype) for r in range(world)], dtype)
        expect_equal(out, want, "reduce_scatter_tensor")
    return fn


def case_reduce_scatter_uneven(lib, dtype, count):
    def fn(rank, world):
        rows = uneven_rows(world, count)
        inp = make(lib, dtype, values(rank, (sum(rows), 2), dtype=dtype))
        out = zeros(lib, dtype, (rows[rank], 2))
        dist.reduce_scatter_tensor_uneven(out, inp, rows)
        start = sum(rows[:rank])
        want = sum(values(r, (sum(rows), 2), dtype=dtype)[start:start + rows[rank]] for r in range(world))
        if dtype == "bool":
            want = (want != 0).astype(np.float64)
        expect_equal(out, want, "reduce_scatter_tensor_uneven")
    return fn


def a2a_size(sender, receiver, count):
    return (sender + 2 * receiver) % 3 + count


def case_all_to_all(lib, dtype, count, async_op=False):
    def fn(rank, world):
        inputs = [make(lib, dtype, values(rank, a2a_size(rank, j, count), salt=j, dtype=dtype)) for j in range(world)]
        outputs = [zeros(lib, dtype, a2a_size(j, rank, count)) for j in range(world)]
        _wait(dist.all_to_all(outputs, inputs, async_op=async_op), async_op)
        for j in range(world):
            want = as_ref(lib, dtype, values(j, a2a_size(j, rank, count), salt=rank, dtype=dtype))
            expect_equal(outputs[j], want, f"all_to_all[{j}]")
    return fn


def case_all_to_all_single(lib, dtype, count, with_splits, async_op=False):
    def fn(rank, world):
        if with_splits:
            in_splits = [a2a_size(rank, j, count) for j in range(world)]
            out_splits = [a2a_size(j, rank, count) for j in range(world)]
        else:
            in_splits = out_splits = [count] * world
        inp = make(lib, dtype, np.concatenate([values(rank, in_splits[j], salt=j, dtype=dtype)
                                               for j in range(world)]))
        out = zeros(lib, dtype, sum(out_splits))
        work = dist.all_to_all_single(out, inp, out_splits if with_splits else None,
                                      in_splits if with_splits else None, async_op=async_op)
        _wait(work, async_op)
        want = np.concatenate([as_ref(lib, dtype, values(j, out_splits[j], salt=rank, dtype=dtype))
                               for j in range(world)])
        expect_equal(out, want, "all_to_all_single")
    return fn


def case_barrier(async_op):
    def fn(rank, world):
        _wait(dist.barrier(async_op=async_op), async_op)
    return fn


def build(world_size):
    """Every case, named "<op>-<lib>-<dtype>-n<count>[-variant]"."""
    cases = []
    for lib in LIBS:
        for dtype in dtypes_of(lib):
            for count in COUNTS:
                tag = f"{lib}-{dtype}-n{count}"
                cases += [
                    (f"broadcast-{tag}", case_broadcast(lib, dtype, count)),
                    (f"all_reduce-SUM-{tag}", case_all_reduce(lib, dtype, count, "SUM")),
                    (f"reduce-SUM-{tag}", case_reduce(lib, dtype, count, "SUM")),
                    (f"all_gather-{tag}", case_all_gather(lib, dtype, count)),
                    (f"all_gather_into_tensor-{tag}", case_all_gather_into_tensor(lib, dtype, count, False)),
                    (f"all_gather_into_tensor-stacked-{tag}",
                     case_all_gather_into_tensor(lib, dtype, count, True)),
                    (f"all_gather_into_tensor_uneven-{tag}", case_all_gather_uneven(lib, dtype, count)),
                    (f"gather-{tag}", case_gather(lib, dtype, count)),
                    (f"scatter-{tag}", case_scatter(lib, dtype, count)),
                    (f"reduce_scatter-SUM-{tag}", case_reduce_scatter(lib, dtype, count, "SUM")),
                    (f"reduce_scatter_tensor-SUM-{tag}", case_reduce_scatter_tensor(lib, dtype, count, "SUM", False)),
                    (f"reduce_scatter_tensor_uneven-{tag}", case_reduce_scatter_uneven(lib, dtype, count)),
                    (f"all_to_all-{tag}", case_all_to_all(lib, dtype, count)),
                    (f"all_to_all_single-{tag}", case_all_to_all_single(lib, dtype, count, False)),
                    (f"all_to_all_single-splits-{tag}", case_all_to_all_single(lib, dtype, count, True)),
                ]
            # Every reduce op, on 7 elements.
            for op in OPS:
                tag = f"{lib}-{dtype}-n7"
                if op != "SUM":
                    cases.append((f"all_reduce-{op}-{tag}", case_all_reduce(lib, dtype, 7, op)))
                if reduce_supported(op, dtype) and op in ("MAX", "PRODUCT", "AVG", "BXOR"):
                    cases.append((f"reduce-{op}-{tag}", case_reduce(lib, dtype, 7, op)))
                    cases.append((f"reduce_scatter_tensor-{op}-stacked-{tag}",
                                  case_reduce_scatter_tensor(lib, dtype, 7, op, True)))
        # async_op=True on every collective (float32, 5 elements).
        for name, fn in [
            ("broadcast", case_broadcast(lib, "float32", 5, async_op=True)),
            ("all_reduce", case_all_reduce(lib, "float32", 5, "SUM", async_op=True)),
            ("all_gather", case_all_gather(lib, "float32", 5, async_op=True)),
            ("all_gather_into_tensor", case_all_gather_into_tensor(lib, "float32", 5, False, async_op=True)),
            ("gather", case_gather(lib, "float32", 5, async_op=True)),
            ("scatter", case_scatter(lib, "float32", 5, async_op=True)),
            ("reduce_scatter", case_reduce_scatter(lib, "float32", 5, "MAX", async_op=True)),
            ("all_to_all", case_all_to_all(lib, "float32", 5, async_op=True)),
            ("all_to_all_single", case_all_to_all_single(lib, "float32", 5, True, async_op=True)),
        ]:
            cases.append((f"{name}-async-{lib}", fn))
    cases += [("barrier", case_barrier(False)), ("barrier-async", case_barrier(True))]
    return cases
