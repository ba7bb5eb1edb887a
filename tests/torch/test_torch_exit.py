"""A torch program on tdist ends cleanly whether or not it calls
destroy_process_group(): torch's destroy shuts the tdist group down (its
threads end, its connections close), and at exit every group still alive
(a DDP model holds one) is shut down before the interpreter finalizes. A
tdist thread left running then died taking the GIL, aborting the process
("terminate called without an active exception") in about one run in
three, and the peers logged a crash ("closed the connection")."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "torch_exit_program.py")
RUNS = 6


@pytest.mark.parametrize("ending", ["destroy", "no-destroy"])
def test_a_ddp_program_exits_cleanly(ending):
    tdistrun = os.path.join(os.environ["TDIST_BUILD_DIR"], "bin", "tdistrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", TDIST_PYTHON=sys.executable)
    for run in range(RUNS):
        p = subprocess.run([tdistrun, "--standalone", "--nproc-per-node", "2", PROGRAM, ending], env=env,
                           capture_output=True, text=True, timeout=120)
        where = "run %d of %d:\n%s\n%s" % (run + 1, RUNS, p.stdout[-3000:], p.stderr[-3000:])
        assert p.returncode == 0, where
        for rank in range(2):
            assert "[rank %d]: rank %d weights agree: True" % (rank, rank) in p.stdout, where
            if ending == "destroy":
                assert ("[rank %d]: after destroy: " % rank) in p.stdout, where
        assert "the process group was shut down" in p.stdout or ending != "destroy", where
        assert "closed the connection" not in p.stderr and "terminate called" not in p.stderr, where
