"""Cases of tests/python/test_paddle.py, each written as a paddle.distributed
user writes it (paddle's documented examples, signatures and defaults) with
``import tdist.paddle as dist`` and checked against values computed here
with NumPy. ``paddle`` is the real paddle, or fake_paddle (DLPack-only
tensors), which stands for any other DLPack producer. Every case runs on
every rank, in the same order."""

import warnings

import numpy

import tdist
import tdist.paddle as dist

CASES = []


def case(fn):
    CASES.append((fn.__name__, fn))
    return fn


def eq(got, want):
    got = got.numpy() if hasattr(got, "numpy") and not isinstance(got, numpy.ndarray) else numpy.asarray(got)
    want = numpy.asarray(want)
    assert got.shape == want.shape and numpy.array_equal(got, want), f"got {got.tolist()}, expected {want.tolist()}"


def raises(exc, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as error:
        return str(error)
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {exc.__name__}")


def data_example(paddle, rank):
    """The documents' data: [[4,5,6],[4,5,6]] on rank 0, [[1,2,3],[1,2,3]] elsewhere."""
    return paddle.to_tensor([[4, 5, 6], [4, 5, 6]] if rank == 0 else [[1, 2, 3], [1, 2, 3]])


def example_sum(n):
    return numpy.array([[4, 5, 6]] * 2) + (n - 1) * numpy.array([[1, 2, 3]] * 2)


@case
def env_and_groups(paddle, rank, n):
    env = dist.ParallelEnv()
    assert (env.rank, env.world_size, env.nranks, env.local_rank) == (rank, n, n, rank)
    assert env.device_id == 0 and env.dev_id == 0 and env.device_type == ""
    assert dist.get_rank() == rank and dist.get_world_size() == n
    assert dist.is_initialized() and dist.is_available()
    assert dist.get_backend() == "GLOO"
    g = dist.get_group(0)
    assert (g.id, g.rank, g.nranks, g.world_size, g.ranks, g.name) == (0, rank, n, n, list(range(n)), "_default_pg")
    assert g.is_member() and g.get_group_rank(n - 1) == n - 1 and g.process_group is not None
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert dist.get_group(12345) is None and w


@case
def all_reduce_doc_example(paddle, rank, n):
    data = data_example(paddle, rank)
    dist.all_reduce(data)
    eq(data, example_sum(n))


@case
def half_precision_paddle_tensors(paddle, rank, n):
    """bfloat16 (bits NumPy cannot type) and float16, in place and into new
    outputs, against NumPy sums of small integers (exact in both)."""
    if not hasattr(paddle, "bfloat16"):
        return  # fake_paddle: DLPack producers other than paddle have no bfloat16 here
    for dtype in ("bfloat16", "float16"):
        base = numpy.arange(7, dtype=numpy.float32)
        data = paddle.to_tensor(base * (rank + 1), dtype=dtype)
        dist.all_reduce(data)
        eq(data.astype("float32"), base * sum(range(1, n + 1)))
        dist.all_reduce(data, op=dist.ReduceOp.MAX)
        eq(data.astype("float32"), base * sum(range(1, n + 1)))
        gathered = []
        dist.all_gather(gathered, paddle.to_tensor(base[:3] + rank, dtype=dtype))
        assert [str(t.dtype) for t in gathered] == [f"paddle.{dtype}"] * n
        for r, t in enumerate(gathered):
            eq(t.astype("float32"), base[:3] + r)
        root = paddle.to_tensor([float(rank)] * 5, dtype=dtype)
        dist.broadcast(root, src=n - 1)
        eq(root.astype("float32"), [float(n - 1)] * 5)


@case
def all_reduce_ops_odd_and_zero_counts(paddle, rank, n):
    values = [numpy.arange(7, dtype=numpy.int64) + r for r in range(n)]
    for op, ref in [(dist.ReduceOp.SUM, sum(values)), (dist.ReduceOp.MAX, numpy.maximum.reduce(values)),
                    (dist.ReduceOp.MIN, numpy.minimum.reduce(values)), (dist.ReduceOp.PROD, numpy.prod(values, 0))]:
        x = values[rank].copy()
        dist.all_reduce(x, op=op)
        eq(x, ref)
    x = numpy.full(5, float(rank + 1), numpy.float32)
    dist.all_reduce(x, dist.ReduceOp.AVG)
    eq(x, numpy.full(5, sum(range(1, n + 1)) / n, numpy.float32))
    z = paddle.to_tensor(numpy.zeros((0, 3), numpy.float32))
    dist.all_reduce(z)
    assert z.shape == [0, 3]


@case
def all_reduce_torch_tensor(paddle, rank, n):
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional
        return
    t = torch.tensor([rank + 1.0, 2.0])
    task = dist.all_reduce(t, sync_op=True)
    assert task.is_completed()
    assert t.tolist() == [n * (n + 1) / 2, 2.0 * n]


@case
def async_tasks(paddle, rank, n):
    data = data_example(paddle, rank)
    task = dist.all_reduce(data, sync_op=False)
    task.wait()
    assert task.is_completed()
    eq(data, example_sum(n))
    x = numpy.array([rank], numpy.int32)
    task = dist.broadcast(x, src=n - 1, sync_op=False)
    task.wait()
    eq(x, [n - 1])


@case
def broadcast_doc_example(paddle, rank, n):
    data = data_example(paddle, rank)
    dist.broadcast(data, src=1)
    eq(data, [[1, 2, 3], [1, 2, 3]])


@case
def reduce_doc_example(paddle, rank, n):
    data = data_example(paddle, rank)
    dist.reduce(data, dst=0)
    eq(data, example_sum(n) if rank == 0 else [[1, 2, 3], [1, 2, 3]])
    x = numpy.array([rank, -rank], numpy.float64)
    dist.reduce(x, n - 1, dist.ReduceOp.MAX)
    eq(x, [n - 1, 0] if rank == n - 1 else [rank, -rank])


@case
def all_gather_doc_example_fills_list(paddle, rank, n):
    tensor_list = []
    data = data_example(paddle, rank)
    dist.all_gather(tensor_list, data)
    assert len(tensor_list) == n and all(paddle.is_tensor(t) for t in tensor_list)
    for r, t in enumerate(tensor_list):
        eq(t, [[4, 5, 6]] * 2 if r == 0 else [[1, 2, 3]] * 2)
    zeros = []
    dist.all_gather(zeros, numpy.zeros(0, numpy.int8))
    assert [z.shape for z in zeros] == [(0,)] * n and all(isinstance(z, numpy.ndarray) for z in zeros)
    given = [numpy.empty(3, numpy.float32) for _ in range(n)]
    dist.all_gather(given, numpy.full(3, rank, numpy.float32))
    for r, t in enumerate(given):
        eq(t, numpy.full(3, r, numpy.float32))


@case
def all_gather_object_doc_example(paddle, rank, n):
    object_list = []
    obj = {"foo": [1, 2, 3]} if rank == 0 else {"bar": [4, 5, 6], "rank": rank}
    dist.all_gather_object(object_list, obj)
    assert object_list == [{"foo": [1, 2, 3]}] + [{"bar": [4, 5, 6], "rank": r} for r in range(1, n)]


@case
def alltoall_doc_example(paddle, rank, n):
    out_tensor_list = []
    ins = [paddle.to_tensor([[rank * 100 + r, r]]) for r in range(n)]
    dist.alltoall(out_tensor_list, ins)
    assert len(out_tensor_list) == n
    for r, t in enumerate(out_tensor_list):
        eq(t, [[r * 100 + rank, rank]])


@case
def alltoall_single_doc_cases(paddle, rank, n):
    data = numpy.arange(n, dtype=numpy.int64) + rank * n
    output = numpy.empty(n, numpy.int64)
    dist.alltoall_single(output, data)
    eq(output, [r * n + rank for r in range(n)])
    in_split_sizes = [i + 1 for i in range(n)]
    out_split_sizes = [rank + 1 for _ in range(n)]
    data = numpy.ones([sum(in_split_sizes), n], numpy.float32) * rank
    output = numpy.empty([(rank + 1) * n, n], numpy.float32)
    task = dist.alltoall_single(output, data, in_split_sizes, out_split_sizes, sync_op=False)
    task.wait()
    eq(output, numpy.repeat(numpy.arange(n, dtype=numpy.float32), rank + 1)[:, None] * numpy.ones(n, numpy.float32))
    # zero-size splits: rank r sends nothing to rank 0
    ins = [0] + [1] * (n - 1)
    outs = [1] * n if rank != 0 else [0] * n
    x = numpy.full(sum(ins), rank, numpy.int32)
    y = numpy.full(sum(outs), -1, numpy.int32)
    dist.alltoall_single(y, x, ins, outs)
    eq(y, [] if rank == 0 else list(range(n)))


@case
def scatter_doc_example(paddle, rank, n):
    data1 = paddle.to_tensor([7, 8, 9])
    data2 = paddle.to_tensor([10, 11, 12])
    if rank == 1:
        dist.scatter(data1, tensor_list=[paddle.to_tensor([r, r + 1, r + 2]) for r in range(n)], src=1)
    else:
        dist.scatter(data1, src=1)
    eq(data1, [rank, rank + 1, rank + 2])
    eq(data2, [10, 11, 12])


@case
def scatter_object_list_doc_example(paddle, rank, n):
    out_object_list = []
    in_object_list = [{"bar": [r]} for r in range(n)] if rank == 1 else [{"foo": 1}] * n
    dist.scatter_object_list(out_object_list, in_object_list, src=1)
    assert out_object_list == [{"bar": [rank]}]


@case
def gather_doc_example(paddle, rank, n):
    gather_list = []
    data = paddle.to_tensor([rank, rank * 2, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist.gather(data, gather_list, dst=0)
    if rank == 0:
        assert len(gather_list) == n
        for r, t in enumerate(gather_list):
            eq(t, [r, r * 2, 3])
    else:
        assert gather_list == []


@case
def reduce_scatter_example(paddle, rank, n):
    out = numpy.empty(2, numpy.int64)
    dist.reduce_scatter(out, [numpy.array([r * 2, r * 2 + 1]) + rank * 10 for r in range(n)])
    eq(out, sum(numpy.array([rank * 2, rank * 2 + 1]) + s * 10 for s in range(n)))


@case
def send_recv_doc_example(paddle, rank, n):
    if rank == 0:
        data = paddle.to_tensor([7, 8, 9])
        dist.send(data, dst=1)
    elif rank == 1:
        data = paddle.to_tensor([1, 2, 3])
        dist.recv(data, src=0)
        eq(data, [7, 8, 9])
    if rank == 0:
        data = paddle.to_tensor([7, 8, 9])
        task = dist.isend(data, dst=1)
    elif rank == 1:
        data = paddle.to_tensor([1, 2, 3])
        task = dist.irecv(data, src=0)
    if rank in (0, 1):
        task.wait()
        eq(data, [7, 8, 9])


@case
def batch_isend_irecv_doc_example(paddle, rank, n):
    send_t = numpy.arange(2) + rank
    recv_t = numpy.empty(2, send_t.dtype)
    send_op = dist.P2POp(dist.isend, send_t, (rank + 1) % n)
    recv_op = dist.P2POp(dist.irecv, recv_t, (rank - 1 + n) % n)
    tasks = dist.batch_isend_irecv([send_op, recv_op])
    for task in tasks:
        task.wait()
    eq(recv_t, numpy.arange(2) + (rank - 1 + n) % n)


@case
def barrier_and_wait(paddle, rank, n):
    tindata = numpy.ones((2, 3), numpy.float32)
    dist.all_reduce(tindata, sync_op=True)
    assert dist.wait(tindata) is None
    assert dist.barrier() is None
    eq(tindata, numpy.full((2, 3), n, numpy.float32))


@case
def wait_leaves_the_results_of_dropped_async_collectives(paddle, rank, n):
    # Tasks dropped at once: wait(tensor) is what orders the reads after them.
    big = [numpy.full(1 << 18, float(rank + k), numpy.float32) for k in range(3)]
    for t in big:
        dist.all_reduce(t, sync_op=False)
    small = numpy.full(5, rank, numpy.int64)
    dist.broadcast(small, src=n - 1, sync_op=False)
    assert dist.wait(big[-1]) is None
    for k, t in enumerate(big):
        eq(t, numpy.full(1 << 18, float(sum(r + k for r in range(n))), numpy.float32))
    eq(small, numpy.full(5, n - 1, numpy.int64))


@case
def broadcast_object_list_doc_example(paddle, rank, n):
    object_list = [{"foo": [1, 2, 3]}] if rank == 0 else [{"bar": [4, 5, 6]}]
    dist.broadcast_object_list(object_list, src=1)
    assert object_list == [{"bar": [4, 5, 6]}]


@case
def new_group_members_and_non_members(paddle, rank, n):
    gp = dist.new_group([0, 1])
    first = gp.id
    assert first >= 10 and gp.name == f"_default_pg{first}" and dist.get_group(first) is gp
    assert gp.ranks == [0, 1] and gp.nranks == 2
    x = numpy.array([rank + 1.0])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        result = dist.all_reduce(x, group=gp)
    if rank in (0, 1):
        assert gp.is_member() and gp.rank == rank and gp.world_size == 2 and dist.get_rank(gp) == rank
        eq(x, [3.0])
        tensor_list = []
        dist.all_gather(tensor_list, numpy.array([rank]), group=gp)
        eq(numpy.concatenate(tensor_list), [0, 1])
        dist.broadcast(x, src=1, group=gp)
    else:
        assert not gp.is_member() and gp.rank == -1 and gp.world_size == -1 and dist.get_world_size(gp) == -1
        assert result is None and any("is not in group" in str(m.message) for m in w)
        eq(x, [rank + 1.0])
        raises(RuntimeError, dist.all_gather, [], x, group=gp)
        raises(RuntimeError, dist.get_backend, gp)
    upper = dist.new_group(list(range(n - 1, 0, -1)))  # unsorted: paddle sorts them
    assert upper.id == first + 1 and upper.ranks == list(range(1, n))
    if rank >= 1:
        y = numpy.array([rank], numpy.int64)
        dist.all_reduce(y, group=upper) if n > 2 else None
        eq(y, [sum(range(1, n))] if n > 2 else [rank])
        assert upper.get_group_rank(rank) == (rank - 1 if n > 2 else -1)
    dist.destroy_process_group(gp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert dist.get_group(first) is None
    raises(AssertionError, dist.destroy_process_group, gp)
    dist.destroy_process_group(upper)
    assert dist.is_initialized()


@case
def stream_api(paddle, rank, n):
    s = dist.stream
    data = data_example(paddle, rank)
    s.all_reduce(data, sync_op=False).wait()
    eq(data, example_sum(n))
    s.all_reduce(data, op=dist.ReduceOp.MIN, use_calc_stream=True)
    eq(data, example_sum(n))
    out = numpy.empty((2 * n, 3), numpy.int64)
    s.all_gather(out, numpy.full((2, 3), rank, numpy.int64), sync_op=False).wait()
    eq(out, numpy.repeat(numpy.arange(n), 2)[:, None] * numpy.ones(3, numpy.int64))
    lst = []
    s.all_gather(lst, numpy.array([rank]), use_calc_stream=True)
    eq(numpy.concatenate(lst), numpy.arange(n))
    outs = []
    s.alltoall(outs, [numpy.array([rank, r]) for r in range(n)], sync_op=False).wait()
    eq(numpy.stack(outs), [[r, rank] for r in range(n)])
    o = numpy.empty(n, numpy.int64)
    s.alltoall(o, numpy.arange(n) + 10 * rank)
    eq(o, [10 * r + rank for r in range(n)])
    o = numpy.empty(n, numpy.int64)
    s.alltoall_single(o, numpy.arange(n) + 10 * rank, sync_op=False).wait()
    eq(o, [10 * r + rank for r in range(n)])
    b = numpy.array([rank, rank])
    s.broadcast(b, src=1, sync_op=False).wait()
    eq(b, [1, 1])
    r_ = numpy.array([rank + 1])
    s.reduce(r_, dst=1, op=dist.ReduceOp.PROD, sync_op=False).wait()
    eq(r_, [numpy.prod(numpy.arange(1, n + 1))] if rank == 1 else [rank + 1])
    rs = numpy.empty(1, numpy.int64)
    s.reduce_scatter(rs, numpy.arange(n) * (rank + 1), sync_op=False).wait()
    eq(rs, [rank * n * (n + 1) // 2])
    sc = numpy.empty(2, numpy.int64)
    if rank == 0:
        s.scatter(sc, numpy.arange(2 * n), src=0, sync_op=False).wait()
    else:
        s.scatter(sc, src=0, sync_op=False).wait()
    eq(sc, [2 * rank, 2 * rank + 1])
    gl = [] if rank == n - 1 else None
    s.gather(numpy.array([rank * 3]), gl, dst=n - 1, sync_op=False).wait()
    if rank == n - 1:
        eq(numpy.concatenate(gl), numpy.arange(n) * 3)
    peer_to, peer_from = (rank + 1) % n, (rank - 1) % n
    got = numpy.empty(3, numpy.float32)
    if rank % 2 == 0:
        s.send(numpy.full(3, rank, numpy.float32), dst=peer_to, sync_op=False).wait()
        s.recv(got, src=peer_from)
    else:
        s.recv(got, src=peer_from, sync_op=False).wait()
        s.send(numpy.full(3, rank, numpy.float32), dst=peer_to, use_calc_stream=True)
    eq(got, numpy.full(3, peer_from, numpy.float32))


@case
def use_calc_stream_needs_sync_op(paddle, rank, n):
    s = dist.stream
    x = numpy.zeros(2, numpy.float32)
    calls = [(s.all_reduce, (x,)), (s.all_gather, ([], x)), (s.alltoall, ([], [x] * n)),
             (s.alltoall_single, (x, x)), (s.broadcast, (x, 0)), (s.reduce, (x, 0)),
             (s.reduce_scatter, (x, [x] * n)), (s.scatter, (x, [x] * n)), (s.gather, (x, [])),
             (s.send, (x, 0)), (s.recv, (x, 0))]
    for fn, args in calls:
        message = raises(RuntimeError, fn, *args, sync_op=False, use_calc_stream=True)
        assert "use_calc_stream can only be" in message and "sync op" in message, (fn.__name__, message)


@case
def bad_inputs(paddle, rank, n):
    x = numpy.zeros(3, numpy.float32)
    assert "Unknown reduce_op" in raises(ValueError, dist.all_reduce, x, op=99)
    assert "all_reduce: tensor must be a tensor" in raises(TypeError, dist.all_reduce, "abc")
    assert "not correctly-sized" in raises(RuntimeError, dist.all_gather, [x], x)
    assert "both tensor or tensor list" in raises(RuntimeError, dist.stream.alltoall, [], x)
    assert "should not be empty" in raises(RuntimeError, dist.alltoall, [], [])
    assert "can not be found inside the group" in raises(ValueError, dist.broadcast, x, src=n)
    assert "tdist runs on CPUs" in raises(tdist.DistInvalidArgument, dist.new_group, [0, 1], backend="nccl")
    assert "Invalid ``op``" in raises(RuntimeError, dist.P2POp, dist.send, x, 0)
    assert "must be a tdist.paddle Group" in raises(TypeError, dist.all_reduce, x, group=3)
    ro = numpy.zeros(3, numpy.float32)
    ro.flags.writeable = False
    raises(tdist.DistInvalidArgument, dist.all_reduce, ro)
    nc = numpy.zeros((4, 4), numpy.float32)[:, ::2]
    raises(tdist.DistInvalidArgument, dist.all_reduce, nc)
    dist.barrier()


def gloo_context(rank, n, endpoint):
    """paddle's gloo_* example: init, barrier (twice), release."""
    dist.gloo_init_parallel_env(rank, n, endpoint)
    dist.gloo_barrier()
    dist.gloo_barrier()
    dist.gloo_release()
    return True


def run_all(rank, n, fake):
    """Runs every case on this rank after init_parallel_env; returns
    {case: None or the failure's traceback}."""
    import traceback
    if fake:
        import fake_paddle
        paddle = fake_paddle.install()
    else:
        import paddle
    group = dist.init_parallel_env()
    assert group is dist.get_group(0) and group.nranks == n
    results = {}
    for name, fn in CASES:
        try:
            fn(paddle, rank, n)
            results[name] = None
        except BaseException:
            results[name] = traceback.format_exc()
            break  # the ranks may now disagree on what comes next
    dist.destroy_process_group()
    assert not dist.is_initialized()
    return results
