"""Failures: tdist.spawn reports the failed rank, a killed rank makes its
peers' collectives fail instead of hang, monitored_barrier names the rank
that did not arrive."""

import json
import multiprocessing
import os
import signal
import tempfile
import traceback
from datetime import timedelta

import numpy as np
import pytest

import spawn_targets
import tdist as dist
from harness import run_ranks


def test_spawn_sets_the_launch_environment_spawn_start_method():
    with tempfile.TemporaryDirectory() as out:
        dist.spawn(spawn_targets.report_env_and_all_reduce, args=(out,), nprocs=2, timeout=60)
        reports = [json.load(open(os.path.join(out, f"{i}.json"))) for i in range(2)]
    for i, report in enumerate(reports):
        env = report["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == str(i)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
        assert report["rank"] == i and report["world"] == 2 and report["sum"] == 3.0
    assert reports[0]["env"]["MASTER_PORT"] == reports[1]["env"]["MASTER_PORT"]


def test_spawn_names_the_rank_that_raised_with_its_traceback():
    with pytest.raises(dist.ProcessRaisedException) as info:
        dist.spawn(spawn_targets.raise_on_rank_1, nprocs=3, start_method="fork", timeout=60)
    assert info.value.error_index == 1
    assert "rank 1" in str(info.value)
    assert "ValueError: boom from rank 1" in str(info.value) and "Traceback" in str(info.value)


def test_spawn_reports_exit_codes_and_signals():
    with pytest.raises(dist.ProcessExitedException) as info:
        dist.spawn(spawn_targets.exit_on_rank_1, args=(7,), nprocs=2, start_method="fork", timeout=60)
    assert info.value.error_index == 1 and info.value.exit_code == 7
    assert "exit code 7" in str(info.value)


def test_a_killed_rank_is_an_error_for_its_peers_not_a_hang():
    with tempfile.TemporaryDirectory() as out:
        ctx = dist.start_processes(spawn_targets.kill_rank_1_in_collective, args=(out,), nprocs=2, join=False,
                                   start_method="fork")
        survivor, victim = ctx.processes
        # The all_reduce must fail long before the group's 60 s timeout.
        survivor.join(45)
        alive = survivor.is_alive()
        ctx._stop_all()
        assert not alive, "rank 0 still waits in all_reduce 45 s after its peer was killed"
        assert victim.exitcode == -9
        result = json.load(open(os.path.join(out, "0.json")))
    assert result["error"] is not None, "all_reduce succeeded without its peer"
    assert result["error"] == "DistNetworkError", result
    assert "1" in result["message"], result  # names the dead peer


def test_spawn_stops_the_other_ranks_when_one_is_killed():
    with pytest.raises(dist.ProcessExitedException) as info, tempfile.TemporaryDirectory() as out:
        dist.spawn(spawn_targets.kill_rank_1_in_collective, args=(out,), nprocs=2, start_method="fork", timeout=60)
    assert info.value.error_index == 1 and info.value.signal_name == "SIGKILL"
    assert "SIGKILL" in str(info.value)


def _missing_rank(rank, world):
    if rank == 0:
        try:
            dist.monitored_barrier(timeout=timedelta(milliseconds=500), wait_all_ranks=True)
        except dist.DistTimeoutError as error:
            return str(error)
        return "no error"
    return None  # rank 1 never enters the monitored barrier


def test_monitored_barrier_names_the_rank_that_did_not_arrive():
    message = run_ranks(_missing_rank, 2)[0]
    assert "Rank 1 failed to pass monitoredBarrier" in message, message


def _host_store(port, ready):
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=120))
    ready.set()
    signal.pause()  # serves from its own thread until stopped, then killed
    del store


def _rank_with_stopped_store(rank, port, joined, stopped, out):
    try:
        store = dist.TCPStore("127.0.0.1", port, timeout=timedelta(seconds=120))
        dist.init_process_group("tdist", store=store, rank=rank, world_size=2, timeout=timedelta(seconds=3))
        joined.release()
        if rank == 0:
            stopped.wait(60)
            try:
                dist.all_reduce(np.ones(4, np.float32))
                result = {"error": None}
            except dist.DistError as e:
                result = {"error": type(e).__name__, "message": str(e)}
        else:
            stopped.wait(60)
            joined.acquire(timeout=60)  # alive, away from the call, until rank 0 is done
            result = {"error": "rank 1 stays away"}
    except BaseException:
        result = {"error": "crash", "message": traceback.format_exc()}
    with open(os.path.join(out, f"{rank}.json"), "w") as f:
        json.dump(result, f)
    os._exit(0)


def test_a_stopped_store_host_does_not_delay_a_timeout():
    """The group's store lives in a third process, stopped (SIGSTOP) once both
    ranks have joined: rank 0's all_reduce, which rank 1 never joins, fails
    with the group's 3 s timeout naming rank 1, well before the store's own
    120 s (the notes a waiting call leaves in the store are diagnostics, and
    a store that does not answer gets no more than a second of the call)."""
    from tdist._spawn import free_port
    ctx = multiprocessing.get_context("fork")
    port = free_port()
    ready, stopped, joined = ctx.Event(), ctx.Event(), ctx.Semaphore(0)
    host = ctx.Process(target=_host_store, args=(port, ready))
    host.start()
    try:
        assert ready.wait(60), "the store did not start"
        with tempfile.TemporaryDirectory() as out:
            ranks = [ctx.Process(target=_rank_with_stopped_store, args=(r, port, joined, stopped, out))
                     for r in range(2)]
            for p in ranks:
                p.start()
            for _ in ranks:
                assert joined.acquire(timeout=60), "the ranks did not join"
            os.kill(host.pid, signal.SIGSTOP)
            stopped.set()
            ranks[0].join(40)  # a deadline for a hang: far below the store's 120 s
            alive = ranks[0].is_alive()
            joined.release()  # rank 1 may go
            for p in ranks:
                if p.is_alive():
                    p.kill()
                p.join()
            assert not alive, "rank 0 still waits 40 s after its 3 s timeout (held by the stopped store)"
            result = json.load(open(os.path.join(out, "0.json")))
    finally:
        host.kill()
        host.join()
    assert result["error"] == "DistTimeoutError", result
    assert "Timed out after 3000 ms waiting for rank 1" in result["message"], result
