"""Open MPI's mpirun as tdist's launcher, for real: ranks started by
`mpirun -np N`, which only see Open MPI's variables (OMPI_COMM_WORLD_RANK,
OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, ...) and MASTER_ADDR/PORT,
must form one job in the Python package's env:// rendezvous and in
torch.distributed on the plugin's "tdist" backend (launcher_job.py).
tdist-bench under mpirun is tests/bench/test_bench.cc's. Needs Debian's
openmpi-bin; skipped elsewhere, saying so."""

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from launcher_env import check_report, free_port, without_launcher_variables

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "launcher_job.py")
MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not installed (Debian's openmpi-bin)")


def run_job(ranks, out_dir, *job_args):
    env = without_launcher_variables()  # only mpirun's may say who a rank is
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"),) if p)
    command = [MPIRUN, "--oversubscribe", "-np", str(ranks), "-x", "MASTER_ADDR=127.0.0.1",
               "-x", f"MASTER_PORT={free_port()}", "-x", "PYTHONPATH", sys.executable, JOB, "--out", str(out_dir), *job_args]
    if os.geteuid() == 0:
        command.insert(1, "--allow-run-as-root")
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # Each rank's report from its own file: mpirun's forwarded output can
    # join two ranks' lines into one.
    reports = {}
    for path in out_dir.iterdir():
        report = json.loads(path.read_text())
        reports[report["rank"]] = report
    assert sorted(reports) == list(range(ranks)), result.stdout[-3000:]
    for rank, report in reports.items():
        check_report(report, rank, ranks, "OMPI_COMM_WORLD_RANK")
        launched = report["launch_environment"]
        assert (launched["local_rank"], launched["local_world_size"]) == (rank, ranks), report
    return reports


@pytest.mark.parametrize("ranks", [1, 3])
def test_python_ranks_started_by_mpirun_form_one_job(ranks, tmp_path):
    run_job(ranks, tmp_path)


def test_torch_ranks_on_the_plugin_started_by_mpirun_form_one_job(tmp_path):
    pytest.importorskip("torch")
    try:
        importlib.import_module("tdist.torch")
    except ImportError as e:
        pytest.skip(f"the torch plugin is not built: {e}")
    run_job(2, tmp_path, "--torch")
