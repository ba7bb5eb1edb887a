"""Every collective of torch.distributed on the tdist backend, for each dtype
and element counts 0, 1, odd and large, against references computed here."""

import torch
import torch.distributed as dist

from torch_checks import (COUNTS, DTYPES, FLOAT_DTYPES, assert_equal, make_input, ops_for, reduce_reference,
                    torch_op)


def check_broadcast(ctx):
    for dtype in DTYPES + [torch.complex64]:
        for count in COUNTS:
            for src in {0, ctx.world_size - 1}:
                if dtype.is_complex:
                    t = torch.complex(make_input(ctx.rank, count, torch.float32), make_input(ctx.rank, count, torch.float32, 1))
                    expected = torch.complex(make_input(src, count, torch.float32), make_input(src, count, torch.float32, 1))
                else:
                    t = make_input(ctx.rank, count, dtype)
                    expected = make_input(src, count, dtype)
                dist.broadcast(t, src=src)
                assert_equal(t, expected, "broadcast %s count %d src %d" % (dtype, count, src))


def check_all_reduce_every_op(ctx):
    for dtype in DTYPES:
        for op in ops_for(dtype):
            for count in COUNTS:
                inputs = [make_input(r, count, dtype, low=1 if op == "PRODUCT" else 0) for r in ctx.ranks]
                t = inputs[ctx.rank].clone()
                dist.all_reduce(t, op=torch_op(op))
                expected = reduce_reference(inputs, op, ctx.world_size, dtype, factor=2.0)
                assert_equal(t, expected, "all_reduce %s %s count %d" % (op, dtype, count))


def check_all_reduce_shapes_and_complex(ctx):
    inputs = [make_input(r, 24, torch.float64).view(2, 3, 4) for r in ctx.ranks]
    t = inputs[ctx.rank].clone()
    dist.all_reduce(t)
    assert_equal(t, reduce_reference(inputs, "SUM", ctx.world_size, torch.float64), "all_reduce 3-d")
    # A 0-dim tensor.
    s = torch.tensor(float(ctx.rank + 1))
    dist.all_reduce(s, op=dist.ReduceOp.MAX)
    assert_equal(s, torch.tensor(float(ctx.world_size)), "all_reduce 0-dim")
    # torch passes complex tensors to the backend as real views (SUM only).
    c = torch.complex(make_input(ctx.rank, 5, torch.float32), make_input(ctx.rank, 5, torch.float32, 2))
    expected = sum(torch.complex(make_input(r, 5, torch.float32), make_input(r, 5, torch.float32, 2))
                   for r in ctx.ranks)
    dist.all_reduce(c)
    assert_equal(c, expected, "all_reduce complex64")


def check_reduce(ctx):
    for dtype in DTYPES:
        for op in ["SUM", "MAX"] + (["AVG"] if dtype != torch.bool else []):
            for count in COUNTS:
                for dst in {0, ctx.world_size - 1}:
                    inputs = [make_input(r, count, dtype) for r in ctx.ranks]
                    t = inputs[ctx.rank].clone()
                    dist.reduce(t, dst=dst, op=torch_op(op))
                    if ctx.rank == dst:
                        expected = reduce_reference(inputs, op, ctx.world_size, dtype)
                        assert_equal(t, expected, "reduce %s %s count %d dst %d" % (op, dtype, count, dst))


def check_all_gather(ctx):
    for dtype in DTYPES:
        for count in COUNTS:
            inp = make_input(ctx.rank, count, dtype)
            out = [torch.full((count,), 9).to(dtype) for _ in ctx.ranks]
            dist.all_gather(out, inp)
            for r in ctx.ranks:
                assert_equal(out[r], make_input(r, count, dtype), "all_gather %s count %d slot %d" % (dtype, count, r))
    # Two-dimensional tensors.
    inp = make_input(ctx.rank, 6, torch.int64).view(2, 3)
    out = [torch.empty(2, 3, dtype=torch.int64) for _ in ctx.ranks]
    dist.all_gather(out, inp)
    for r in ctx.ranks:
        assert_equal(out[r], make_input(r, 6, torch.int64).view(2, 3), "all_gather 2-d slot %d" % r)


def check_all_gather_into_tensor(ctx):
    for dtype in DTYPES:
        for count in COUNTS:
            inp = make_input(ctx.rank, count, dtype)
            expected = torch.cat([make_input(r, count, dtype) for r in ctx.ranks])
            out = torch.zeros(count * ctx.world_size).to(dtype)
            dist.all_gather_into_tensor(out, inp)
            assert_equal(out, expected, "all_gather_into_tensor concat %s count %d" % (dtype, count))
            stacked = torch.zeros(ctx.world_size, count).to(dtype)
            dist.all_gather_into_tensor(stacked, inp)
            assert_equal(stacked, expected.view(ctx.world_size, count),
                         "all_gather_into_tensor stacked %s count %d" % (dtype, count))
    # In place: the input is this rank's slot of the output.
    out = torch.zeros(3 * ctx.world_size)
    out[3 * ctx.rank:3 * ctx.rank + 3] = make_input(ctx.rank, 3, torch.float32)
    dist.all_gather_into_tensor(out, out[3 * ctx.rank:3 * ctx.rank + 3])
    assert_equal(out, torch.cat([make_input(r, 3, torch.float32) for r in ctx.ranks]), "all_gather in place")


def check_gather(ctx):
    for dtype in DTYPES:
        for count in COUNTS:
            for dst in {0, ctx.world_size - 1}:
                inp = make_input(ctx.rank, count, dtype)
                out = [torch.zeros(count).to(dtype) for _ in ctx.ranks] if ctx.rank == dst else None
                dist.gather(inp, out, dst=dst)
                if ctx.rank == dst:
                    for r in ctx.ranks:
                        assert_equal(out[r], make_input(r, count, dtype),
                                     "gather %s count %d dst %d slot %d" % (dtype, count, dst, r))


def check_scatter(ctx):
    for dtype in DTYPES:
        for count in COUNTS:
            for src in {0, ctx.world_size - 1}:
                pieces = [make_input(100 + r, count, dtype) for r in ctx.ranks]
                out = torch.zeros(count).to(dtype)
                dist.scatter(out, pieces if ctx.rank == src else None, src=src)
                assert_equal(out, pieces[ctx.rank], "scatter %s count %d src %d" % (dtype, count, src))


def check_reduce_scatter(ctx):
    # Gloo has no reduce_scatter; tdist runs it as one operation.
    for dtype in DTYPES:
        for op in ops_for(dtype):
            for count in [0, 1, 7]:
                lists = [[make_input(r, count, dtype, salt=j, low=1 if op == "PRODUCT" else 0)
                          for j in ctx.ranks] for r in ctx.ranks]
                out = torch.zeros(count).to(dtype)
                dist.reduce_scatter(out, [t.clone() for t in lists[ctx.rank]], op=torch_op(op))
                expected = reduce_reference([lists[r][ctx.rank] for r in ctx.ranks], op, ctx.world_size, dtype,
                                            factor=2.0)
                assert_equal(out, expected, "reduce_scatter %s %s count %d" % (op, dtype, count))


def check_reduce_scatter_tensor(ctx):
    for dtype in DTYPES:
        for op in ["SUM", "MIN"] + (["AVG"] if dtype != torch.bool else []):
            for count in COUNTS:
                inputs = [make_input(r, count * ctx.world_size, dtype) for r in ctx.ranks]
                out = torch.zeros(count).to(dtype)
                dist.reduce_scatter_tensor(out, inputs[ctx.rank].clone(), op=torch_op(op))
                full = reduce_reference(inputs, op, ctx.world_size, dtype)
                assert_equal(out, full[count * ctx.rank:count * (ctx.rank + 1)],
                             "reduce_scatter_tensor %s %s count %d" % (op, dtype, count))
    # Stacked input: (world_size, rows, cols) -> (rows, cols).
    inputs = [make_input(r, ctx.world_size * 6, torch.float32).view(ctx.world_size, 2, 3) for r in ctx.ranks]
    out = torch.empty(2, 3)
    dist.reduce_scatter_tensor(out, inputs[ctx.rank].clone())
    assert_equal(out, reduce_reference(inputs, "SUM", ctx.world_size, torch.float32)[ctx.rank],
                 "reduce_scatter_tensor stacked")


def _pair_size(src, dst):
    return (src + 2 * dst) % 3  # uneven, sometimes 0


def check_all_to_all_list(ctx):
    # Gloo has no list all_to_all. Sizes differ per pair (0 included).
    for dtype in DTYPES:
        inputs = [make_input(ctx.rank * 10 + j, _pair_size(ctx.rank, j), dtype) for j in ctx.ranks]
        outputs = [torch.zeros(_pair_size(i, ctx.rank)).to(dtype) for i in ctx.ranks]
        dist.all_to_all(outputs, inputs)
        for i in ctx.ranks:
            assert_equal(outputs[i], make_input(i * 10 + ctx.rank, _pair_size(i, ctx.rank), dtype),
                         "all_to_all %s from rank %d" % (dtype, i))


def check_all_to_all_single(ctx):
    w = ctx.world_size
    for dtype in DTYPES:
        for rows in [0, 1, 3]:
            # Equal splits: rank r's block j goes to rank j.
            blocks = {(r, j): make_input(r * 10 + j, rows * 2, dtype).view(rows, 2) for r in ctx.ranks for j in ctx.ranks}
            inp = torch.cat([blocks[(ctx.rank, j)] for j in ctx.ranks])
            out = torch.zeros(w * rows, 2).to(dtype)
            dist.all_to_all_single(out, inp)
            assert_equal(out, torch.cat([blocks[(i, ctx.rank)] for i in ctx.ranks]),
                         "all_to_all_single equal %s rows %d" % (dtype, rows))
        # Uneven splits (rows), some zero.
        send = [_pair_size(ctx.rank, j) for j in ctx.ranks]
        recv = [_pair_size(i, ctx.rank) for i in ctx.ranks]
        inp = torch.cat([make_input(ctx.rank * 10 + j, send[j] * 3, dtype).view(send[j], 3) for j in ctx.ranks])
        out = torch.zeros(sum(recv), 3).to(dtype)
        dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
        expected = torch.cat([make_input(i * 10 + ctx.rank, recv[i] * 3, dtype).view(recv[i], 3) for i in ctx.ranks])
        assert_equal(out, expected, "all_to_all_single uneven %s" % dtype)


def check_coalesced(ctx):
    tensors_of = lambda r: [make_input(r, 3, torch.float64), make_input(r, 5, torch.float64, 1).view(5, 1),
                            make_input(r, 0, torch.float64)]
    mine = [t.clone() for t in tensors_of(ctx.rank)]
    dist.all_reduce_coalesced(mine)
    for i, t in enumerate(mine):
        assert_equal(t, reduce_reference([tensors_of(r)[i] for r in ctx.ranks], "SUM", ctx.world_size, torch.float64),
                     "all_reduce_coalesced tensor %d" % i)
    outputs = [[torch.zeros_like(t) for t in tensors_of(0)] for _ in ctx.ranks]
    dist.all_gather_coalesced(outputs, tensors_of(ctx.rank))
    for r in ctx.ranks:
        for i, t in enumerate(tensors_of(r)):
            assert_equal(outputs[r][i], t, "all_gather_coalesced rank %d tensor %d" % (r, i))


def check_barrier(ctx):
    # Every rank counts itself in (in the group's store) before each barrier;
    # after it, every rank's count for that round must be there.
    store = dist.distributed_c10d._get_default_store()
    for round_ in range(1, 4):
        store.add("barrier_arrivals", 1)
        if round_ == 2:
            work = dist.barrier(async_op=True)
            work.wait()
            assert work.is_completed()
        else:
            dist.barrier()
        arrived = store.add("barrier_arrivals", 0)
        assert arrived >= round_ * ctx.world_size, "barrier %d let a rank through after %d arrivals" % (
            round_, arrived)
    dist.barrier()  # nobody counts the next round in before all have checked this one


def check_large_messages(ctx):
    # Pieces of 2^18 + 3 float32 (about 1 MiB) per rank: the pipelined and
    # two-shot paths, with a ragged last piece, which the small counts above
    # never reach.
    count = (1 << 18) + 3
    w = ctx.world_size
    inputs = [make_input(r, count * w, torch.float32, high=1000) for r in ctx.ranks]
    full = reduce_reference(inputs, "SUM", w, torch.float32)
    t = inputs[ctx.rank].clone()
    dist.all_reduce(t)
    assert_equal(t, full, "all_reduce large")
    t = inputs[ctx.rank].clone()
    dist.broadcast(t, src=w - 1)
    assert_equal(t, inputs[w - 1], "broadcast large")
    out = torch.empty(count * w * w)
    dist.all_gather_into_tensor(out, inputs[ctx.rank])
    assert_equal(out, torch.cat(inputs), "all_gather_into_tensor large")
    out = torch.empty(count)
    dist.reduce_scatter_tensor(out, inputs[ctx.rank].clone())
    assert_equal(out, full[count * ctx.rank:count * (ctx.rank + 1)], "reduce_scatter_tensor large")
    out = torch.empty(count * w)
    dist.all_to_all_single(out, inputs[ctx.rank])
    expected = torch.cat([inputs[r][count * ctx.rank:count * (ctx.rank + 1)] for r in ctx.ranks])
    assert_equal(out, expected, "all_to_all_single large")


def check_float_precision(ctx):
    # Non-integer values: the sum of two ranks is exact in any order, and the
    # result must be identical on every rank.
    for dtype in FLOAT_DTYPES:
        inputs = [(torch.arange(17, dtype=torch.float64) / 7 + r / 3).to(dtype) for r in ctx.ranks]
        t = inputs[ctx.rank].clone()
        dist.all_reduce(t)
        gathered = [torch.empty_like(t) for _ in ctx.ranks]
        dist.all_gather(gathered, t)
        for r in ctx.ranks:
            assert_equal(gathered[r], t, "all_reduce %s identical on every rank" % dtype)
        if ctx.world_size == 2:
            assert_equal(t, inputs[0] + inputs[1], "all_reduce %s two ranks" % dtype)


def check_object_collectives(ctx):
    # torch pickles the objects and moves them with all_gather, broadcast,
    # gather and scatter of byte tensors.
    objects = [None] * ctx.world_size
    dist.all_gather_object(objects, {"rank": ctx.rank, "payload": "x" * ctx.rank})
    assert objects == [{"rank": r, "payload": "x" * r} for r in ctx.ranks], objects
    items = [ctx.rank, "abc"] if ctx.rank == 0 else [None, None]
    dist.broadcast_object_list(items, src=0)
    assert items == [0, "abc"], items
    gathered = [None] * ctx.world_size if ctx.rank == 0 else None
    dist.gather_object((ctx.rank, [ctx.rank] * ctx.rank), gathered, dst=0)
    if ctx.rank == 0:
        assert gathered == [(r, [r] * r) for r in ctx.ranks], gathered
    received = [None]
    dist.scatter_object_list(received, [{"to": r} for r in ctx.ranks] if ctx.rank == 0 else None, src=0)
    assert received == [{"to": ctx.rank}], received


def check_coalescing_manager(ctx):
    # torch 2's _coalescing_manager turns the calls in its block into one
    # allreduce_coalesced, allgather_into_tensor_coalesced or
    # reduce_scatter_tensor_coalesced of the backend.
    from torch.distributed.distributed_c10d import _coalescing_manager

    n = ctx.world_size
    ts = [torch.full((3 + i,), float(ctx.rank + i)) for i in range(3)]
    with _coalescing_manager():
        for t in ts:
            dist.all_reduce(t)
    for i, t in enumerate(ts):
        assert_equal(t, torch.full((3 + i,), float(sum(r + i for r in ctx.ranks))), "coalesced all_reduce %d" % i)
    outs = [torch.empty(2 * n) for _ in range(2)]
    with _coalescing_manager():
        for k, out in enumerate(outs):
            dist.all_gather_into_tensor(out, torch.full((2,), float(10 * ctx.rank + k)))
    for k, out in enumerate(outs):
        want = torch.tensor([float(10 * r + k) for r in ctx.ranks for _ in range(2)])
        assert_equal(out, want, "coalesced all_gather_into_tensor %d" % k)
    parts = [torch.empty(2) for _ in range(2)]
    with _coalescing_manager():
        for k, part in enumerate(parts):
            dist.reduce_scatter_tensor(part, torch.arange(2 * n, dtype=torch.float32) + k)
    for k, part in enumerate(parts):
        want = (torch.arange(2 * ctx.rank, 2 * ctx.rank + 2, dtype=torch.float32) + k) * n
        assert_equal(part, want, "coalesced reduce_scatter_tensor %d" % k)
    # With a device, torch also brackets the block with the backend's
    # startCoalescing/endCoalescing; async_ops=True hands back endCoalescing's
    # work, which completes once every call of the block has.
    cpu = torch.device("cpu")
    ts = [torch.full((4,), float(ctx.rank * (i + 1))) for i in range(3)]
    with _coalescing_manager(device=cpu, async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for i, t in enumerate(ts):
        assert_equal(t, torch.full((4,), float(sum(r * (i + 1) for r in ctx.ranks))), "device-coalesced %d" % i)
    outs = [torch.empty(n) for _ in range(2)]
    with _coalescing_manager(device=cpu):
        for k, out in enumerate(outs):
            dist.all_gather_into_tensor(out, torch.full((1,), float(ctx.rank + k)))
    for k, out in enumerate(outs):
        assert_equal(out, torch.tensor([float(r + k) for r in ctx.ranks]), "device-coalesced all_gather %d" % k)
