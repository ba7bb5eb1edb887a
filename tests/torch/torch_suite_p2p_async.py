"""Point to point (tags, any source, dtype conversion, size errors), async
work handles and their futures on the tdist backend."""

from datetime import timedelta

import torch
import torch.distributed as dist

from torch_checks import COUNTS, DTYPES, assert_equal, expect_error, make_input


def check_send_recv_ring(ctx):
    # Each rank sends to the next and receives from the previous, per dtype
    # and count; isend first so no rank blocks another.
    nxt, prv = (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size
    for dtype in DTYPES:
        for count in COUNTS:
            work = dist.isend(make_input(ctx.rank, count, dtype), nxt)
            got = torch.zeros(count).to(dtype)
            assert dist.recv(got, src=prv) == prv
            work.wait()
            assert_equal(got, make_input(prv, count, dtype), "recv %s count %d" % (dtype, count))


def check_tags_out_of_order(ctx):
    # Rank 0 sends tag 1 then tag 2; rank 1 receives tag 2 first.
    if ctx.rank == 0:
        dist.send(torch.tensor([1.0]), 1, tag=1)
        dist.send(torch.tensor([2.0]), 1, tag=2)
    elif ctx.rank == 1:
        b, a = torch.zeros(1), torch.zeros(1)
        dist.recv(b, 0, tag=2)
        dist.recv(a, 0, tag=1)
        assert_equal(a, torch.tensor([1.0]), "tag 1")
        assert_equal(b, torch.tensor([2.0]), "tag 2")
    dist.barrier()


def check_any_source(ctx):
    if ctx.rank == 0:
        seen = {}
        for _ in range(ctx.world_size - 1):
            t = torch.zeros(3, dtype=torch.int64)
            src = dist.recv(t)  # src=None: any source; returns the sender
            seen[src] = t
        assert sorted(seen) == list(range(1, ctx.world_size)), sorted(seen)
        for src, t in seen.items():
            assert_equal(t, torch.full((3,), src * 11, dtype=torch.int64), "any-source from %d" % src)
        # irecv from any source (another tag): the work names the sender.
        works = []
        for _ in range(ctx.world_size - 1):
            t = torch.zeros(2)
            works.append((t, dist.irecv(t, tag=1)))
        for t, w in works:
            w.wait()
            src = w._source_rank()
            assert_equal(t, torch.tensor([float(src), -1.0]), "irecv any-source from %d" % src)
    else:
        dist.send(torch.full((3,), ctx.rank * 11, dtype=torch.int64), 0)
        dist.send(torch.tensor([float(ctx.rank), -1.0]), 0, tag=1)
    dist.barrier()


def check_any_source_then_specific(ctx):
    # An any-source receive posted first gets the first message, a receive
    # from rank 1 posted second gets the second, whatever order they finish.
    if ctx.rank == 0:
        first, second = torch.zeros(4), torch.zeros(4)
        w1 = dist.irecv(first)
        w2 = dist.irecv(second, src=1)
        w2.wait()
        w1.wait()
        assert_equal(first, torch.full((4,), 1.0), "first message")
        assert_equal(second, torch.full((4,), 2.0), "second message")
    elif ctx.rank == 1:
        dist.send(torch.full((4,), 1.0), 0)
        dist.send(torch.full((4,), 2.0), 0)
    dist.barrier()


def check_dtype_conversion(ctx):
    # Sender and receiver dtypes may differ (same element count): the
    # receiver converts like Tensor.copy_. This is what the spec's send/recv
    # program does (int64 sent, float32 received).
    if ctx.rank == 0:
        dist.send(torch.tensor([1, 2, 3]), 1)
        dist.send(torch.tensor([1.5, -2.5, 300.0], dtype=torch.float64), 1)
        dist.send(torch.tensor([0, 3, 0], dtype=torch.uint8), 1)
    elif ctx.rank == 1:
        a = torch.empty(3)
        dist.recv(a, 0)
        assert_equal(a, torch.tensor([1.0, 2.0, 3.0]), "int64 -> float32")
        b = torch.empty(3, dtype=torch.int32)
        dist.recv(b, 0)
        assert_equal(b, torch.tensor([1.5, -2.5, 300.0], dtype=torch.float64).to(torch.int32), "float64 -> int32")
        c = torch.empty(3, dtype=torch.bool)
        dist.recv(c, 0)
        assert_equal(c, torch.tensor([False, True, False]), "uint8 -> bool")
    dist.barrier()


def check_size_mismatch_error(ctx):
    # A receive whose element count differs names both sides; the pair stays
    # usable afterwards.
    if ctx.rank == 0:
        dist.send(torch.tensor([1, 2, 3]), 1)
        dist.send(torch.tensor([7.0]), 1)
    elif ctx.rank == 1:
        expect_error(lambda: dist.recv(torch.empty(4), 0), "recv", "rank 0 sent int64[3]", "float32[4]")
        t = torch.empty(1)
        dist.recv(t, 0)
        assert_equal(t, torch.tensor([7.0]), "message after the failed one")
        # The same failure through a future, a few times: once future.wait()
        # has raised, the work must read as completed and failed (the future
        # completes on another thread, a moment before the work's own state).
        for _ in range(FUTURE_ROUNDS):
            fut_work = dist.irecv(torch.empty(2), 0)
            fut = fut_work.get_future()
            expect_error(fut.wait, "rank 0 sent float32[5]")
            # (Work.exception() cannot be called from Python in torch 1.13, for
            # any backend: its exception_ptr has no Python conversion.)
            assert fut_work.is_completed() and not fut_work.is_success()
    if ctx.rank == 0:
        for _ in range(FUTURE_ROUNDS):
            dist.send(torch.zeros(5), 1)
    dist.barrier()


FUTURE_ROUNDS = 20


def check_batch_isend_irecv(ctx):
    nxt, prv = (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size
    got = torch.zeros(5, dtype=torch.int32)
    ops = [dist.P2POp(dist.isend, make_input(ctx.rank, 5, torch.int32), nxt),
           dist.P2POp(dist.irecv, got, prv)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert_equal(got, make_input(prv, 5, torch.int32), "batch_isend_irecv")


def check_p2p_argument_errors(ctx):
    peer = (ctx.rank + 1) % ctx.world_size
    expect_error(lambda: dist.send(torch.ones(1), peer, tag=-1), "tag -1 is negative")
    # torch 2 refuses a send to oneself before any backend sees it.
    expect_error(lambda: dist.send(torch.ones(1), ctx.rank), "should not be the same as the rank",
                 errors=ValueError)
    expect_error(lambda: dist.recv(torch.ones(1), ctx.world_size), "not a rank of the group")


def check_async_collectives(ctx):
    # Several operations in flight, waited in reverse order.
    tensors = [torch.full((9,), float(ctx.rank + i)) for i in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    for work in reversed(works):
        assert work.wait()
        assert work.is_completed() and work.is_success()
    for i, t in enumerate(tensors):
        expected = float(sum(r + i for r in ctx.ranks))
        assert_equal(t, torch.full((9,), expected), "async all_reduce %d" % i)
    # result(): the output tensors.
    out = [torch.zeros(2) for _ in ctx.ranks]
    work = dist.all_gather(out, torch.full((2,), float(ctx.rank)), async_op=True)
    work.wait()
    result = work.result()
    assert len(result) == ctx.world_size and all(result[r].data_ptr() == out[r].data_ptr() for r in ctx.ranks)


def check_futures(ctx):
    t = torch.full((3,), float(ctx.rank + 1))
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    total = float(sum(r + 1 for r in ctx.ranks))
    chained = fut.then(lambda f: f.value()[0] * 2)
    assert_equal(chained.wait(), torch.full((3,), 2 * total), "future.then")
    assert_equal(fut.value()[0], torch.full((3,), total), "future.value")
    # Several futures at once.
    tensors = [torch.full((2,), float(i)) for i in range(3)]
    futs = [dist.all_reduce(x, async_op=True).get_future() for x in tensors]
    torch.futures.wait_all(futs)
    for i, x in enumerate(tensors):
        assert_equal(x, torch.full((2,), float(i * ctx.world_size)), "wait_all %d" % i)
    # The future of a broadcast and of a barrier.
    b = torch.full((1,), float(ctx.rank))
    bf = dist.broadcast(b, src=ctx.world_size - 1, async_op=True).get_future()
    assert_equal(bf.wait()[0], torch.full((1,), float(ctx.world_size - 1)), "broadcast future")
    assert dist.barrier(async_op=True).get_future().wait() == []
    # As with gloo, the future is complete once Work.wait() returns, whether
    # it was asked for before (completed off the worker thread) or after.
    for ask_first in (True, False):
        t = torch.full((2,), 1.0)
        work = dist.all_reduce(t, async_op=True)
        early = work.get_future() if ask_first else None
        work.wait()
        for f in filter(None, [early, work.get_future()]):
            assert f.done(), "future not done after Work.wait() (asked first: %s)" % ask_first
            assert_equal(f.value()[0], torch.full((2,), float(ctx.world_size)), "value after wait")


def check_blocking_calls_run_on_the_caller_and_async_ones_do_not_wait_for_peers(ctx):
    # torch 2.7+ passes asyncOp=False for async_op=False: the caller waits at
    # once, so the backend runs the call on the caller's thread when nothing
    # is queued before it (a new group's first call) and hands back a work
    # that is already done. Through torch's ProcessGroup and dispatcher, as
    # dist.all_reduce calls it.
    if not hasattr(dist.AllreduceOptions(), "asyncOp"):
        return  # older torch: every call runs as an asynchronous one
    group = dist.new_group(ctx.ranks)
    t = torch.full((5,), float(ctx.rank + 1))
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    work = group.allreduce([t], opts)
    assert work.is_completed() and work.is_success(), "a blocking all_reduce was not done when issued"
    assert_equal(t, torch.full((5,), float(sum(r + 1 for r in ctx.ranks))), "blocking all_reduce")
    # An asynchronous call returns before its peers have made theirs: rank 0
    # tells the others only once its call has returned (were it waiting for
    # them, they would wait for the key until the store's timeout).
    store = dist.distributed_c10d._get_default_store()
    u = torch.full((3,), float(ctx.rank))
    if ctx.rank == 0:
        work = dist.all_reduce(u, group=group, async_op=True)
        store.set("async all_reduce issued", "yes")
        work.wait()
    else:
        store.wait(["async all_reduce issued"])
        dist.all_reduce(u, group=group)
    assert_equal(u, torch.full((3,), float(sum(ctx.ranks))), "async all_reduce issued before its peers")
    dist.destroy_process_group(group)


def check_work_wait_timeout(ctx):
    # A receive whose message is sent only after the barrier cannot complete
    # within its first wait: Work.wait(timeout) raises, the receive stays
    # posted and completes once the message comes.
    if ctx.rank == 1:
        t = torch.zeros(2)
        work = dist.irecv(t, src=0, tag=5)
        expect_error(lambda: work.wait(timeout=timedelta(milliseconds=50)), "recv", "timed out")
        assert not work.is_completed()
    dist.barrier()
    if ctx.rank == 0:
        dist.send(torch.tensor([4.0, 2.0]), 1, tag=5)
    if ctx.rank == 1:
        assert work.wait(timeout=timedelta(seconds=60))
        assert_equal(t, torch.tensor([4.0, 2.0]), "received after the timed-out wait")
    dist.barrier()
