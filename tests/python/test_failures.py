"""Failures: tdist.spawn reports the failed rank, a killed rank makes its
peers' collectives fail instead of hang, monitored_barrier names the rank
that did not arrive."""

import json
import os
import tempfile
from datetime import timedelta

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
