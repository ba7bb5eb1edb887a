"""Slurm's srun as tdist's launcher, for real (docs/launcher.md, "Other
launchers"). The module starts a private one-machine Slurm cluster: a
munged on a socket of its own, slurmctld, and two slurmd "nodes" (n0, n1)
on this host, all in foreground with a slurm.conf in a temporary directory
that SLURM_CONF points srun at, listening on 127.0.0.1 (or the address this
host's name resolves to) only; it is torn down after the module. Then ranks
started by srun, which only see srun's variables (SLURM_PROCID,
SLURM_NTASKS / SLURM_STEP_NUM_TASKS, SLURM_LOCALID) and MASTER_ADDR/PORT,
must form one job: the Python package's env:// rendezvous (launcher_job.py)
and the tdist-bench binary, as they do under mpirun.

Needs root and Debian's slurmd, slurmctld and slurm-client (which bring
munge); skipped elsewhere, saying so."""

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from launcher_env import check_report, free_port, without_launcher_variables

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, os.pardir, os.pardir)
BUILD = os.environ.get("TDIST_BUILD_DIR", os.path.join(ROOT, "build"))
BENCH = os.path.join(BUILD, "bin", "tdist-bench")
JOB = os.path.join(HERE, "launcher_job.py")

NODES = ("n0", "n1")
STARTUP_DEADLINE = 30  # seconds for munged, slurmctld and both slurmd to be up and the nodes idle
POLL_DEADLINE = 5  # seconds for one readiness probe (munge, sinfo)
JOB_DEADLINE = 45  # seconds for any srun, or any Slurm command (the suite's ctest deadline covers 6 of them)
TOOLS = ("munged", "mungekey", "munge", "slurmctld", "slurmd", "srun", "sinfo", "scancel")


def _tool(name):
    """Absolute path of `name`, looking in /usr/sbin and /sbin too (the daemons live there, outside some PATHs)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"]))


def _tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"({e})"


SLURM_CONF = """\
ClusterName=tdisttest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={tmp}/munge/munge.socket
# Bind to this host's address, not to every address (slurmctld; slurmd, srun).
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool/%n
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd-%n.pid
SlurmctldLogFile={tmp}/log/slurmctld.log
SlurmdLogFile={tmp}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=5
# Two slurmd on this one host, each a node of its own (Debian builds Slurm
# with multiple-slurmd support): `slurmd -N n0`, `slurmd -N n1`.
{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    """A private Slurm cluster in a temporary directory; srun() runs a job step on it."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="tdist_slurm_")
        # munged insists that everyone may traverse to its socket's directory.
        os.chmod(self.tmp, 0o711)
        self.conf = os.path.join(self.tmp, "slurm.conf")
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        self.daemons = []  # (name, Popen), in start order
        env = without_launcher_variables()  # only srun's may say who a rank is
        env["SLURM_CONF"] = self.conf
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.join(BUILD, "python"), os.environ.get("PYTHONPATH")) if p)
        self.env = env

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def _start(self, name, *argv):
        log = open(self.path("log", name + ".out"), "w")
        try:
            proc = subprocess.Popen([_tool(argv[0]), *argv[1:]], env=self.env, cwd=self.tmp,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            log.close()
        self.daemons.append((name, proc))

    def _logs(self):
        names = ["munged.log"] + [name + ".out" for name, _ in self.daemons] + \
                ["slurmctld.log"] + [f"slurmd-{n}.log" for n in NODES]
        return "\n".join(f"--- {n}:\n{_tail(self.path('log', n))}" for n in names
                         if os.path.exists(self.path("log", n)))

    def _wait_until(self, ready, what, deadline):
        """None once ready() is true; else why not (a daemon died, or the deadline passed), with the logs."""
        while True:
            dead = [f"{name} exited with {proc.returncode}" for name, proc in self.daemons
                    if proc.poll() is not None]
            if dead:
                return f"{', '.join(dead)} while waiting for {what}\n{self._logs()}"
            try:
                if ready():
                    return None
            except subprocess.TimeoutExpired:
                pass  # not yet
            if time.monotonic() > deadline:
                return f"{what} not ready within {STARTUP_DEADLINE} s\n{self._logs()}"
            time.sleep(0.2)

    def start(self):
        """Starts munged, slurmctld and the slurmd; None once both nodes are idle, else why not."""
        deadline = time.monotonic() + STARTUP_DEADLINE
        for d in ("log", "state", "munge", *(os.path.join("spool", n) for n in NODES)):
            os.makedirs(self.path(d))
        os.chmod(self.path("munge"), 0o755)
        key = self.path("munge.key")
        made = subprocess.run([_tool("mungekey"), "--create", "--keyfile", key], capture_output=True, text=True,
                              timeout=JOB_DEADLINE)
        if made.returncode != 0:
            return f"mungekey failed: {made.stderr.strip()}"
        os.chmod(key, 0o400)
        socket_path = self.path("munge", "munge.socket")
        self._start("munged", "munged", "--foreground", "--origin=127.0.0.1", f"--socket={socket_path}",
                    f"--key-file={key}", f"--pid-file={self.path('munge', 'munged.pid')}",
                    f"--log-file={self.path('log', 'munged.log')}", f"--seed-file={self.path('munge', 'seed')}")

        def munge_works():
            return subprocess.run([_tool("munge"), "--socket", socket_path, "--no-input"], capture_output=True,
                                  timeout=POLL_DEADLINE).returncode == 0

        problem = self._wait_until(munge_works, "munged", deadline)
        if problem:
            return problem

        host = socket.gethostname().split(".")[0]  # `hostname -s`, which slurmctld checks SlurmctldHost against
        cpus = os.cpu_count() or 1
        nodes = "\n".join(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={free_port()} CPUs={cpus} "
                          "State=UNKNOWN" for n in NODES)
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(host=host, ctld_port=free_port(), tmp=self.tmp, nodes=nodes,
                                      node_list=",".join(NODES)))
        self._start("slurmctld", "slurmctld", "-D", "-c")
        for n in NODES:
            self._start(f"slurmd-{n}", "slurmd", "-D", "-N", n)

        def nodes_idle():
            out = subprocess.run([_tool("sinfo"), "--noheader", "--Node", "--format=%N %T"], env=self.env,
                                 capture_output=True, text=True, timeout=POLL_DEADLINE).stdout.split()
            return sorted(zip(out[::2], out[1::2])) == [(n, "idle") for n in NODES]

        return self._wait_until(nodes_idle, "the Slurm nodes", deadline)

    def srun(self, *args, ntasks, nodes=1, timeout=JOB_DEADLINE):
        """srun -N nodes -n ntasks ARGS with MASTER_ADDR/PORT exported, its
        output labelled with the task id: (returncode, stdout, stderr)."""
        master = f"MASTER_ADDR=127.0.0.1,MASTER_PORT={free_port()}"
        # --overcommit: more tasks than this machine has CPUs; --kill-on-bad-exit:
        # a rank that fails ends the step rather than leave the others waiting.
        cmd = [_tool("srun"), f"--nodes={nodes}", f"--ntasks={ntasks}", "--overcommit", "--kill-on-bad-exit=1",
               "--label", "--time=2", f"--export=ALL,{master}", *args]
        proc = subprocess.Popen(cmd, env=self.env, cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cancel_all()
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{' '.join(cmd)} did not end within {timeout} s\nstdout:\n{out}\nstderr:\n{err}\n"
                        f"{self._logs()}")
        return proc.returncode, out, err

    def cancel_all(self):
        subprocess.run([_tool("scancel"), f"--user={self.user}"], env=self.env, capture_output=True,
                       timeout=JOB_DEADLINE)

    def _leftovers(self):
        """Processes of this cluster the daemons left (slurmstepd, tasks): those with our SLURM_CONF."""
        mark = f"SLURM_CONF={self.conf}".encode()
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if mark in f.read().split(b"\0") and int(pid) != os.getpid():
                        pids.append(int(pid))
            except OSError:
                pass
        return pids

    def stop(self):
        """Cancels every job, stops the daemons (the slurmd first, munged last) and removes the directory."""
        try:
            if any(name == "slurmctld" and proc.poll() is None for name, proc in self.daemons):
                self.cancel_all()
        except (OSError, subprocess.SubprocessError):
            pass
        for _, proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in self._leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def _unavailable():
    if os.geteuid() != 0:
        return "needs root (slurmd and munged run as root); run the tests as root to include it"
    missing = [tool for tool in TOOLS if _tool(tool) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} not found): "
                "apt-get install slurmd slurmctld slurm-client (munge comes with them)")
    return None


@pytest.fixture(scope="module")
def slurm():
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    cluster = Cluster()
    try:
        problem = cluster.start()
        if problem:
            # Root with Slurm installed: the cluster must come up (a skip
            # here would let a broken setup pass unnoticed).
            pytest.fail(f"the private Slurm cluster did not come up: {problem}")
        yield cluster
    finally:
        cluster.stop()


def labelled(output):
    """srun --label output: [(task id, line)] of its non-empty lines."""
    rows = []
    for line in output.splitlines():
        task, sep, text = line.partition(": ")
        if sep and task.strip().isdigit():
            rows.append((int(task), text))
    return rows


def run_python_job(slurm, ntasks, nodes, *srun_options, unset=()):
    """launcher_job.py on `ntasks` ranks, without the variables `unset`:
    {rank: its JSON report}, checked to be one job of that size."""
    without = ["/usr/bin/env", *(f"--unset={name}" for name in unset)] if unset else []
    code, out, err = slurm.srun(*srun_options, *without, sys.executable, JOB, ntasks=ntasks, nodes=nodes)
    assert code == 0, f"srun exited with {code}\nstdout:\n{out}\nstderr:\n{err}"
    reports = {}
    for task, text in labelled(out):
        report = json.loads(text)
        assert report["rank"] == task, f"task {task} of srun became rank {report['rank']}: {text}"
        reports[report["rank"]] = report
    assert sorted(reports) == list(range(ntasks)), out
    for rank, report in reports.items():
        check_report(report, rank, ntasks, "SLURM_PROCID")
        slurm_vars = report["launcher"]
        for name in ("SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"):
            assert slurm_vars[name] == (None if name in unset else str(ntasks)), report
        assert report["launch_environment"]["local_rank"] == int(slurm_vars["SLURM_LOCALID"]), report
        assert report["torchelastic"] is False, report
    return reports


def test_python_ranks_started_by_srun_form_one_job(slurm):
    reports = run_python_job(slurm, 3, 1)
    assert [reports[r]["launch_environment"]["local_rank"] for r in range(3)] == [0, 1, 2]
    assert all(reports[r]["launch_environment"]["local_world_size"] == 3 for r in range(3)), reports


@pytest.mark.parametrize("unset", ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"])
def test_either_task_count_of_srun_gives_the_world_size(slurm, unset):
    # srun sets both; tdist reads SLURM_STEP_NUM_TASKS, else SLURM_NTASKS.
    run_python_job(slurm, 2, 1, unset=(unset,))


def test_local_ranks_come_from_slurm_localid_on_two_nodes(slurm):
    # 2 nodes x 2 tasks, block distribution: ranks 0, 1 on n0 and 2, 3 on n1.
    reports = run_python_job(slurm, 4, 2, "--ntasks-per-node=2", "--distribution=block")
    assert [reports[r]["launcher"]["SLURMD_NODENAME"] for r in range(4)] == ["n0", "n0", "n1", "n1"]
    assert [reports[r]["launch_environment"]["local_rank"] for r in range(4)] == [0, 1, 0, 1]
    assert all(reports[r]["launch_environment"]["local_world_size"] == 2 for r in range(4)), reports


def _bench_available():
    if not os.access(BENCH, os.X_OK):
        pytest.skip(f"{BENCH} is not built (set TDIST_BUILD_DIR to the build directory)")


def test_bench_ranks_started_by_srun_form_one_job(slurm):
    _bench_available()
    code, out, err = slurm.srun(BENCH, "--timeout", "60", "--op", "all_reduce,broadcast", "-b", "64", "-e", "4K",
                                "-n", "2", "-w", "1", "--check", "--json", ntasks=2)
    assert code == 0, f"srun exited with {code}\nstdout:\n{out}\nstderr:\n{err}"
    rows = labelled(out)
    # Rank 0 alone prints, one row per op and size (64 B .. 4 KiB: 7 sizes):
    # two 1-rank jobs would print from both tasks, with world_size 1.
    assert [task for task, _ in rows] == [0] * 14, out
    for _, text in rows:
        row = json.loads(text)
        assert row["world_size"] == 2, f"one job of 2 ranks, not two jobs of 1: {text}"
        assert row["errors"] == 0, text
    assert [json.loads(text)["op"] for _, text in rows] == ["all_reduce"] * 7 + ["broadcast"] * 7, out


def test_bench_says_srun_set_the_rank_when_given_nproc(slurm):
    # --nproc is for runs without a launcher; the refusal names the variable
    # tdist-bench took the rank from and the world size srun gave.
    _bench_available()
    code, out, err = slurm.srun(BENCH, "--nproc", "3", "-n", "1", ntasks=2)
    assert code != 0, out
    assert "--nproc 3 is for runs without a launcher, but SLURM_PROCID is set (world size 2)" in err, err
