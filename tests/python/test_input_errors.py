"""Inputs that must be clear errors (or torch's behaviour), each message
asserted: p2p tags in messages and out of range, explicit negative ranks and
world sizes, groups used after destroy_process_group, MASTER_PORT values
and timeouts that are not positive."""

import os
from datetime import timedelta

import numpy as np
import pytest

import tdist as dist
from harness import PG_TIMEOUT, run_ranks

# ---- point-to-point tags ----


def _mismatch_names_the_users_tag(rank, world):
    # int64[3] into float32[3]: the errors name the user's tag, never the
    # tag on the wire (top bit set: 9223372036854775808 for tag 0). The
    # receiver raises at its recv; the sender learns of the refusal at its
    # next send (here a probe on tag 5, after a barrier that rank 1 enters
    # only once it has refused), which raises it instead of sending.
    messages = []
    for tag in (0, 2**31 - 1):
        if rank == 0:
            dist.send(np.array([1, 2, 3], np.int64), 1, tag=tag)
            dist.barrier()
            with pytest.raises(dist.DistBackendError, match="was refused") as info:
                dist.send(np.zeros(1, np.uint8), 1, tag=5)
        else:
            with pytest.raises(dist.DistBackendError) as info:
                dist.recv(np.zeros(3, np.float32), 0, tag=tag)
            dist.barrier()
        messages.append(str(info.value))
        dist.barrier()
    return messages


def test_a_p2p_mismatch_names_the_users_tag():
    for messages in run_ranks(_mismatch_names_the_users_tag, 2):
        assert "recv from rank 0 (tag 0): rank 0 sent 3 int64 elements" in messages[0], messages[0]
        assert "(tag 2147483647)" in messages[1], messages[1]
        for message in messages:
            assert "9223372036854775808" not in message and "92233720" not in message, message


def _bad_tags(rank, world):
    t = np.array([float(rank)])
    peer = 1 - rank
    for op, call in [("send", lambda tag: dist.send(t, peer, tag=tag)),
                     ("recv", lambda tag: dist.recv(t, peer, tag=tag)),
                     ("isend", lambda tag: dist.isend(t, peer, tag=tag)),
                     ("irecv", lambda tag: dist.irecv(t, peer, tag=tag))]:
        with pytest.raises(dist.DistInvalidArgument, match=f"^{op}: tag -1 is invalid: tags must be non-negative"):
            call(-1)
        with pytest.raises(dist.DistInvalidArgument, match=f"^{op}: tag 2147483648 is invalid: .* at most 2147483647"):
            call(2**31)
    # The C++ layer checks too (a RuntimeError, as torch's "Tag must be nonnegative").
    with pytest.raises(dist.DistInvalidArgument, match="^send: tag -7 is invalid"):
        dist._C.send(t, peer, None, -7)
    with pytest.raises(RuntimeError, match="tag -7"):
        dist._C.irecv(t, peer, None, -7)
    # batch_isend_irecv checks every tag before it posts anything: the
    # valid isend on tag 3 must not have left.
    ops = [dist.P2POp(dist.isend, np.array([7.0]), peer, tag=3),
           dist.P2POp(dist.irecv, np.zeros(1), peer, tag=-1)]
    with pytest.raises(dist.DistInvalidArgument, match="^batch_isend_irecv: tag -1 is invalid"):
        dist.batch_isend_irecv(ops)
    if rank == 0:
        dist.send(np.array([42.0]), 1, tag=3)
        return None
    got = np.zeros(1)
    dist.recv(got, 0, tag=3)
    return got.tolist()


def test_negative_and_too_large_tags_are_refused_before_anything_is_sent():
    assert run_ranks(_bad_tags, 2)[1] == [42.0]


# ---- explicit ranks and world sizes ----


def _bad_rank_and_world_size(rank, world):
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"})
    # -2 is not "not given" (-1): the environment is not consulted.
    with pytest.raises(dist.DistInvalidArgument, match=r"^init_process_group: rank -2 is invalid: a rank is >= 0"):
        dist.init_process_group("tdist", rank=-2)
    with pytest.raises(dist.DistInvalidArgument, match=r"^init_process_group: world_size -2 is invalid"):
        dist.init_process_group("tdist", world_size=-2)
    with pytest.raises(dist.DistInvalidArgument, match=r"^init_process_group: world_size 0 is invalid"):
        dist.init_process_group("tdist", rank=0, world_size=0)
    with pytest.raises(dist.DistInvalidArgument, match=r"^init_process_group: rank -5 is invalid"):
        dist.init_process_group("tdist", init_method="tcp://127.0.0.1:1", rank=-5, world_size=2)
    with pytest.raises(dist.DistInvalidArgument, match=r"^init_process_group: rank -2 is invalid"):
        dist.init_process_group(store=dist.HashStore(), rank=-2, world_size=1)
    assert not dist.is_initialized()


def test_an_explicit_negative_rank_or_world_size_is_invalid_not_missing():
    run_ranks(_bad_rank_and_world_size, 1, init=False)


# ---- groups after destroy_process_group ----


def _destroyed_groups(rank, world):
    # As torch 1.13: destroying before init_process_group is an AssertionError.
    with pytest.raises(AssertionError, match="not initialized"):
        dist.destroy_process_group()
    dist.init_process_group("tdist", timeout=PG_TIMEOUT)
    x = np.ones(2)
    # One subgroup destroyed alone: it refuses calls, the others still work.
    alone = dist.new_group([0, 1])
    dist.destroy_process_group(alone)
    with pytest.raises(dist.DistError, match="^all_reduce: the process group was destroyed by destroy_process_group"):
        dist.all_reduce(x, group=alone)
    with pytest.raises(RuntimeError, match="Invalid process group specified"):  # torch: RuntimeError
        dist.destroy_process_group(alone)
    dist.all_reduce(x)
    assert x.tolist() == [2.0, 2.0]
    # Everything destroyed: handles kept of the default group and of a
    # subgroup refuse every call, naming it.
    sub = dist.new_group([0, 1])
    world_handle = dist.group.WORLD
    dist.barrier()
    dist.destroy_process_group()
    assert not dist.is_initialized()
    for group in (sub, world_handle):
        for op, call in [("all_reduce", lambda: dist.all_reduce(x, group=group)),
                         ("broadcast", lambda: dist.broadcast(x, 0, group=group)),
                         ("barrier", lambda: dist.barrier(group=group)),
                         ("all_gather_object", lambda: dist.all_gather_object([None] * world, 1, group=group)),
                         ("send", lambda: dist.send(x, 1 - rank, group=group)),
                         ("irecv", lambda: dist.irecv(x, 1 - rank, group=group)),
                         ("get_rank", lambda: dist.get_rank(group))]:
            with pytest.raises(dist.DistError, match=f"^{op}: the process group was destroyed"):
                call()
    with pytest.raises(dist.DistError, match="Default process group has not been initialized"):
        dist.all_reduce(x)
    # Destroying again: AssertionError for the default group, RuntimeError
    # for another one, as torch 1.13.
    with pytest.raises(AssertionError, match="not initialized"):
        dist.destroy_process_group()
    with pytest.raises(RuntimeError, match="Invalid process group specified"):
        dist.destroy_process_group(sub)
    with pytest.raises(RuntimeError, match="Invalid process group specified"):
        dist.destroy_process_group(world_handle)
    assert x.tolist() == [2.0, 2.0]  # nothing ran


def test_a_group_used_after_destroy_process_group_is_a_clear_error():
    run_ranks(_destroyed_groups, 2, init=False)


# ---- MASTER_PORT ----


def _master_port(rank, world, value):
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": value})
    with pytest.raises(dist.DistInvalidArgument) as info:
        dist.init_process_group("tdist", timeout=timedelta(seconds=5))
    return str(info.value)


@pytest.mark.parametrize("value", ["29500x", "", "70000", "0", "-1", "   "])
def test_a_bad_master_port_is_refused_naming_the_variable_and_value(value):
    message = run_ranks(_master_port, 1, value, init=False)[0]
    assert message == ("env:// rendezvous: environment variable MASTER_PORT must be a port number from 1 to 65535, "
                       f"got '{value}'"), message


def _master_port_with_blanks(rank, world, port):
    os.environ["MASTER_PORT"] = f" {port} "  # torch's int() ignores the blanks: so does tdist
    dist.init_process_group("tdist", timeout=PG_TIMEOUT)
    x = np.array([1.0])
    dist.all_reduce(x)
    return x.tolist()


def test_a_master_port_with_blanks_around_it_is_read_as_torch_reads_it():
    assert run_ranks(_master_port_with_blanks, 1, dist._spawn.free_port(), init=False) == [[1.0]]


# ---- timeouts ----


def _timeouts(rank, world):
    for bad, shown in [(timedelta(0), "0 s"), (timedelta(seconds=-1), "-1 s"), (0, "0 s")]:
        with pytest.raises(dist.DistInvalidArgument, match=f"^init_process_group: timeout must be positive, got {shown}"):
            dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, timeout=bad)
    assert not dist.is_initialized()
    # The C++ layer refuses it too.
    with pytest.raises(dist.DistInvalidArgument, match="^init_process_group: timeout must be positive, got 0 ms"):
        dist._C.init_process_group("tdist", "", timedelta(0), 1, 0, dist.HashStore(), "")
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(seconds=30))
    for bad in (timedelta(0), timedelta(milliseconds=-5)):
        with pytest.raises(dist.DistInvalidArgument, match="^new_group: timeout must be positive"):
            dist.new_group([0], timeout=bad)
    dist.new_group([0], timeout=timedelta(seconds=30))
    dist.destroy_process_group()


def test_a_timeout_that_is_not_positive_is_refused():
    run_ranks(_timeouts, 1, init=False)


# ---- fault trials, round three: input that was accepted ----


def _odd_inputs(rank, world):
    # new_group: a string is not a list of ranks; no ranks make no members.
    with pytest.raises(TypeError, match="new_group: ranks must be a list of ints, not str '01'"):
        dist.new_group("01")
    with pytest.raises(TypeError, match="new_group: ranks must be a list of ints"):
        dist.new_group([0, "1"])
    assert dist.new_group([]) == dist.GroupMember.NON_GROUP_MEMBER
    with pytest.raises(TypeError, match="barrier: device_ids must be None or a list of ints, not 'x'"):
        dist.barrier(device_ids="x")
    dist.barrier(device_ids=[0])  # torch's form: accepted, ignored on CPU
    # Work.wait: 0 is torch's kNoTimeout (no timeout), negative is refused.
    t = np.full(5, rank + 1, np.float32)
    work = dist.all_reduce(t, async_op=True)
    assert work.wait(timeout=timedelta(0)) is True
    assert t.tolist() == [world * (world + 1) / 2] * 5
    work = dist.all_reduce(t, async_op=True)
    with pytest.raises(dist.DistInvalidArgument, match="Work.wait: the timeout is -1000 ms; it must not be negative"):
        work.wait(timeout=timedelta(seconds=-1))
    work.wait()
    # In place at world size 1 (input is output's only block): torch's
    # in-place form, done; at larger sizes the same tensor overlaps.
    x = np.arange(4, dtype=np.float32)
    if world == 1:
        dist.all_gather_into_tensor(x, x)
        assert x.tolist() == [0, 1, 2, 3]
    return True


@pytest.mark.parametrize("world", [1, 2])
def test_inputs_that_were_accepted_get_torchs_behaviour_or_a_clear_error(world):
    assert run_ranks(_odd_inputs, world) == [True] * world


@pytest.mark.parametrize("make", [lambda d: dist.HashStore(), lambda d: dist.FileStore(os.path.join(d, "f"), 1)],
                         ids=["HashStore", "FileStore"])
def test_a_store_wait_with_a_negative_timeout_is_refused(make, tmp_path):
    store = make(str(tmp_path))
    with pytest.raises(dist.DistInvalidArgument, match="wait: the timeout is -5 ms; it must not be negative"):
        store.wait(["k"], timedelta(milliseconds=-5))
    store.set("k", b"v")
    store.wait(["k"], timedelta(0))  # present: returns at once
