"""What the launcher tests share (test_slurm.py, test_mpirun.py,
test_flight_recorder.py, tests/torch/test_torch_launchers.py): an environment with no
launcher's variables in it (so that only the launcher under test can say
who a rank is), a free port, the checks of one rank's report from
launcher_job.py, and the SIGUSR1 dumps of a paused job."""

import os
import re

# Variables of every launcher (and of a job pytest itself may run in).
FOREIGN = re.compile(r"^(SLURM_|SALLOC_|SBATCH_|SRUN_|OMPI_|PMI_|PMIX_|MPI_LOCAL)|^(RANK|WORLD_SIZE|LOCAL_RANK|"
                     r"LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|TDIST_RESTART_COUNT)$")


def without_launcher_variables():
    """os.environ without any launcher's variables."""
    return {k: v for k, v in os.environ.items() if not FOREIGN.match(k)}


def free_port():
    # Outside the ephemeral range, which connections and bind(port 0) take
    # from (a port from bind(0) was now and then taken before the listen).
    from tdist._spawn import free_port as pick
    return pick()


def check_report(report, rank, world_size, rank_source):
    """One rank's report: the rank and world size the launcher gave, read by
    tdist from `rank_source` with none of torchrun's variables around, and
    the all_reduce of [r + 1, (r + 1) ** 2, 2 ** r] over every rank r."""
    expected = [sum(r + 1 for r in range(world_size)), sum((r + 1) ** 2 for r in range(world_size)),
                sum(2 ** r for r in range(world_size))]
    assert report["world_size"] == world_size, report
    assert report["launcher"][rank_source] == str(rank), report
    assert all(value is None for value in report["torch_launcher_variables"].values()), report
    launched = report["launch_environment"]
    assert (launched["rank"], launched["world_size"], launched["rank_source"]) == \
        (rank, world_size, rank_source), report
    assert report["reduced"] == expected, report


def dumps_of_paused_job(launcher, marker, ranks, tmp_path, deadline, wanted=None):
    """A job started by `launcher` (tdistrun, or python -m tdist.run) whose
    ranks each write the file "<marker>.<rank>" and then wait: once all have,
    sends the launcher SIGUSR1 and waits until `wanted` files rank*.json (or
    one per rank) appear in the default dump directory,
    <tmp_path>/tdist-trace-<launcher's pid> (TMPDIR is tmp_path). Returns
    that directory. Fails if the job ends or `deadline` (monotonic) passes."""
    import signal
    import time

    while not all(os.path.exists("%s.%d" % (marker, r)) for r in range(ranks)):
        assert time.monotonic() < deadline and launcher.poll() is None, "the ranks never paused"
        time.sleep(0.05)  # polling the files the ranks write, with a deadline
    launcher.send_signal(signal.SIGUSR1)
    dump_dir = tmp_path / ("tdist-trace-%d" % launcher.pid)
    while len(list(dump_dir.glob("rank*.json"))) < (wanted or ranks):
        assert time.monotonic() < deadline and launcher.poll() is None, "no dumps in %s" % dump_dir
        time.sleep(0.05)
    return dump_dir
