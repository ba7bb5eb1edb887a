"""torch 2.13's torchrun (its c10d rendezvous and elastic agent) and tdistrun
both launch a torch program on backend "tdist"."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_launched.py")


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", TDIST_PYTHON=sys.executable)
    env.pop("TDIST_SOCKET_IFNAME", None)
    return env


def _check(out, world):
    for rank in range(world):
        want = f"launched rank {rank} of {world} sum {[float(world * (world + 1) / 2)] * 3}"
        assert want in out, out


@pytest.mark.parametrize("world", [2, 3])
def test_torchrun_launches_a_tdist_job(world):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(world), SCRIPT], env=_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    _check(proc.stdout, world)


def test_tdistrun_launches_a_torch_2_program():
    tdistrun = os.path.join(os.environ["TDIST_BUILD_DIR"], "bin", "tdistrun")
    proc = subprocess.run([tdistrun, "--standalone", "--nproc-per-node", "2", SCRIPT], env=_env(),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    _check(proc.stdout, 2)
