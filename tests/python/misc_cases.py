"""Cases for point to point, groups, object collectives, dtype conversion
and argument errors; run on every rank of a 2- or 4-rank job (see cases.py).
"""

import numpy as np

import tdist as dist
from cases import LIBS, as_numpy, expect_equal, expect_raises, make, torch, values, zeros


# ---- point to point ----

def case_send_recv_ring(lib, dtype):
    def fn(rank, world):
        right, left = (rank + 1) % world, (rank - 1) % world
        out = zeros(lib, dtype, 5)
        mine = make(lib, dtype, values(rank, 5, dtype=dtype))
        if rank % 2 == 0:
            dist.send(mine, right)
            got = dist.recv(out, left)
        else:
            got = dist.recv(out, left)
            dist.send(mine, right)
        assert got == left, got
        expect_equal(out, as_numpy(make(lib, dtype, values(left, 5, dtype=dtype))), "recv")
    return fn


def case_isend_irecv(lib):
    def fn(rank, world):
        right, left = (rank + 1) % world, (rank - 1) % world
        out = zeros(lib, "float64", 3)
        recv_work = dist.irecv(out, src=left, tag=7)
        send_work = dist.isend(make(lib, "float64", values(rank, 3)), right, tag=7)
        send_work.wait()
        recv_work.wait()
        assert recv_work.source_rank() == left
        expect_equal(out, values(left, 3), "irecv")
        assert recv_work.get_future().wait()[0] is out
    return fn


def case_batch_isend_irecv(lib, count):
    def fn(rank, world):
        right, left = (rank + 1) % world, (rank - 1) % world
        out = zeros(lib, "int32", count)
        ops = [dist.P2POp(dist.isend, make(lib, "int32", values(rank, count)), right),
               dist.P2POp(dist.irecv, out, left)]
        works = dist.batch_isend_irecv(ops)
        assert len(works) == 2
        for w in works:
            w.wait()
        expect_equal(out, values(left, count), "batch_isend_irecv")
    return fn


def case_sendrecv_ring(lib, count):
    # Every rank sends first: no deadlock at any size (the largest is read
    # from the sender's memory); the receive names its sender.
    def fn(rank, world):
        right, left = (rank + 1) % world, (rank - 1) % world
        out = zeros(lib, "int32", count)
        got = dist.sendrecv(make(lib, "int32", values(rank, count)), right, out, left, tag=5)
        assert got == left, got
        expect_equal(out, values(left, count), "sendrecv")
        if rank == 0:
            src = dist.sendrecv(make(lib, "int32", values(rank, 1)), right, zeros(lib, "int32", 1))
            assert src == left, src  # src=None: from any rank
        else:
            dist.sendrecv(make(lib, "int32", values(rank, 1)), right, zeros(lib, "int32", 1), left)
        expect_raises(dist.DistInvalidArgument, lambda: dist.sendrecv(out, rank, out, left), "sendrecv to itself")
    return fn


def case_recv_any_source(rank, world):
    if rank == 0:
        senders = []
        for _ in range(world - 1):
            out = np.zeros(2, np.int64)
            src = dist.recv(out, tag=3)  # src=None: from any rank
            expect_equal(out, [src, src * 10], "recv any")
            senders.append(src)
        assert sorted(senders) == list(range(1, world)), senders
    else:
        dist.send(np.array([rank, rank * 10], np.int64), 0, tag=3)


def case_tags_match_out_of_order(rank, world):
    if rank == 0:
        dist.send(np.array([1.0]), 1, tag=1)
        dist.send(np.array([2.0]), 1, tag=2)
    elif rank == 1:
        second, first = np.zeros(1), np.zeros(1)
        w2 = dist.irecv(second, 0, tag=2)
        w1 = dist.irecv(first, 0, tag=1)
        w2.wait()
        w1.wait()
        expect_equal(first, [1.0], "tag 1")
        expect_equal(second, [2.0], "tag 2")


def case_recv_size_mismatch(rank, world):
    # The spec's send program sends int64[3] into a float32[3]. tdist names
    # both sides instead of writing garbage, and leaves the buffer alone.
    want = "rank 0 sent 3 int64 elements but rank 1 receives 3 float32 elements"
    if rank == 0:
        dist.send(np.array([1, 2, 3], np.int64), 1)
        # Rank 1 refused it and said why before its message on tag 9 (one
        # connection keeps order): that recv, or the send after it, raises.
        def next_two():
            dist.recv(np.zeros(1, np.uint8), 1, tag=9)
            dist.send(np.zeros(1, np.uint8), 1, tag=10)
        error = expect_raises(dist.DistBackendError, next_two, "was refused")
        assert want in str(error), error
    elif rank == 1:
        buffer = np.zeros(3, np.float32)
        error = expect_raises(dist.DistBackendError, lambda: dist.recv(buffer, 0), "recv")
        assert want in str(error), error
        expect_equal(buffer, [0.0, 0.0, 0.0], "the recv buffer")
        dist.send(np.zeros(1, np.uint8), 0, tag=9)


# ---- groups ----

def case_groups(rank, world):
    members = [r for r in range(world) if r % 2 == 1] if world > 2 else [1]
    g = dist.new_group(members)
    assert dist.group.WORLD is dist.GroupMember.WORLD is dist.group.WORLD
    assert dist.get_rank(dist.group.WORLD) == rank
    if rank in members:
        assert isinstance(g, dist.ProcessGroup)
        assert dist.get_rank(g) == members.index(rank)
        assert dist.get_world_size(g) == len(members)
        assert dist.get_process_group_ranks(g) == members
        assert dist.get_group_rank(g, rank) == members.index(rank)
        assert dist.get_global_rank(g, 0) == members[0]
        assert dist.get_backend(g) == "tdist"
        t = np.array([float(rank)])
        dist.all_reduce(t, group=g)
        expect_equal(t, [float(sum(members))], "subgroup all_reduce")
        b = np.array([float(rank)])
        dist.broadcast(b, src=members[-1], group=g)  # src is a global rank
        expect_equal(b, [float(members[-1])], "subgroup broadcast")
        expect_raises(dist.DistInvalidArgument, lambda: dist.get_group_rank(g, 0), "get_group_rank non-member")
    else:
        assert g == dist.GroupMember.NON_GROUP_MEMBER
        assert dist.get_rank(g) == -1 and dist.get_world_size(g) == -1
        t = np.array([5.0])
        assert dist.all_reduce(t, group=g) is None and dist.all_reduce(t, group=g, async_op=True) is None
        assert dist.recv(t, 0, group=g) == -1
        expect_equal(t, [5.0], "non-member tensor untouched")
    dist.barrier()
    # A group of every rank, created by all; and one by members only.
    everyone = dist.new_group()
    t = np.array([1], np.int32)
    dist.all_reduce(t, group=everyone)
    expect_equal(t, [world], "new_group() all_reduce")
    if rank < 2:
        local = dist.new_group([0, 1], use_local_synchronization=True)
        t = np.array([rank + 1.0])
        dist.all_reduce(t, group=local)
        expect_equal(t, [3.0], "local-sync group")
        dist.destroy_process_group(local)
    dist.barrier()


# ---- object collectives ----

OBJECTS = [{"a": 1, "b": [1, 2, 3]}, None, "text", np.arange(4), b"x" * 100_000]


def case_objects(rank, world):
    objs = list(OBJECTS) if rank == 1 else [None] * len(OBJECTS)
    dist.broadcast_object_list(objs, src=1)
    assert objs[0] == OBJECTS[0] and objs[1] is None and objs[2] == "text" and objs[4] == OBJECTS[4]
    assert np.array_equal(objs[3], OBJECTS[3])

    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "pad": "y" * rank * 1000})
    assert [g["rank"] for g in gathered] == list(range(world)) and len(gathered[world - 1]["pad"]) == (world - 1) * 1000

    dst = world - 1
    out = [None] * world if rank == dst else None
    dist.gather_object(("from", rank), out, dst=dst)
    if rank == dst:
        assert out == [("from", r) for r in range(world)], out

    received = [None]
    inputs = [{"to": r, "data": list(range(r))} for r in range(world)] if rank == 0 else None
    dist.scatter_object_list(received, inputs, src=0)
    assert received[0] == {"to": rank, "data": list(range(rank))}, received


def case_monitored_barrier(rank, world):
    from datetime import timedelta
    dist.monitored_barrier(timeout=timedelta(seconds=30))
    dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True)


# ---- dtype conversion of a rank's own inputs (the spec programs need it) ----

def case_inputs_adopt_output_dtype(lib):
    def fn(rank, world):
        ints = "int64"
        scatter_list = [make(lib, ints, [i]) for i in range(world)] if rank == 0 else None
        out = zeros(lib, "float32", 1)
        dist.scatter(out, scatter_list, src=0)
        expect_equal(out, [rank], "scatter int64 -> float32")

        out = zeros(lib, "float32", 1)
        dist.reduce_scatter(out, [make(lib, ints, [rank + 1]) for _ in range(world)])
        expect_equal(out, [world * (world + 1) // 2], "reduce_scatter int64 -> float32")

        out = zeros(lib, "int32", world)
        dist.all_to_all(out, make(lib, ints, [rank] * world))  # tensors: all_to_all_single
        expect_equal(out, list(range(world)), "all_to_all tensors int64 -> int32")

        # float -> int would lose values: refused on every rank, before communicating.
        expect_raises(dist.DistInvalidArgument,
                      lambda: dist.all_gather_into_tensor(zeros(lib, "int32", world), make(lib, "float32", [0.5])),
                      "float32 -> int32")
    return fn


# ---- argument errors: raised on every rank before anything is sent ----

def case_errors(lib):
    def fn(rank, world):
        t2d = make(lib, "float32", np.arange(6.0).reshape(2, 3))
        non_contiguous = t2d.T if lib == "numpy" else t2d.t()
        expect_raises(dist.DistInvalidArgument, lambda: dist.all_reduce(non_contiguous), "non-contiguous",
                      match="contiguous")
        expect_raises(dist.DistInvalidArgument, lambda: dist.broadcast(non_contiguous, 0), "non-contiguous bcast")
        if lib == "numpy":
            ro = np.arange(3.0)
            ro.flags.writeable = False
            expect_raises(dist.DistInvalidArgument, lambda: dist.all_reduce(ro), "read-only", match="read-only")
            out = [np.zeros(3) for _ in range(world)]
            dist.all_gather(out, ro)  # a read-only input is fine
            expect_equal(out[world - 1], [0, 1, 2], "read-only input")
            expect_raises(dist.DistInvalidArgument, lambda: dist.all_reduce(np.zeros(3, np.uint32)), "uint32")
        else:
            meta = torch.empty(3, device="meta")
            expect_raises(dist.DistInvalidArgument, lambda: dist.all_reduce(meta), "meta device", match="CPU")
        expect_raises(TypeError, lambda: dist.all_reduce([1.0, 2.0]), "list", match="numpy.ndarray or a torch.Tensor")
        # Wrong sizes.
        expect_raises(dist.DistInvalidArgument,
                      lambda: dist.all_gather([zeros(lib, "float32", 2)] * (world + 1), zeros(lib, "float32", 2)),
                      "all_gather list length")
        expect_raises(dist.DistInvalidArgument,
                      lambda: dist.all_gather_into_tensor(zeros(lib, "float32", 3), zeros(lib, "float32", 2)),
                      "all_gather_into_tensor size")
        expect_raises(dist.DistInvalidArgument,
                      lambda: dist.reduce_scatter_tensor(zeros(lib, "float32", 2), zeros(lib, "float32", 2 * world + 1)),
                      "reduce_scatter_tensor size")
        expect_raises(dist.DistInvalidArgument,
                      lambda: dist.all_to_all_single(zeros(lib, "float32", world), zeros(lib, "float32", world),
                                                     [1] * world, [2] * world), "all_to_all_single splits")
        expect_raises(dist.DistInvalidArgument,
                      lambda: dist.all_gather_into_tensor_uneven(zeros(lib, "float32", (3, 2)),
                                                                 zeros(lib, "float32", (1, 2)), [1] * (world + 1)),
                      "uneven split count")
        expect_raises(dist.DistInvalidArgument, lambda: dist.broadcast(zeros(lib, "float32", 1), world), "bad src")
        expect_raises(dist.DistInvalidArgument, lambda: dist.send(zeros(lib, "float32", 1), rank), "send to self")
        expect_raises(dist.DistInvalidArgument,
                      lambda: dist.all_reduce(zeros(lib, "float32", 1), op=dist.ReduceOp.BAND), "BAND float",
                      match="BAND")
        if rank != 0:  # rank 0 (src) never enters: the others fail before communicating
            out = zeros(lib, "float32", 1)
            expect_raises(dist.DistInvalidArgument, lambda: dist.scatter(out, [out] * world, src=0),
                          "scatter_list on a non-src rank")
        dist.barrier()
    return fn


def build(world_size):
    cases = []
    for lib in LIBS:
        for dtype in ["float32", "int64", "bool", "complex64"] + (["bfloat16"] if lib == "torch" else []):
            cases.append((f"send_recv_ring-{lib}-{dtype}", case_send_recv_ring(lib, dtype)))
        cases.append((f"isend_irecv-{lib}", case_isend_irecv(lib)))
        for count in (0, 1, 7):
            cases.append((f"batch_isend_irecv-{lib}-n{count}", case_batch_isend_irecv(lib, count)))
        for count in (0, 1, 7, 100003):
            cases.append((f"sendrecv_ring-{lib}-n{count}", case_sendrecv_ring(lib, count)))
        cases.append((f"inputs_adopt_output_dtype-{lib}", case_inputs_adopt_output_dtype(lib)))
        cases.append((f"argument_errors-{lib}", case_errors(lib)))
    cases += [
        ("recv_any_source", case_recv_any_source),
        ("tags_match_out_of_order", case_tags_match_out_of_order),
        ("recv_size_mismatch", case_recv_size_mismatch),
        ("groups", case_groups),
        ("object_collectives", case_objects),
        ("monitored_barrier", case_monitored_barrier),
    ]
    return cases
