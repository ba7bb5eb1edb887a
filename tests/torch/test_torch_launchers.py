"""torch 2.13's torchrun (its c10d rendezvous and elastic agent) and tdistrun
both launch a torch program on backend "tdist"."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))  # launcher_env: what the launcher tests share
from launcher_env import dumps_of_paused_job  # noqa: E402
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


# ---- torch's backend autoloading (the "torch.backends" entry point) ----

_ONE_RANK = """
import torch, torch.distributed as dist
print("registered:", "tdist" in dist.Backend.backend_list, flush=True)
store = dist.TCPStore("127.0.0.1", 0, 1, True)  # port 0: the store's own, never taken meanwhile
dist.init_process_group("tdist", store=store, rank=0, world_size=1)
t = torch.ones(3)
dist.all_reduce(t)
print("backend:", dist.get_backend(), "sum:", t.tolist(), flush=True)
dist.destroy_process_group()
"""


def _python(code, env):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_import_torch_alone_registers_the_tdist_backend():
    """The build tree's package (as an installed one) carries the entry
    point: a torch program needs no `import tdist.torch`."""
    p = _python(_ONE_RANK, _env())
    assert p.returncode == 0, p.stderr[-3000:]
    assert "registered: True" in p.stdout and "backend: tdist sum: [1.0, 1.0, 1.0]" in p.stdout, p.stdout


def test_autoloading_can_be_turned_off():
    p = _python("import torch.distributed as dist; print('tdist' in dist.Backend.backend_list)",
                dict(_env(), TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stdout + p.stderr


def test_a_missing_plugin_is_explained_when_the_backend_is_asked_for(tmp_path):
    """A tdist built where torch was not importable has no plugin: asking
    for the backend says so and how to rebuild, not torch's bare "Invalid
    backend"."""
    import shutil
    build_python = os.path.join(os.environ["TDIST_BUILD_DIR"], "python")
    copy = tmp_path / "python"
    shutil.copytree(build_python, copy)
    for f in (copy / "tdist" / "torch").glob("_plugin*.so"):
        f.unlink()
    p = _python(_ONE_RANK, dict(_env(), PYTHONPATH=str(copy)))
    assert p.returncode != 0
    assert "registered: True" in p.stdout, p.stdout + p.stderr
    assert "built without its torch plugin" in p.stderr and "pip install --no-build-isolation" in p.stderr, p.stderr


def test_a_tdist_that_cannot_import_does_not_break_import_torch(tmp_path):
    """The entry point's module stands beside the package: a tdist whose
    extension is missing (or built for another Python) leaves `import torch`
    working, and asking for the backend says what is wrong."""
    import shutil
    build_python = os.path.join(os.environ["TDIST_BUILD_DIR"], "python")
    copy = tmp_path / "python"
    shutil.copytree(build_python, copy)
    for f in (copy / "tdist").glob("_C*.so"):
        f.unlink()
    p = _python(_ONE_RANK, dict(_env(), PYTHONPATH=str(copy)))
    assert p.returncode != 0
    assert "registered: True" in p.stdout, p.stdout + p.stderr
    assert "extension module" in p.stderr and "built for another Python" in p.stderr, p.stderr


_PAUSED = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("tdist")
t = torch.ones(4)
dist.all_reduce(t)
open(os.environ["JOB_MARKER"] + ".%d" % dist.get_rank(), "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(os.environ["JOB_GO"]):  # the test's go-ahead, from outside the job
    assert time.monotonic() < deadline, "no go-ahead"
    time.sleep(0.01)
dist.destroy_process_group()
"""


def test_sigusr1_dumps_each_rank_of_a_torch_job_under_its_own_name(tmp_path):
    """In a torch program the plugin's recorder names the files
    (rank<R>.torch.json); the Python package's copy, which made no group,
    writes nothing (every rank would otherwise write rank0.json)."""
    import signal
    import time
    program = tmp_path / "paused.py"
    program.write_text(_PAUSED)
    marker, go = tmp_path / "paused", tmp_path / "go"
    env = dict(_env(), TMPDIR=str(tmp_path), JOB_MARKER=str(marker), JOB_GO=str(go))
    env.pop("TDIST_TRACE_DIR", None)
    tdistrun = os.path.join(os.environ["TDIST_BUILD_DIR"], "bin", "tdistrun")
    job = subprocess.Popen([tdistrun, "--standalone", "--nproc-per-node", "2", str(program)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        dumps = dumps_of_paused_job(job, marker, 2, tmp_path, time.monotonic() + 120)
        go.touch()
        _, err = job.communicate(timeout=120)
        assert job.returncode == 0, err
        # The ranks have exited: every dump the signal started is written.
        assert sorted(f.name for f in dumps.glob("rank*.json")) == ["rank0.torch.json", "rank1.torch.json"], err
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
