"""tdist.rpc (torch.distributed.rpc's API) and tdist.paddle.rpc (paddle's),
on workers forked from pytest: calls with NumPy arrays and torch tensors of
0, 1, odd and large sizes; exceptions raised again as their own type;
results that cannot be pickled; timeouts; futures; a killed worker; and
worker infos. docs/rpc.md describes the layer."""

import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import numpy
import pytest

import tdist.rpc as rpc
from tdist import _C
from harness import run_ranks
from launcher_env import free_port

torch = pytest.importorskip("torch")


# Functions the workers call on each other (importable here on every worker:
# forked processes share this module).
def add(a, b):
    return a + b


def scale_all(tensors, factor):
    return {name: t * factor for name, t in tensors.items()}


def fail_with_value_error(text):
    raise ValueError(text)


class Unpicklable(Exception):
    def __init__(self, a, b):  # two arguments: pickle cannot rebuild it from args alone
        super().__init__(f"{a} {b}")
        self.lock = None


def fail_unpicklably():
    raise Unpicklable("x", "y")


def return_a_lock():
    import threading

    return threading.Lock()


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def name_of_this_worker():
    return rpc.get_worker_info().name


def arange(n):
    return numpy.arange(n, dtype=numpy.float64)


def sum_of(rref):
    return float(rref.to_here().sum())


def values_kept(at_most=None):
    from tdist.rpc import rref as _rref

    return _rref._owned_count(at_most, timeout=20)


class Box:
    def __init__(self):
        self.value = 41

    def get(self):
        return self.value + 1


def total(a):
    return float(a.sum())


def own_a_value(n):
    return rpc.RRef(numpy.full(n, 7.0))


def kill_this_worker():
    os.kill(os.getpid(), signal.SIGKILL)


def _init(rank, nprocs, **options):
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=nprocs,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(**options) if options else None)


@pytest.mark.parametrize("nprocs", [1, 2, 3, 5])
def test_every_worker_calls_every_other_with_arrays_and_tensors(nprocs):
    def body(rank, n):
        _init(rank, n)
        futures = []
        for to in range(n):
            for count in (0, 1, 7, 300_001):
                a = numpy.arange(count, dtype=numpy.float64) + rank
                t = torch.arange(count, dtype=torch.int32) * (rank + 1)
                futures.append((to, count, rpc.rpc_async(f"worker{to}", add, args=(a, 1.5)),
                                rpc.rpc_async(to, scale_all, args=({"t": t, "b": t.to(torch.bfloat16)}, 2))))
        for to, count, fa, ft in futures:
            got = fa.wait()
            assert isinstance(got, numpy.ndarray) and got.dtype == numpy.float64
            numpy.testing.assert_array_equal(got, numpy.arange(count, dtype=numpy.float64) + rank + 1.5)
            scaled = ft.wait()
            assert torch.equal(scaled["t"], torch.arange(count, dtype=torch.int32) * (rank + 1) * 2)
            assert scaled["b"].dtype == torch.bfloat16
            assert torch.equal(scaled["b"], (torch.arange(count, dtype=torch.int32) * (rank + 1)).to(torch.bfloat16) * 2)
        assert rpc.rpc_sync(f"worker{(rank + 1) % n}", name_of_this_worker) == f"worker{(rank + 1) % n}"
        rpc.shutdown()
        return True

    assert run_ranks(body, nprocs, init=False) == [True] * nprocs


def test_sixty_four_workers_start_call_each_other_and_shut_down():
    # torch's RPC fails to start beyond a few dozen workers.
    def body(rank, n):
        _init(rank, n, num_worker_threads=2)
        futures = [rpc.rpc_async(to, add, args=(numpy.full(5, float(rank)), to)) for to in range(n)]
        for to, f in enumerate(futures):
            numpy.testing.assert_array_equal(f.wait(), numpy.full(5, float(rank + to)))
        rpc.shutdown()
        return rank

    assert run_ranks(body, 64, init=False) == list(range(64))


def test_remote_references_fetch_pass_on_and_free_their_values():
    def body(rank, n):
        _init(rank, n)
        if rank == 0:
            r = rpc.remote("worker1", arange, args=(10,))
            assert not r.is_owner() and r.owner() == rpc.get_worker_info("worker1")
            assert r.owner_name() == "worker1"
            numpy.testing.assert_array_equal(r.to_here(), numpy.arange(10.0))
            assert r.confirmed_by_owner()
            assert r.rpc_sync().sum() == 45.0
            assert r.rpc_async().max().wait() == 9.0
            # Passed on: worker 2 fetches it from worker 1 itself.
            assert rpc.rpc_sync("worker2", sum_of, args=(r,)) == 45.0
            with pytest.raises(RuntimeError, match="local_value\\(\\) is for its owner, worker 'worker1'"):
                r.local_value()
            with pytest.raises(RuntimeError, match="can only be pickled by tdist.rpc"):
                pickle.dumps(r)
            assert rpc.rpc_sync("worker1", values_kept) == 1
            # The owner hands out a reference to a value of its own.
            mine = rpc.rpc_sync("worker1", own_a_value, args=(3,))
            numpy.testing.assert_array_equal(mine.to_here(), numpy.full(3, 7.0))
            assert rpc.rpc_sync("worker1", values_kept) == 2
            del r, mine
            import gc

            gc.collect()
            # Every fork is gone (worker 2's went when its call returned): the owner lets go.
            assert rpc.rpc_sync("worker1", values_kept, args=(0,)) == 0
            # A function that raises: to_here raises it, naming remote() and the worker.
            failing = rpc.remote("worker2", fail_with_value_error, args=("no value",))
            with pytest.raises(ValueError, match="no value") as info:
                failing.to_here()
            assert "remote(fail_with_value_error) on worker 'worker2'" in str(info.value)
            # A reference to a local value.
            local = rpc.RRef(numpy.ones(2))
            assert local.is_owner()
            numpy.testing.assert_array_equal(local.local_value(), numpy.ones(2))
            numpy.testing.assert_array_equal(local.to_here(), numpy.ones(2))
            # remote() to itself.
            me = rpc.remote("worker0", arange, args=(4,))
            numpy.testing.assert_array_equal(me.local_value(), numpy.arange(4.0))
            del me
            assert values_kept(1) == 1  # `local` is left
            # A proxy call keeps its RRef alive until it is served, even when
            # the RRef itself is dropped at once.
            assert rpc.RRef(Box()).rpc_async().get().wait() == 42
            assert rpc.remote("worker1", Box).rpc_async().get().wait() == 42
            # An RRef in a call that cannot be sent: its new fork is deleted again.
            held = rpc.remote("worker1", arange, args=(3,))
            held.to_here()
            before = rpc.rpc_sync("worker1", values_kept)
            import threading

            with pytest.raises(TypeError):
                rpc.rpc_sync("worker2", sum_of, args=(held, threading.Lock()))
            with pytest.raises(_C.DistInvalidArgument):
                rpc.rpc_sync("nobody", sum_of, args=(held,))
            del held
            gc.collect()
            assert rpc.rpc_sync("worker1", values_kept, args=(before - 1,)) == before - 1
        rpc.shutdown()
        return True

    assert run_ranks(body, 3, init=False) == [True] * 3


def test_async_arguments_go_as_they_were_and_shutdown_waits_for_a_large_answer():
    def body(rank, n):
        _init(rank, n)
        if rank == 0:
            # rpc_async's arguments are taken as they are at the call, in the
            # header (small), over TCP or for a direct read (large).
            for size in (3, 5000, 1 << 20):
                a = numpy.ones(size)
                futures = [rpc.rpc_async("worker1", total, args=(a,)) for _ in range(4)]
                a[:] = 0
                assert [f.wait() for f in futures] == [float(size)] * 4
            # An answer of 64 MiB still being copied when shutdown() is called.
            fut = rpc.rpc_async("worker1", arange, args=(1 << 23,))
            rpc.shutdown()
            got = fut.wait()
            assert got.shape == (1 << 23,) and got[-1] == (1 << 23) - 1 and got[12345] == 12345
            return True
        rpc.shutdown()
        return True

    assert run_ranks(body, 2, init=False) == [True] * 2


def test_one_raising_callback_does_not_stop_the_others(capfd):
    import tdist

    f = tdist.Future()
    ran = []

    def bad(_):
        raise ValueError("bad callback")

    f.add_done_callback(bad)
    f.add_done_callback(lambda fut: ran.append(fut.value()))
    f.set_result(7)
    assert ran == [7]
    assert "bad callback" in capfd.readouterr().err


def test_futures_of_calls_and_collectives_are_one_type_and_combine():
    import tdist
    from tdist.futures import collect_all, wait_all

    port = free_port()

    def body(rank, n):
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=n,
                     rpc_backend_options=rpc.RpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}"))
        t = torch.full((3,), float(rank + 1))
        call = rpc.rpc_async(f"worker{(rank + 1) % n}", add, args=(t, 10))
        reduced = tdist.all_reduce(t, async_op=True).get_future()
        assert isinstance(call, tdist.Future) and isinstance(reduced, tdist.Future)
        doubled = call.then(lambda f: f.value() * 2)
        values = wait_all([doubled, reduced])
        assert torch.equal(values[0], torch.full((3,), 2.0 * (rank + 11)))
        assert torch.equal(values[1][0], torch.full((3,), float(sum(range(1, n + 1)))))
        both = collect_all([rpc.rpc_async(f"worker{(rank + 1) % n}", fail_with_value_error, args=("x",)),
                            rpc.rpc_async(f"worker{(rank + 1) % n}", add, args=(1, 2))]).wait()
        with pytest.raises(ValueError):
            both[0].wait()
        assert both[1].wait() == 3
        with pytest.raises(ValueError):
            wait_all(both)
        assert collect_all([]).wait() == []
        rpc.shutdown()
        return True

    assert run_ranks(body, 3) == [True] * 3


def test_torch_functions_and_builtins_run_remotely():
    def body(rank, n):
        _init(rank, n)
        peer = f"worker{1 - rank}"
        x = torch.ones(4)
        assert torch.equal(rpc.rpc_sync(peer, torch.add, args=(x, 1)), torch.full((4,), 2.0))
        assert rpc.rpc_sync(peer, max, args=(3, 9)) == 9
        assert rpc.rpc_sync(peer, add, kwargs={"a": "x", "b": "y"}) == "xy"
        # A non-contiguous tensor goes as its contiguous copy.
        m = torch.arange(6.0).reshape(2, 3).t()
        assert torch.equal(rpc.rpc_sync(peer, add, args=(m, 0)), m)
        rpc.shutdown()
        return True

    assert run_ranks(body, 2, init=False) == [True, True]


def test_remote_exceptions_are_raised_again_with_worker_and_traceback():
    def body(rank, n):
        _init(rank, n)
        if rank == 0:
            with pytest.raises(ValueError, match="bad input") as caught:
                rpc.rpc_sync("worker1", fail_with_value_error, args=("bad input",))
            text = str(caught.value)
            assert "raised in fail_with_value_error on worker 'worker1'" in text, text
            assert "remote traceback" in text and "in fail_with_value_error" in text, text
            # An exception that cannot be rebuilt: its type's name and text come back.
            with pytest.raises(rpc.RemoteError, match="Unpicklable: x y"):
                rpc.rpc_sync("worker1", fail_unpicklably)
            # A result that cannot be pickled.
            with pytest.raises(TypeError, match="the result of return_a_lock could not be pickled"):
                rpc.rpc_sync("worker1", return_a_lock)
            # The future of a failing call holds the error.
            fut = rpc.rpc_async("worker1", fail_with_value_error, args=("later",))
            with pytest.raises(ValueError, match="later"):
                fut.wait()
            assert fut.done()
            with pytest.raises(tdist_errors().DistInvalidArgument, match="no worker is named 'nobody'"):
                rpc.rpc_sync("nobody", add, args=(1, 2))
            with pytest.raises(TypeError, match="func must be callable"):
                rpc.rpc_sync("worker1", 42)
        rpc.shutdown()
        return True

    assert run_ranks(body, 2, init=False) == [True, True]


def tdist_errors():
    import tdist

    return tdist


def test_a_call_past_its_timeout_fails_naming_the_callee():
    def body(rank, n):
        _init(rank, n)
        if rank == 0:
            # A timeout, though sleep_then answers after 3 s: the 0.2 s bound it.
            with pytest.raises(tdist_errors().DistTimeoutError,
                               match="call of 'sleep_then' on worker 'worker1' from 'worker0' timed out"):
                rpc.rpc_sync("worker1", sleep_then, args=(3, "late"), timeout=0.2)
            # timeout=-1: the default from init_rpc; the call completes.
            assert rpc.rpc_sync("worker1", sleep_then, args=(0.05, "on time"), timeout=-1) == "on time"
        rpc.shutdown()
        return True

    assert run_ranks(body, 2, init=False) == [True, True]


def test_futures_chain_and_complete_callbacks():
    def body(rank, n):
        _init(rank, n)
        peer = f"worker{1 - rank}"
        fut = rpc.rpc_async(peer, add, args=(1, 2))
        chained = fut.then(lambda f: f.wait() * 10)
        seen = []
        fut.add_done_callback(lambda f: seen.append(f.value()))
        assert chained.wait() == 30 and fut.wait() == 3
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [3]
        own = rpc.Future()
        own.set_result(5)
        assert own.done() and own.wait() == 5
        with pytest.raises(RuntimeError, match="already completed"):
            own.set_result(6)
        rpc.shutdown()
        return True

    assert run_ranks(body, 2, init=False) == [True, True]


def test_worker_infos_and_the_paddle_api():
    def body(rank, n):
        from tdist.paddle import rpc as prpc

        os.environ["PADDLE_TRAINER_ID"] = str(rank)
        os.environ["PADDLE_TRAINERS_NUM"] = str(n)
        prpc.init_rpc(f"w{rank}", master_endpoint=f"127.0.0.1:{os.environ['MASTER_PORT']}")
        me = prpc.get_current_worker_info()
        assert (me.name, me.rank) == (f"w{rank}", rank) and me.port > 0 and me.ip
        assert [w.name for w in prpc.get_all_worker_infos()] == [f"w{r}" for r in range(n)]
        assert prpc.get_worker_info("w2").rank == 2
        assert prpc.rpc_sync(f"w{(rank + 1) % n}", add, args=(rank, 100)) == rank + 100
        assert prpc.rpc_async(f"w{(rank + 2) % n}", add, args=(2, 3)).wait() == 5
        torch_info = rpc.get_worker_info("w1")
        assert (torch_info.name, torch_info.id) == ("w1", 1)
        prpc.shutdown()
        return True

    assert run_ranks(body, 3, init=False) == [True] * 3


def test_paddle_init_rpc_says_what_is_missing(monkeypatch):
    from tdist.paddle import rpc as prpc

    for name in ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_MASTER_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(tdist_errors().DistInvalidArgument,
                       match=r"rank \(PADDLE_TRAINER_ID\), world_size \(PADDLE_TRAINERS_NUM\), master_endpoint"):
        prpc.init_rpc("w")
    with pytest.raises(tdist_errors().DistInvalidArgument, match="is not 'ip:port'"):
        prpc.init_rpc("w", rank=0, world_size=1, master_endpoint="nowhere")


def _killed_worker_job(rank, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    result = None
    try:
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=3)
        if rank == 2:
            time.sleep(60)  # killed by the call it serves before this ends
        if rank == 0:
            # A network error (the death), not the 30 s timeout's.
            try:
                rpc.rpc_sync("worker2", kill_this_worker, timeout=30)
                result = "the call to the killed worker returned"
            except tdist_errors().DistNetworkError as e:
                result = str(e)
        # The survivors still call each other and shut down.
        assert rpc.rpc_sync(f"worker{1 - rank}", add, args=(rank, 1)) == rank + 1
        rpc.shutdown()
        result = ("ok", result)
    except BaseException:
        result = ("error", traceback.format_exc())
    with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)
    os._exit(0)


def test_a_killed_worker_fails_its_callers_and_the_others_shut_down():
    port = free_port()
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as out_dir:
        procs = [ctx.Process(target=_killed_worker_job, args=(rank, port, out_dir)) for rank in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        for p in procs:
            if p.is_alive():
                p.kill()
                pytest.fail("a worker did not finish within 60 s")
        assert procs[2].exitcode == -signal.SIGKILL
        results = {}
        for rank in (0, 1):
            with open(os.path.join(out_dir, f"{rank}.pkl"), "rb") as f:
                results[rank] = pickle.load(f)
        assert results[1] == ("ok", None), results[1]
        status, message = results[0]
        assert status == "ok"
        assert "on worker 'worker2' from 'worker0' failed" in message, message


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "examples",
                       "parameter_server.py")


@pytest.mark.parametrize("nprocs", [2, 5])
def test_the_parameter_server_example_trains_and_its_check_can_fail(nprocs):
    def run(*extra):
        return subprocess.run([sys.executable, "-m", "tdist.run", "--standalone", "--nproc-per-node", str(nprocs),
                               EXAMPLE, "--check", *extra], capture_output=True, text=True, timeout=120)

    done = run("--steps", "150")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{150 * (nprocs - 1)} gradients from {nprocs - 1} trainers" in done.stdout, done.stdout
    # Two steps cannot reach w*: the check must say so.
    short = run("--steps", "2")
    assert short.returncode != 0 and "check failed" in short.stdout + short.stderr, short.stdout + short.stderr
