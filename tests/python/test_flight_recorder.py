"""The flight recorder (docs/debugging.md): what each rank records, when it
dumps, and what tdist-trace makes of a job where one rank stops or skips a
collective. The jobs run their ranks as separate processes (trace_job.py) so
that a stopped rank and the dumps are real."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import numpy as np
import pytest

import tdist as dist
from harness import run_ranks
from launcher_env import dumps_of_paused_job

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(os.environ.get("TDIST_BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "bin", "tdist-trace")
JOB_DEADLINE = 60


def _free_port():
    # Outside the ephemeral range (tdist._spawn.free_port says why).
    from tdist._spawn import free_port
    return free_port()


def _run_job(tmp_path, mode, k, transport, stopped=None):
    """Runs trace_job.py on 4 ranks; returns the dump directory. The stopped
    rank (SIGSTOPs itself) is killed once the others have exited."""
    trace_dir = tmp_path / "trace"
    port = _free_port()
    procs = []
    for rank in range(4):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="4",
                   TDIST_TRACE_DIR=str(trace_dir), TDIST_TRANSPORT=transport, JOB_TIMEOUT="3",
                   JOB_START_DIR=str(tmp_path / "started"))
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "trace_job.py"), mode, str(k)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    try:
        for rank, p in enumerate(procs):
            if rank != stopped:
                _, err = p.communicate(timeout=JOB_DEADLINE)
                assert p.returncode != 0, f"rank {rank} finished a job that cannot finish"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return trace_dir


def _tool(*args):
    out = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_tdist_trace_names_a_stopped_rank_and_its_last_call(tmp_path, transport):
    k = 20  # rank 2 stops before iteration 20: its last call is all_reduce #19
    trace_dir = _run_job(tmp_path, "stop", k, transport, stopped=2)
    assert sorted(os.listdir(trace_dir)) == ["rank0.json", "rank1.json", "rank3.json"]
    text = _tool(trace_dir)
    assert "every rank that left a dump completed call #19 all_reduce float32 x 1000 SUM" in text, text
    assert "first call a rank is missing from: #20 all_reduce float32 x 1000 SUM: ranks 0, 1, 3 in it, rank 2" in text
    assert "behind: rank 2, 1 call(s) behind the furthest; its last call: #19 all_reduce float32 x 1000 SUM" in text
    for rank in (0, 1, 3):
        doc = json.loads((trace_dir / f"rank{rank}.json").read_text())
        last = doc["entries"][-1]
        assert (last["op"], last["seq"], last["state"]) == ("all_reduce", 20, "failed")
        assert doc["rank"] == rank and "a call failed" in doc["reason"]


def test_tdist_trace_finds_the_collective_a_rank_skipped(tmp_path):
    k = 5  # rank 1 skips iteration 5's all_reduce: its call #10 is the broadcast
    trace_dir = _run_job(tmp_path, "skip", k, "auto")
    text = _tool(trace_dir)
    assert "every rank completed call #9 broadcast int64 x 7 root 0" in text, text
    assert ("first call where ranks disagree: #10: ranks 0, 2, 3 all_reduce float32 x 1000 SUM; "
            "rank 1 broadcast int64 x 7 root 0") in text
    chrome = tmp_path / "chrome.json"
    _tool(trace_dir, "--chrome", chrome)
    events = json.loads(chrome.read_text())["traceEvents"]
    calls = [e for e in events if e["ph"] == "X" and e["name"] in ("all_reduce", "broadcast")]
    # Per rank: ten calls completed (five of each op), then call #10 failed.
    for rank in range(4):
        states = [(e["args"]["seq"], e["args"]["state"]) for e in calls if e["pid"] == rank]
        assert states == [(s, "completed") for s in range(10)] + [(10, "failed")]


def _record_calls(rank, world, path):
    x = np.full(5, rank + 1, np.float32)
    dist.all_reduce(x)
    dist.broadcast(np.zeros(3, np.int32), src=world - 1)
    if rank == 0:
        dist.send(np.ones(4, np.float64), dst=1, tag=7)
    elif rank == 1:
        dist.recv(np.ones(4, np.float64), src=0, tag=7)
    work = dist.all_gather_into_tensor(np.zeros(2 * world, np.int64), np.ones(2, np.int64), async_op=True)
    work.wait()
    dist.dump_trace(path + f".{rank}")
    return json.loads(open(path + f".{rank}").read())


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_every_call_is_recorded_with_its_arguments_and_state(tmp_path, transport):
    world = 3
    docs = run_ranks(_record_calls, world, str(tmp_path / "dump"), env={"TDIST_TRANSPORT": transport})
    for rank, doc in enumerate(docs):
        assert doc["rank"] == rank and doc["groups"][0]["global_ranks"] == [0, 1, 2]
        calls = [(e["op"], e.get("seq"), e.get("dtype"), e.get("count"), e.get("root"), e.get("peer"), e["state"])
                 for e in doc["entries"]]
        expected = [("all_reduce", 0, "float32", 5, None, None, "completed"),
                    ("broadcast", 1, "int32", 3, 2, None, "completed")]
        if rank == 0:
            expected.append(("send", None, "float64", 4, None, 1, "completed"))
        if rank == 1:
            expected.append(("recv", None, "float64", 4, None, 0, "completed"))
        expected.append(("all_gather_into_tensor", 2, "int64", 2, None, None, "completed"))
        assert calls == expected
        for e in doc["entries"]:
            assert e["queued_ns"] <= e["started_ns"] <= e["finished_ns"]
        if transport == "auto":  # peers' call records on shared memory: who came last
            arrival = doc["entries"][0]["arrival"]
            assert arrival["last_rank"] in range(world) and arrival["late_by_us"] >= 0


def _signal_dump(rank, world, trace_dir):
    dist.all_reduce(np.ones(3, np.float32))
    target = os.path.join(trace_dir, f"rank{rank}.json")
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while not os.path.exists(target):  # the recorder's thread writes it
        assert time.monotonic() < deadline, "SIGUSR1 wrote no dump"
        time.sleep(0.01)
    doc = json.loads(open(target).read())
    return doc["reason"], [e["op"] for e in doc["entries"]]


def test_sigusr1_dumps_every_rank_to_the_trace_dir(tmp_path):
    trace_dir = str(tmp_path / "sig")
    results = run_ranks(_signal_dump, 2, trace_dir, env={"TDIST_TRACE_DIR": trace_dir})
    assert results == [("SIGUSR1", ["all_reduce"])] * 2


def _count_entries(rank, world):
    for _ in range(10):
        dist.all_reduce(np.ones(1, np.float32))
    return [e["seq"] for e in json.loads(dist._C._trace_json())["entries"]]


def test_the_ring_keeps_the_last_calls_and_size_zero_turns_it_off():
    assert run_ranks(_count_entries, 2, env={"TDIST_TRACE_BUFFER_SIZE": "4"}) == [[6, 7, 8, 9]] * 2
    assert run_ranks(_count_entries, 2, env={"TDIST_TRACE_BUFFER_SIZE": "0"}) == [[]] * 2


def _traced_block(rank, world, path):
    dist.all_reduce(np.ones(8, np.float32))  # before the block: not in the trace
    with dist.trace_calls(path):
        dist.all_reduce(np.ones(8, np.float32))
        dist.barrier()
    return True


def test_trace_calls_writes_a_chrome_trace_of_the_block_on_rank_0(tmp_path):
    path = str(tmp_path / "trace.json")
    run_ranks(_traced_block, 3, path)
    events = json.loads(open(path).read())["traceEvents"]
    calls = sorted((e["pid"], e["args"]["seq"], e["name"]) for e in events if e["ph"] == "X" and "args" in e)
    assert calls == [(r, s, op) for r in range(3) for s, op in ((1, "all_reduce"), (2, "barrier"))]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 2"}


def test_dump_trace_without_a_place_to_write_raises():
    os.environ.pop("TDIST_TRACE_DIR", None)
    with pytest.raises(dist.DistError, match="TDIST_TRACE_DIR is not set"):
        dist.dump_trace()


def _three_all_reduces(rank, world):
    for _ in range(3):
        dist.all_reduce(np.ones(4, np.float32))
    return True


def test_tdist_trace_writes_the_jobs_chrome_trace_when_the_default_group_goes(tmp_path):
    path = tmp_path / "job.json"
    run_ranks(_three_all_reduces, 2, env={"TDIST_TRACE": str(path)})
    events = json.loads(path.read_text())["traceEvents"]
    calls = sorted((e["pid"], e["args"]["seq"], e["name"]) for e in events if e["ph"] == "X" and "args" in e)
    # harness.run_ranks ends every rank with a barrier before destroying the group.
    assert calls == [(r, s, op) for r in range(2) for s, op in ((0, "all_reduce"), (1, "all_reduce"),
                                                               (2, "all_reduce"), (3, "barrier"))]


def test_sigusr1_to_the_launcher_dumps_every_rank_of_a_hung_job(tmp_path):
    """A job hangs (rank 2 stuck in its own work at step 20); one SIGUSR1 to
    tdistrun reaches every rank, and tdist-trace names rank 2."""
    trace_dir, marker = tmp_path / "trace", tmp_path / "stuck"
    env = dict(os.environ, TDIST_TRACE_DIR=str(trace_dir), JOB_MARKER=str(marker), JOB_TIMEOUT="600")
    launcher = subprocess.Popen([sys.executable, "-m", "tdist.run", "--standalone", "--nproc-per-node", "4",
                                 os.path.join(HERE, "trace_job.py"), "hang", "20"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + JOB_DEADLINE
        text = ""
        # Until the dumps show ranks 0, 1 and 3 waiting in call #20: they
        # may still be on their way there when the first signal lands.
        while "ranks 0, 1, 3 in it, rank 2 never began it" not in text:
            assert time.monotonic() < deadline and launcher.poll() is None, text
            if not marker.exists():
                time.sleep(0.05)
                continue
            for f in trace_dir.glob("rank*.json"):
                f.unlink()
            launcher.send_signal(signal.SIGUSR1)
            while len(list(trace_dir.glob("rank*.json"))) < 4:
                assert time.monotonic() < deadline, "SIGUSR1 did not reach every rank"
                time.sleep(0.05)
            text = _tool(trace_dir)
        assert "behind: rank 2, 1 call(s) behind the furthest; its last call: #19 all_reduce float32 x 1000 SUM " \
               "(completed)" in text, text
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


def test_sigusr1_without_a_trace_dir_dumps_to_the_default_place_and_the_job_goes_on(tmp_path):
    """Without TDIST_TRACE_DIR a SIGUSR1 to tdistrun must not end the job: the
    ranks dump into $TMPDIR/tdist-trace-<tdistrun's pid>, which tdistrun
    names, and the job then finishes."""
    marker, go = tmp_path / "paused", tmp_path / "go"
    env = dict(os.environ, TMPDIR=str(tmp_path), JOB_MARKER=str(marker), JOB_GO=str(go), JOB_TIMEOUT="60")
    env.pop("TDIST_TRACE_DIR", None)
    launcher = subprocess.Popen([sys.executable, "-m", "tdist.run", "--standalone", "--nproc-per-node", "2",
                                 os.path.join(HERE, "trace_job.py"), "pause", "3"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        dump_dir = dumps_of_paused_job(launcher, marker, 2, tmp_path, time.monotonic() + JOB_DEADLINE)
        for r in range(2):
            doc = json.loads((dump_dir / ("rank%d.json" % r)).read_text())
            assert doc["reason"] == "SIGUSR1" and [e["op"] for e in doc["entries"]] == ["all_reduce"] * 3
        go.touch()
        _, err = launcher.communicate(timeout=JOB_DEADLINE)
        assert launcher.returncode == 0, err
        assert "got SIGUSR1; passing it to every rank (their flight recorders go to %s)" % dump_dir in err, err
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


def _calibrated_clock(rank, world):
    # Ranks 1 and 2 claim another host than rank 0's: their dumps carry
    # rank 0's clock as measured through the store at group creation.
    os.environ["TDIST_HOST_ID"] = "host-a" if rank == 0 else "host-b"
    dist.init_process_group("tdist", timeout=timedelta(seconds=40))
    dist.all_reduce(np.ones(2, np.float32))
    group = json.loads(dist._C._trace_json())["groups"][-1]
    dist.barrier()
    dist.destroy_process_group()
    return group["transport"], group["clock_offset_ns"], group["clock_uncertainty_ns"]


def test_ranks_on_another_host_measure_rank_0s_clock_through_the_store():
    results = run_ranks(_calibrated_clock, 3, init=False)
    assert results[0] == ("tcp", 0, 0)  # rank 0's own clock
    for transport, offset, uncertainty in results[1:]:
        # One host, so the true offset is 0: it must lie within the bound.
        assert transport == "tcp" and uncertainty > 0 and abs(offset) <= uncertainty
