"""Async work: handles keep arrays alive, futures, Work.wait(timeout), and
the GIL being released while a rank blocks in a collective.

Ranks coordinate through a TCPStore (keys set by one rank, waited for by
another), never by sleeping.
"""

import gc
import threading
import weakref
from datetime import timedelta

import numpy as np

import tdist as dist
from harness import run_ranks


def _store(rank, world, port):
    return dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=30))


def _keep_alive(rank, world, port):
    store = _store(rank, world, port)
    if rank == 0:
        a = np.ones(1000, np.float64)
        ref = weakref.ref(a)
        work = dist.all_reduce(a, async_op=True)
        del a
        gc.collect()
        # Rank 1 has not joined yet, so the operation is pending: the array must live.
        assert not work.is_completed()
        assert ref() is not None, "the array of a pending operation was freed"
        # Dropping the handle too must not free it.
        b = np.full(10, 2.0)
        ref_b = weakref.ref(b)
        dist.broadcast(b, src=1, async_op=True)
        del b
        gc.collect()
        assert ref_b() is not None, "the array of a dropped pending handle was freed"
        store.set("dropped", "1")
        assert work.wait() is True and work.is_success() and work.exception() is None
        result = work.result()[0]
        assert np.array_equal(result, np.full(1000, 2.0)), result[:4]
        del result, work
        dist.barrier()  # the broadcast completed before this
        dist.barrier(async_op=True).wait()  # a new async op prunes completed handles
        gc.collect()
        assert ref() is None and ref_b() is None, "arrays of completed operations are still held"
    else:
        store.wait(["dropped"])
        dist.all_reduce(np.ones(1000, np.float64))
        dist.broadcast(np.full(10, 5.0), src=1)
        dist.barrier()
        dist.barrier(async_op=True).wait()


def test_async_handles_keep_arrays_alive_until_completion():
    run_ranks(_keep_alive, 2, dist._spawn.free_port())


def _futures(rank, world, port):
    store = _store(rank, world, port)
    t = np.array([rank + 1.0])
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: f.value()[0] * 10)
    failing = fut.then(lambda f: 1 / 0)
    seen, called = [], threading.Event()
    # Callbacks may run just after waiters are woken: wait for it explicitly.
    fut.add_done_callback(lambda f: (seen.append(f.done()), called.set()))
    assert np.array_equal(fut.wait()[0], [3.0]) and fut.value()[0] is t
    assert np.array_equal(chained.wait(), [30.0])
    try:
        failing.wait()
        raise AssertionError("the callback's error was not reported")
    except ZeroDivisionError:
        pass
    assert called.wait(30) and seen == [True]
    # A user-made future.
    user = dist.Future()
    doubled = user.then(lambda f: f.value() * 2)
    user.set_result(21)
    assert doubled.wait() == 42 and user.done()
    # Work.wait with a timeout: still running -> DistTimeoutError; the op finishes later.
    if rank == 0:
        late = np.array([1.0])
        w = dist.all_reduce(late, async_op=True)
        try:
            w.wait(timedelta(milliseconds=50))
            raise AssertionError("wait(timeout) returned for an operation that cannot have finished")
        except dist.DistTimeoutError as error:
            assert "all_reduce" in str(error)
        store.set("timed_out", "1")
        w.wait()
        assert np.array_equal(late, [3.0])
    else:
        store.wait(["timed_out"])
        dist.all_reduce(np.array([2.0]))


def test_futures_then_callbacks_and_wait_timeout():
    run_ranks(_futures, 2, dist._spawn.free_port())


def _gil_released(rank, world, port):
    store = _store(rank, world, port)
    rounds = 3
    if rank == 0:
        # A Python thread plays ping-pong with rank 1 through the store while
        # the main thread sits in a blocking recv. Rank 1 sends only after the
        # ping-pong, so if recv held the GIL the thread could never run and
        # the recv would never complete (the harness deadline would fail us).
        def pong():
            for k in range(rounds):
                store.get(f"ping{k}")
                store.set(f"pong{k}", "1")

        thread = threading.Thread(target=pong)
        thread.start()
        out = np.zeros(4)
        assert dist.recv(out, src=1) == 1
        thread.join()
        assert np.array_equal(out, [1, 2, 3, 4])
        # Same for a collective: rank 1 joins the barrier after another round.
        thread = threading.Thread(target=lambda: (store.get("ping_barrier"), store.set("pong_barrier", "1")))
        thread.start()
        dist.barrier()
        thread.join()
    else:
        for k in range(rounds):
            store.set(f"ping{k}", "1")
            store.get(f"pong{k}")
        dist.send(np.array([1.0, 2, 3, 4]), 0)
        store.set("ping_barrier", "1")
        store.get("pong_barrier")
        dist.barrier()


def test_python_threads_run_while_a_rank_blocks():
    run_ranks(_gil_released, 2, dist._spawn.free_port(), timeout=60)
