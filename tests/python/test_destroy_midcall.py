"""destroy_process_group() from another thread while a call of the group
is in progress: the call raises a DistBackendError that names the destroy,
nothing is freed under it (the process goes on and can start a new group),
on shared memory and over TCP, for blocking and async collectives, a
blocking receive and the wait of an irecv's work. A receive
from the receiver's own rank fails at once instead of waiting forever. And a
child forked from a rank can neither use nor break its parent's group."""

import gc
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from datetime import timedelta

import numpy as np
import pytest

import tdist as dist
from harness import run_ranks
from tdist.trace import trace_entries

TRANSPORTS = [{}, {"TDIST_TRANSPORT": "tcp"}]


def _in_progress(op):
    """True once this process's flight recorder holds `op` as started."""
    for doc in trace_entries():
        for entry in doc.get("entries", []):
            if entry.get("op") == op and entry.get("state") == "started":
                return True
    return False


def _destroy_when_started(op, done, errors):
    # Waits for the main thread's call to be inside the group (its flight
    # recorder entry says so), then destroys every group.
    try:
        while not done.is_set() and not _in_progress(op):
            done.wait(0.005)  # polls the recorder; the deadline is the harness's
        dist.destroy_process_group()
    except BaseException as error:  # the main thread reports it
        errors.append(error)


def _destroy_midcall(rank, world, sync_dir, call):
    dist.init_process_group("tdist", timeout=timedelta(seconds=60))
    oob = dist.FileStore(os.path.join(sync_dir, "oob"), world)
    if rank != 0:
        # Stays alive (and out of the call) until rank 0 has its result.
        oob.wait(["rank0_done"], timedelta(seconds=60))
        dist.destroy_process_group()
        return None
    done = threading.Event()
    errors = []
    op = "recv" if call in ("blocking_recv", "irecv") else "all_reduce"
    destroyer = threading.Thread(target=_destroy_when_started, args=(op, done, errors))
    destroyer.start()
    tensor = np.ones(1 << 20, np.float32)
    try:
        with pytest.raises(dist.DistBackendError) as info:
            if call == "blocking_recv":
                # Rank 1 never sends: only the destroy can end it.
                dist.recv(tensor, src=1)
            elif call == "irecv":
                dist.irecv(tensor, src=1).wait()
            else:
                work = dist.all_reduce(tensor, async_op=call == "async")
                if call == "async":
                    work.wait()
    finally:
        done.set()
        destroyer.join()
        oob.set("rank0_done", b"1")
    assert not errors, errors
    # Nothing of the destroyed group is used any more: calls raise plainly.
    with pytest.raises(dist.DistError, match="not been initialized"):
        dist.all_reduce(np.ones(1, np.float32))
    return str(info.value)


@pytest.mark.parametrize("env", TRANSPORTS, ids=["shm", "tcp"])
@pytest.mark.parametrize("call", ["blocking", "async", "blocking_recv", "irecv"])
def test_destroy_from_another_thread_ends_the_call_with_an_error_naming_it(env, call):
    with tempfile.TemporaryDirectory() as sync_dir:
        message = run_ranks(_destroy_midcall, 2, sync_dir, call, init=False, env=env)[0]
    if call == "irecv" and "destroy_process_group() was called" not in message:
        # The destroy came before the wait began: the irecv was pending, not
        # a call in progress, and its transport closed under it (or the wait
        # began as the destroyed group was being freed).
        assert (
            "the transport was destroyed with this operation pending" in message
            or "the group's connections were freed" in message
        ), message
    else:
        assert "destroy_process_group() was called on rank 0" in message, message
    # Rank 1 is alive and never joined: it is not blamed.
    assert "rank 1 died" not in message and "crashed" not in message, message


def _recv_from_self(rank, world):
    messages = []
    buf = np.zeros(4, np.float32)
    for call in (lambda: dist.recv(buf, src=rank), lambda: dist.irecv(buf, src=rank)):
        with pytest.raises(dist.DistInvalidArgument) as info:
            call()
        messages.append(str(info.value))
    return messages


@pytest.mark.parametrize("world", [1, 2])
def test_a_receive_from_the_own_rank_is_refused_at_once(world):
    for rank, messages in enumerate(run_ranks(_recv_from_self, world)):
        for message in messages:
            assert f"src {rank} is this rank; a rank cannot receive from itself" in message, message


def _child_of_a_rank(rank, world, result_fd, pending):
    """In a child forked from a rank: its copy of the group refuses calls,
    rebuilds, new groups and waits on the parent's unfinished work; an abort
    leaves the parent's links alone; destroy_process_group and the copy's
    release return at once."""
    result = b"ok"
    try:
        for call in (lambda: dist.all_reduce(np.ones(3, np.float32)), dist.reinit_process_group, dist.new_group):
            with pytest.raises(dist.DistBackendError) as info:
                call()
            assert "this is a child forked from it" in str(info.value), str(info.value)
        if pending is not None:  # the parent's receive: the child must not take its message
            with pytest.raises(dist.DistBackendError, match="a child forked from it, where it never completes"):
                pending.wait()
        dist.abort()
        dist.destroy_process_group()  # the copy's worker is not joined: it is not in this process
        gc.collect()
    except BaseException:  # reported to the rank
        result = traceback.format_exc().encode()
    os.write(result_fd, result)
    os._exit(0)


def _fork_a_child_then_reduce(rank, world):
    tensor = np.full(5, rank + 1, np.float32)
    dist.all_reduce(tensor)  # the group's links and worker exist before the fork
    # Rank 0 waits for a message that rank 1 sends only after the children
    # are gone (the all_reduce below orders it).
    got = np.zeros(4, np.float32)
    pending = dist.irecv(got, src=1) if rank == 0 and world > 1 else None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child_of_a_rank(rank, world, write_fd, pending)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        said = pipe.read()  # until the child exits (or the harness's deadline)
    _, status = os.waitpid(pid, 0)
    assert said == b"ok" and os.waitstatus_to_exitcode(status) == 0, said.decode()
    # The child left the parent's links alone: the group still works.
    tensor = np.arange(7, dtype=np.float32) * (rank + 1)
    dist.all_reduce(tensor)
    if rank == 1:
        dist.send(np.arange(4, dtype=np.float32) + 10, dst=0)
    if pending is not None:
        pending.wait()
        np.testing.assert_array_equal(got, np.arange(4, dtype=np.float32) + 10)
    return tensor


@pytest.mark.parametrize("env", TRANSPORTS, ids=["shm", "tcp"])
@pytest.mark.parametrize("world", [1, 3])
def test_a_child_forked_from_a_rank_cannot_use_its_group_and_leaves_it_working(env, world):
    expected = np.arange(7, dtype=np.float32) * sum(range(1, world + 1))
    for result in run_ranks(_fork_a_child_then_reduce, world, env=env):
        np.testing.assert_array_equal(result, expected)


_NORMAL_EXIT = """
import os, sys
from datetime import timedelta
import numpy as np
import tdist as dist
from tdist import rpc
store = dist.TCPStore("127.0.0.1", 0, 1, True)  # port 0: the store's own
dist.init_process_group("tdist", store=store, rank=0, world_size=1, timeout=timedelta(seconds=30))
rpc.init_rpc("w0", rank=0, world_size=1, rpc_backend_options=rpc.RpcBackendOptions(
    init_method="tcp://127.0.0.1:%d" % dist._spawn.free_port()))
pending = dist.all_reduce(np.ones(3, np.float32), async_op=True)
pid = os.fork()
if pid == 0:
    try:
        rpc.rpc_sync("w0", max, args=(1, 2))
        sys.exit(3)
    except RuntimeError as error:
        if "a child forked from it" not in str(error):
            raise
    sys.exit(0)  # the interpreter's own exit: atexit (rpc, groups), finalization
_, status = os.waitpid(pid, 0)
pending.wait()
t = np.ones(2, np.float32)
dist.all_reduce(t)
assert rpc.rpc_sync("w0", max, args=(1, 2)) == 2
print("child", os.waitstatus_to_exitcode(status), "parent", t.tolist(), flush=True)
rpc.shutdown()
dist.destroy_process_group()
"""


def test_a_forked_child_that_exits_normally_leaves_the_group_store_and_rpc_agent_working():
    # The child runs the interpreter's exit (tdist's atexit shutdown of RPC
    # and groups, finalization): it returns at once and the parent goes on.
    env = dict(os.environ)
    env.pop("MASTER_ADDR", None)
    done = subprocess.run([sys.executable, "-c", _NORMAL_EXIT], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "child 0 parent [1.0, 1.0]" in done.stdout, done.stdout + done.stderr[-3000:]
