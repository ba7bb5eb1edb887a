"""The end of a job whose rank 0 hosts the store (env://): rank 0 may be
done, and exit, while the other ranks still use the store, making a group of
their own (new_group(..., use_local_synchronization=True), as a DeviceMesh's
dims do). Rank 0 keeps the store until every other rank has left it, or is
gone (its connection closed), or the group's timeout (at most 60 s) passed:
at exit, or at its next init_process_group. Its destroy_process_group()
does not wait for the others (they may be waiting for it). The ranks are
separate interpreters that end the normal way, so the package's exit
handler runs as in a user's program."""

import json
import os
import signal
import subprocess
import sys

import pytest

from tdist._spawn import free_port

# Every job ends within this many seconds, or the test fails (rank 0 waiting
# out its 60 s bound for a killed rank would pass it).
DEADLINE = 45

RANK_PROGRAM = r"""
import os, signal, sys
from datetime import timedelta
import numpy as np
import tdist

mode, timeout_s = sys.argv[1], float(sys.argv[2])
tdist.init_process_group("tdist", timeout=timedelta(seconds=timeout_s))
rank, world = tdist.get_rank(), tdist.get_world_size()
tdist.barrier()
if rank == 0 and mode == "reinit":
    tdist.destroy_process_group()  # returns at once: rank 1 is not done with the store
    os.environ["MASTER_PORT"] = sys.argv[3]
    tdist.init_process_group("tdist", timeout=timedelta(seconds=timeout_s))
    x = np.array([rank + 1], dtype=np.int64)
    tdist.all_reduce(x)
    print("sum", int(x[0]), flush=True)
if rank == 0:
    sys.exit(0)
if mode == "peers":
    assert sys.stdin.readline() == "go\n"
    peers = tdist.new_group(list(range(1, world)), use_local_synchronization=True)
    x = np.array([rank], dtype=np.int64)
    tdist.all_reduce(x, group=peers)
    print("sum", int(x[0]), flush=True)
elif mode == "reinit":
    tdist.destroy_process_group()
    os.environ["MASTER_PORT"] = sys.argv[3]
    tdist.init_process_group("tdist", timeout=timedelta(seconds=timeout_s))
    x = np.array([rank + 1], dtype=np.int64)
    tdist.all_reduce(x)
    print("sum", int(x[0]), flush=True)
elif mode == "blocked":
    tdist.all_reduce(np.ones(4, np.float32))
elif mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
elif mode == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
"""


# What rank 0 logs (at INFO) once its program is over and it waits for the
# others to leave the store.
WAITING = "waiting up to"


def _start(world, mode, timeout_s, same_port=False, extra_env=None):
    port = free_port()
    second_port = port if same_port else free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, **(extra_env or {}), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), TDIST_LOG_LEVEL="INFO" if rank == 0 else "WARNING")
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_PROGRAM, mode, str(timeout_s), str(second_port)], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def _finish(procs):
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=DEADLINE))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def test_ranks_still_making_a_group_keep_the_store_after_rank_0_is_done():
    world = 3
    procs = _start(world, "peers", 60)
    try:
        # Rank 0's program is over and it waits: only now do the others
        # make their group.
        seen = []
        while not seen or WAITING not in seen[-1]:
            seen.append(procs[0].stderr.readline())
            assert seen[-1], f"rank 0 exited without waiting for the others:\n{''.join(seen)}"
        for p in procs[1:]:
            p.stdin.write("go\n")
            p.stdin.flush()
    except BaseException:
        _finish(procs)
        raise
    outs = _finish(procs)
    for rank, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{err}"
    assert [out.split() for out, _ in outs[1:]] == [["sum", str(sum(range(1, world)))]] * (world - 1)
    assert "did not say they left" not in outs[0][1]


def test_a_killed_rank_is_not_waited_for():
    # A timeout of two minutes: rank 0 would wait 60 s for a rank it did
    # not see leave, and the deadline would fail the test. It sees the
    # killed rank's connection close instead.
    procs = _start(2, "kill", 120)
    outs = _finish(procs)
    assert procs[1].returncode == -signal.SIGKILL
    assert procs[0].returncode == 0, outs[0][1]
    assert "did not say they left" not in outs[0][1]


def test_a_stopped_rank_is_waited_for_until_the_groups_timeout_and_named():
    procs = _start(2, "stop", 2)
    try:
        out, err = procs[0].communicate(timeout=DEADLINE)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert procs[0].returncode == 0, err
    assert WAITING in err
    assert "rank(s) 1 did not say they left within 2000 ms" in err, err


@pytest.mark.parametrize("same_port", [False, True], ids=["new-port", "same-port"])
def test_a_second_job_releases_the_first_store_and_nobody_joins_it(same_port):
    # On the same port, rank 1 may reach the first job's store, which rank 0
    # still keeps (rank 1 left it); it must wait for the second one.
    procs = _start(2, "reinit", 60, same_port)
    outs = _finish(procs)
    for rank, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{err}"
        assert out.split() == ["sum", "3"], out
    assert "did not say they left" not in outs[0][1]


@pytest.mark.parametrize("trace", [False, True], ids=["plain", "TDIST_TRACE"])
def test_rank_0_failing_ends_the_call_another_rank_waits_in_at_its_exit(trace, tmp_path):
    # Rank 0 exits (with its group's calls aborted) instead of joining rank
    # 1's all_reduce: rank 1's call fails at once, not at the two minutes'
    # timeout, and rank 0 is not held at its exit by the rank it left waiting,
    # also when it first gathers every rank's calls for TDIST_TRACE.
    path = tmp_path / "trace.json"
    procs = _start(2, "blocked", 120, extra_env={"TDIST_TRACE": str(path)} if trace else None)
    outs = _finish(procs)
    if trace:
        events = json.loads(path.read_text())
        events = events["traceEvents"] if isinstance(events, dict) else events
        assert {e.get("pid") for e in events if e.get("name") == "all_reduce"} >= {1}, events
    assert procs[0].returncode == 0, outs[0][1]
    assert procs[1].returncode == 1, outs[1][1]
    assert "all_reduce (call #1 in this group): rank 0 died or closed its connection" in outs[1][1], outs[1][1]
    assert "did not say they left" not in outs[0][1]
