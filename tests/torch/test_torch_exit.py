"""A torch program on tdist ends cleanly whether or not it calls
destroy_process_group(): torch's destroy shuts the tdist group down (its
threads end, its connections close), and at exit every group still alive
(a DDP model holds one) is shut down before the interpreter finalizes. A
tdist thread left running then died taking the GIL, aborting the process
("terminate called without an active exception") in about one run in
three, and the peers logged a crash ("closed the connection").

Each ending runs RUNS times: once as a user runs it (tdistrun, fresh
interpreters), then as ranks forked from a process that has imported torch
already (torch_forks.py), which end through the same interpreter exit
(atexit handlers, module teardown, C++ static destructors) without paying
torch's import again for each of the runs the race needs."""

import os
import subprocess
import sys

import pytest

from torch_harness import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "torch_exit_program.py")
# A bug that shows in one run in three goes unseen by all six runs of the
# full suite (CI, TDIST_FULL_SUITE=1) once in 11 times; by the three of a
# quicker run, once in 3.
# (The torch tests cannot import tests/python's harness.FULL_SUITE.)
RUNS = 6 if os.environ.get("TDIST_FULL_SUITE") == "1" else 3


def tdistrun(argument, timeout):
    """The program as 2 ranks under tdistrun: (returncode, {rank: stdout}, stdout, stderr)."""
    p = subprocess.run([os.path.join(os.environ["TDIST_BUILD_DIR"], "bin", "tdistrun"), "--standalone",
                        "--nproc-per-node", "2", PROGRAM, argument],
                       env=dict(os.environ, OMP_NUM_THREADS="1", TDIST_PYTHON=sys.executable),
                       capture_output=True, text=True, timeout=timeout)
    per_rank = {rank: "\n".join(line[len("[rank %d]: " % rank):] for line in p.stdout.splitlines()
                                if line.startswith("[rank %d]: " % rank)) for rank in range(2)}
    return p.returncode, per_rank, p.stdout, p.stderr


@pytest.mark.parametrize("ending", ["destroy", "no-destroy"])
def test_a_ddp_program_exits_cleanly(ending):
    for run in range(RUNS):
        if run == 0:
            returncode, stdout, out, err = tdistrun(ending, 120)
            codes, errs, shown = [returncode], [err], "%s\n%s" % (out[-3000:], err[-3000:])
        else:
            results = run_ranks("torch_exit_program.py", 2, [ending], deadline_s=120)
            codes, errs, stdout = [r.returncode for r in results], [r.stderr for r in results], {
                r.rank: r.stdout for r in results}
            shown = "\n".join("--- rank %d exited %d\n%s\n%s" % (r.rank, r.returncode, r.stdout[-3000:],
                                                                r.stderr[-3000:]) for r in results)
        where = "run %d of %d (%s):\n%s" % (run + 1, RUNS, "tdistrun" if run == 0 else "forked ranks", shown)
        assert codes == [0] * len(codes), where
        for rank in range(2):
            assert "rank %d weights agree: True" % rank in stdout[rank], where
            if ending == "destroy":
                assert "after destroy: " in stdout[rank], where
                assert "the process group was shut down" in stdout[rank], where
        for text in errs:
            assert "closed the connection" not in text and "terminate called" not in text, where


def test_a_rank_waiting_for_rank_0_in_a_call_does_not_hold_its_exit():
    # Rank 0 exits while rank 1 waits for it in an all_reduce (timeout 30
    # minutes). Rank 0 shuts its groups down before it waits for the others
    # to leave its store, so rank 1's call fails now and rank 1 leaves; the
    # other order held rank 0 for its 60 s bound, past this deadline.
    returncode, stdout, out, err = tdistrun("rank-0-leaves", 45)
    assert returncode == 0, "%s\n%s" % (out[-3000:], err[-3000:])
    assert "rank 1: without rank 0: " in stdout[1], "%s\n%s" % (out[-3000:], err[-3000:])
