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

A second cluster runs on the namespace testbed (tools/testbed.py): its two
nodes are two hosts joined by a bridge, and a job of both nodes runs across
that link, hierarchically.

Needs root and Debian's slurmd, slurmctld and slurm-client (which bring
munge), and for the testbed's cluster network namespaces; skipped
elsewhere, saying so."""

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
from testbed_tool import namespaces_unavailable, running, tail, testbed

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


SLURM_CONF = """\
ClusterName=tdisttest
SlurmctldHost={host}({ctld_addr})
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={tmp}/munge/munge.socket
{communication}
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
{task_prolog}
ReturnToService=2
KillWait=5
# Two slurmd on this one machine, each a node of its own (Debian builds
# Slurm with multiple-slurmd support): `slurmd -N n0`, `slurmd -N n1`.
{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""


# A testbed's hosts share this machine's hostname and /dev/shm, so tdist
# would take their ranks for one host's: the task prolog, which slurmstepd
# runs before each task and whose "export" lines become the task's
# variables, gives every node a host identity of its own.
TASK_PROLOG = """\
#!/bin/sh
echo "export TDIST_HOST_ID=slurm-node-$SLURMD_NODENAME"
"""


class Cluster:
    """A private Slurm cluster in a temporary directory; srun() runs a job
    step on it. Its nodes run on 127.0.0.1, or with `bed` (a started
    tools/testbed.py Testbed) node i in host i and slurmctld, srun and the
    other commands in host 0."""

    def __init__(self, bed=None):
        self.bed = bed
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

    def command(self, *argv, host=0):
        """argv with its program's full path, to run in `host` of the testbed if there is one."""
        full = [_tool(argv[0]), *argv[1:]]
        # nsenter changes the network namespace only: `ip netns exec` would
        # also mount the namespace's own /sys, without /sys/fs/cgroup, which
        # slurmd needs.
        return ["nsenter", f"--net=/run/netns/{self.bed.host_ns(host)}", *full] if self.bed else full

    def addr(self, host):
        return self.bed.addr(host) if self.bed else "127.0.0.1"

    def _start(self, name, *argv, host=None):
        """A daemon, in `host` of the testbed (None: this machine's namespace)."""
        log = open(self.path("log", name + ".out"), "w")
        try:
            argv = self.command(*argv, host=host) if host is not None else [_tool(argv[0]), *argv[1:]]
            proc = subprocess.Popen(argv, env=self.env, cwd=self.tmp,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            log.close()
        self.daemons.append((name, proc))

    def _logs(self):
        names = ["munged.log"] + [name + ".out" for name, _ in self.daemons] + \
                ["slurmctld.log"] + [f"slurmd-{n}.log" for n in NODES]
        return "\n".join(f"--- {n}:\n{tail(self.path('log', n), 15)}" for n in names
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
        nodes = "\n".join(f"NodeName={n} NodeHostname={host} NodeAddr={self.addr(i)} Port={free_port()} "
                          f"CPUs={cpus} State=UNKNOWN" for i, n in enumerate(NODES))
        if self.bed:
            # Inside a testbed host every address is that host's own.
            communication = "# Inside the testbed's hosts, binding to any address binds to the host's."
            prolog = self.path("task_prolog")
            with open(prolog, "w") as f:
                f.write(TASK_PROLOG)
            os.chmod(prolog, 0o755)
            task_prolog = f"TaskProlog={prolog}"
        else:
            communication = ("# Bind to this host's address, not to every address (slurmctld; slurmd, srun).\n"
                             "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny")
            task_prolog = ""
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF.format(host=host, ctld_addr=self.addr(0), ctld_port=free_port(), tmp=self.tmp,
                                      communication=communication, task_prolog=task_prolog, nodes=nodes,
                                      node_list=",".join(NODES)))
        on_bed = (lambda i: i) if self.bed else (lambda i: None)
        self._start("slurmctld", "slurmctld", "-D", "-c", host=on_bed(0))
        for i, n in enumerate(NODES):
            self._start(f"slurmd-{n}", "slurmd", "-D", "-N", n, host=on_bed(i))

        def nodes_idle():
            out = subprocess.run(self.command("sinfo", "--noheader", "--Node", "--format=%N %T"), env=self.env,
                                 capture_output=True, text=True, timeout=POLL_DEADLINE).stdout.split()
            return sorted(zip(out[::2], out[1::2])) == [(n, "idle") for n in NODES]

        return self._wait_until(nodes_idle, "the Slurm nodes", deadline)

    def srun(self, *args, ntasks, nodes=1, timeout=JOB_DEADLINE):
        """srun -N nodes -n ntasks ARGS with MASTER_ADDR/PORT exported, its
        output labelled with the task id: (returncode, stdout, stderr)."""
        master = f"MASTER_ADDR={self.addr(0)},MASTER_PORT={free_port()}"
        # --overcommit: more tasks than this machine has CPUs; --kill-on-bad-exit:
        # a rank that fails ends the step rather than leave the others waiting.
        cmd = self.command("srun", f"--nodes={nodes}", f"--ntasks={ntasks}", "--overcommit", "--kill-on-bad-exit=1",
                           "--label", "--time=2", f"--export=ALL,{master}", *args)
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
        subprocess.run(self.command("scancel", f"--user={self.user}"), env=self.env, capture_output=True,
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
    yield from running(Cluster(), "the private Slurm cluster")


@pytest.fixture(scope="module")
def slurm_on_testbed():
    """The cluster with its two nodes in two testbed hosts (network
    namespaces joined by a bridge, tools/testbed.py)."""
    reason = _unavailable() or namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    with testbed.Testbed(len(NODES)) as bed:
        yield from running(Cluster(bed), "the private Slurm cluster")


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


def _netns_inode(path):
    return os.stat(path).st_ino


def test_ranks_on_two_testbed_hosts_form_one_job_across_the_link(slurm_on_testbed):
    # srun in testbed host 0 starts 2 tasks on each node, and node i is
    # testbed host i: the tasks run in that host's network namespace, the
    # task prolog gives each node its host identity, and the job meets at
    # host 0's address over the bridge.
    cluster = slurm_on_testbed
    reports = run_python_job(cluster, 4, 2, "--ntasks-per-node=2", "--distribution=block")
    hosts = [0, 0, 1, 1]
    for rank, host in enumerate(hosts):
        report = reports[rank]
        assert report["launcher"]["SLURMD_NODENAME"] == NODES[host], report
        assert report["host_id"] == f"slurm-node-{NODES[host]}", report
        assert report["netns_inode"] == _netns_inode(f"/run/netns/{cluster.bed.host_ns(host)}"), report
        assert report["launch_environment"]["local_rank"] == rank % 2, report


def _sent(cluster, host):
    """Bytes host `host` of the testbed has sent on its link."""
    out = subprocess.run(["ip", "netns", "exec", cluster.bed.host_ns(host), "cat",
                          "/sys/class/net/eth0/statistics/tx_bytes"], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_bench_on_two_testbed_hosts_checks_every_collective_across_the_link(slurm_on_testbed):
    # tdist-bench, 2 nodes x 2 ranks: the collectives run hierarchically
    # (shared memory inside a node, the link between them), are checked,
    # and node 1 sends at least its half of a 1 MiB all_reduce on its link.
    _bench_available()
    cluster = slurm_on_testbed
    before = _sent(cluster, 1)
    ops = "all_reduce,broadcast,all_gather,reduce_scatter,all_to_all"
    code, out, err = cluster.srun("--ntasks-per-node=2", "--distribution=block", BENCH, "--timeout", "60", "--op",
                                  ops, "-b", "1", "-e", "1M", "-f", "32", "-n", "2", "-w", "1", "--check", "--json",
                                  ntasks=4, nodes=2)
    assert code == 0, f"srun exited with {code}\nstdout:\n{out}\nstderr:\n{err}"
    rows = [json.loads(text) for task, text in labelled(out)]
    assert {row["op"] for row in rows} == set(ops.split(",")), out
    for row in rows:
        assert row["world_size"] == 4 and row["errors"] == 0, row
    assert _sent(cluster, 1) - before > (1 << 20) // 2, "node 1's link carried less than half of 1 MiB"
