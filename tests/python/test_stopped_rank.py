"""A rank stopped (SIGSTOP) before a collective, on 3 ranks that rendezvous
through env:// (rank 0 hosts the group's TCPStore): the survivors' call
fails at the group's timeout, whoever is stopped (the store's host too, so
that the notes a waiting call reads and writes in the store get no
answer), and every survivor's error names the stopped rank, and no healthy
one, as the rank that did not come (issue 49). So does tdist-trace over
their flight recorders. The ranks are separate processes (trace_job.py's
way), as a SIGSTOP needs."""

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(os.environ.get("TDIST_BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "bin", "tdist-trace")
WORLD = 3
TIMEOUT_S = 3
# Far above the timeout plus the second the notes may take, far below what
# a store op held by the stopped store would add (the store's own timeout,
# the group's, per op: 16 s for a 5 s timeout in the trials).
GRACE_S = 3
# How long a job may take from start to the survivors' exit: a hang fails.
JOB_DEADLINE = 60
TRIALS = int(os.environ.get("TDIST_STOP_TRIALS", "2"))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_job(tmp_path, victim, transport):
    """Runs stopped_rank_job.py on WORLD ranks; returns the survivors' results
    and the dump directory. The stopped rank is killed once they exited."""
    out, trace_dir = tmp_path / "out", tmp_path / "trace"
    out.mkdir()
    port = _free_port()
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(WORLD), TDIST_TRANSPORT=transport, TDIST_TRACE_DIR=str(trace_dir),
                   JOB_OUT=str(out))
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "stopped_rank_job.py"), str(victim),
                                       "10", str(TIMEOUT_S)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    try:
        for rank, p in enumerate(procs):
            if rank != victim:
                _, err = p.communicate(timeout=JOB_DEADLINE)
                assert p.returncode == 0, f"rank {rank}: exit code {p.returncode}: {err}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
    results = [json.loads((out / f"{r}.json").read_text()) for r in range(WORLD) if r != victim]
    return results, trace_dir


def blamed_ranks(message):
    """The ranks an error names as the ones that did not come: every rank
    it names, except where it names the rank that raised ("rank 2: ...")
    or a survivor that relayed its own error ("rank 1 aborted the group:
    ...")."""
    text = re.sub(r"rank \d+ aborted the group: ", "", message)
    text = re.sub(r"(^|: )rank \d+: ", r"\1", text)
    named = set()
    for group in re.findall(r"\branks? (\d+(?:, \d+)*)", text):
        named.update(int(r) for r in group.split(", "))
    return named


def test_blamed_ranks_reads_relays_apart_from_blame():
    relayed = ("rank 2: all_reduce (call #10 in this group): rank 1 aborted the group: all_reduce (call #10 in "
               "this group): Timed out after 3000 ms waiting for rank 0")
    assert blamed_ranks(relayed) == {0}
    assert blamed_ranks("all_reduce (call #4 in this group): Timed out after 3000 ms waiting for rank 1; "
                        "rank 0 never said it reached this call (behind, stopped or dead)") == {0, 1}


@pytest.mark.parametrize("victim", [0, 1], ids=["store_host_stopped", "other_rank_stopped"])
@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_a_stopped_rank_times_out_its_peers_on_time_naming_it_alone(tmp_path, transport, victim):
    for trial in range(TRIALS):
        where = tmp_path / str(trial)
        where.mkdir()
        results, trace_dir = _run_job(where, victim, transport)
        for result in results:
            what = f"trial {trial}, rank {result['rank']}: {result}"
            assert result["error"] is not None and result["call"] == 10, what
            # A timeout, or a survivor's timeout relayed (DistNetworkTimeoutError).
            assert "Timed out after %d ms" % (TIMEOUT_S * 1000) in result["message"], what
            assert result["elapsed"] < TIMEOUT_S + GRACE_S, what
            assert blamed_ranks(result["message"]) == {victim}, what
        text = subprocess.run([TOOL, str(trace_dir)], capture_output=True, text=True, timeout=60).stdout
        assert f"behind: rank {victim}, 1 call(s) behind the furthest" in text, text
        assert re.findall(r"behind: rank (\d+)", text) == [str(victim)], text
        missing = re.search(r"first call a rank is missing from: #10 .*: ranks? [\d, ]+ in it, rank (\d+) ", text)
        assert missing and missing.group(1) == str(victim), text
