"""tools/testbed.py as a module for the tests that play several hosts
(test_testbed*.py, test_slurm.py), and whether this machine lets them; any
other tool of tools/ as a module too (load_tool). Also what the testbed's
test files share: tdistrun's command line on every host (agent), the
environment of a tdist job (tdist_env), a job that loops over all_reduce
until a fault (loop_then), a reader of a process's output (Lines), the
start and stop of a cluster around a fixture (running) and the end of a
log (tail) and whether the Ray test on two hosts can run
(ray_testbed_unavailable)."""

import importlib.util
import os
import shutil
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, os.pardir, os.pardir)
TOOLS = os.path.join(ROOT, "tools")
TOOL = os.path.join(TOOLS, "testbed.py")
BUILD = os.environ.get("TDIST_BUILD_DIR", os.path.join(ROOT, "build"))
TDISTRUN = os.path.join(BUILD, "bin", "tdistrun")


def load_tool(name):
    """tools/<name>.py (or tools/measure/<name>.py), imported as the module `name`."""
    path = os.path.join(TOOLS, name + ".py")
    if not os.path.exists(path):
        path = os.path.join(TOOLS, "measure", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


testbed = load_tool("testbed")


def namespaces_unavailable():
    """None if this process can make network namespaces, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces); run the tests as root to include it"
    probe = f"tb{os.getpid()}-h998"
    try:
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    except FileNotFoundError:
        return "iproute2 (ip, tc) is not installed"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None if made.returncode == 0 else f"cannot make network namespaces here: {made.stderr.strip()}"


def ray_testbed_unavailable():
    """None if test_ray_testbed.py can run its Ray nodes in two testbed
    hosts here, else why not. test_ray.py asks too: it runs the same cases
    on a local cluster only where test_ray_testbed.py cannot."""
    reason = namespaces_unavailable()
    if reason is None and importlib.util.find_spec("ray") is None:
        reason = "ray is not installed (python/requirements-dev.txt: ray[train])"
    if reason is None and shutil.which("setpriv") is None:
        reason = "setpriv (util-linux) is not installed"
    return reason


class Lines:
    """Collects a process's output lines on a thread, so a test can wait
    for a line without select() missing ones a buffered read took."""

    def __init__(self, stream):
        self.lines, self._cond = [], threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self.lines.append(None)  # end of output
            self._cond.notify_all()

    def wait_for(self, text, count, timeout):
        """True once `count` lines contain `text` (False at end of output or timeout)."""
        def seen():
            return sum(1 for line in self.lines if line is not None and text in line)
        with self._cond:
            self._cond.wait_for(lambda: seen() >= count or None in self.lines, timeout)
            return seen() >= count

    def text(self):
        with self._cond:
            return "".join(line for line in self.lines if line is not None)


def agent(hosts, per_host):
    """tdistrun's command line for every testbed host (the tool fills in
    {host} and {master}): `per_host` ranks on each of `hosts`."""
    return (f"{TDISTRUN} --nnodes {hosts} --node-rank {{host}} --master-addr {{master}} --master-port 29500 "
            f"--nproc-per-node {per_host}")


def tdist_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(BUILD, "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def loop_then(action, group_timeout):
    """Runs testbed_loop.py on 2 hosts x 2 ranks over 5 Gbit/s links, calls
    action(bed) once every rank is looping, and returns each host's output
    and exit code (failing the test if a host outlives the deadline)."""
    loop = os.path.join(HERE, "testbed_loop.py")
    bed = testbed.Testbed(2, rate=5e9 / 8)
    env = dict(tdist_env(), TESTBED_LOOP_TIMEOUT=str(group_timeout))
    with bed:
        procs = []
        for i in range(2):
            cmd = [TDISTRUN, "--nnodes", "2", "--node-rank", str(i), "--master-addr", bed.addr(0),
                   "--master-port", "29500", "--rdzv-conf", "read_timeout=10", "--nproc-per-node", "2",
                   sys.executable, loop]
            procs.append(bed.popen(i, cmd, env=bed.env_for(i, env), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True))
        outs = [Lines(p.stdout) for p in procs]
        for out in outs:
            assert out.wait_for("looping", 2, timeout=120), out.text()
        action(bed)
        for i, p in enumerate(procs):
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                testbed.kill_all(procs)
                pytest.fail(f"host {i} still runs 120 s after the fault (a hang):\n{outs[i].text()[-3000:]}")
        for out in outs:
            out.wait_for("\0", 1, timeout=10)  # the rest of the output
    return [(out.text(), p.returncode) for out, p in zip(outs, procs)]


def running(cluster, what):
    """Starts `cluster` (its start() returns what went wrong, or None),
    yields it and stops it. A cluster that does not come up fails the test:
    the fixture skipped already where the machine cannot run it, so a skip
    here would let a broken setup pass unnoticed."""
    try:
        problem = cluster.start()
        if problem:
            pytest.fail(f"{what} did not come up: {problem}")
        yield cluster
    finally:
        cluster.stop()


def tail(path, lines):
    """The last `lines` lines of the file at `path`, or why it cannot be read."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"({e})"
