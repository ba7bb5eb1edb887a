"""tdist on a Ray cluster of two testbed hosts (tools/testbed.py: two
network namespaces joined by a bridge): the Ray head node in host 0, a
worker node in host 1, each bound to its host's address, and the driver
(ray_testbed_driver.py) in host 0. The cases are test_ray.py's, from
ray_cases.py: a group of 4 actors, 2 in each host, made by
tdist.ray.init_group (api "tdist" and "torch"), then one of them killed
and named by init_group at once; TorchTrainer on backend "tdist" with a
worker killed mid-job, named by the survivors, and the job restarted by
Ray and run to the end. Where this file can run, test_ray.py skips: one
run of each case per suite is enough (the TorchTrainer case alone costs a
minute of CPU). Every case checks where its ranks ran (each host's
namespace, two each), and the actors' all_reduce is shown to cross the
link by host 0's interface counters.

Needs root (network namespaces) and ray; skipped elsewhere, saying so."""

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from harness import full_suite_only
from testbed_tool import HERE, Lines, ray_testbed_unavailable, running, tail, testbed

DRIVER = os.path.join(HERE, "ray_testbed_driver.py")
PORT = 6379  # the head's GCS port: free in a fresh namespace
START_DEADLINE = 30  # seconds for a node's `ray start` to say it runs (2-3 s here)
STOP_DEADLINE = 10  # seconds to kill everything left in the hosts
# Seconds for a case's driver: connecting, the actors' or workers' start
# (torch's import), the case itself and, with a kill, Ray's restart. About
# three times what each took in runs of the whole suite on 2 cores (actors
# 6-8 s, torch 11-16 s, trainer 73-83 s); all of them and the start fit in
# the ctest entry's 420 s.
CASE_DEADLINE = {"actors": 45, "torch": 45, "trainer": 240}


class RayHosts:
    """A Ray node in each host of `bed`: the head in host 0 (with the GCS at
    PORT), a worker node in host 1. Each is given its host's address
    (--node-ip-address), keeps its files in a temporary directory of its
    own and has 2 CPUs."""

    def __init__(self, bed):
        self.bed = bed
        self.tmp = tempfile.mkdtemp(prefix="tdist_ray_")  # short: Ray's socket paths live under it
        self.nodes = []  # (`ray start --block` process, its output lines)
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # a caller's Ray settings
        # No usage statistics (and no attempt to send them anywhere).
        base.update(RAY_USAGE_STATS_ENABLED="0", TDIST_AUTH_TOKEN="ray-testbed-token")
        # Each host's TDIST_HOST_ID (env_for) reaches the workers, which
        # inherit the raylet's environment: tdist shares memory only within
        # a host, so the ranks of different hosts talk over the link.
        self.envs = [bed.env_for(i, base) for i in range(2)]

    def popen(self, i, args, **kwargs):
        """`args` in host i. It gets SIGKILL if this process dies without
        cleaning up (say, killed at ctest's deadline): a `ray start --block`
        then has its reaper stop the node's GCS and raylet, whose workers
        exit after them."""
        return self.bed.popen(i, ["setpriv", "--pdeathsig", "KILL", *args], stdin=subprocess.DEVNULL, **kwargs)

    def node_dir(self, i):
        return os.path.join(self.tmp, f"node{i}")

    def start(self):
        """Starts both nodes; None once each says it runs, else why not."""
        for i in range(2):
            args = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
                    f"--node-ip-address={self.bed.addr(i)}", f"--temp-dir={self.node_dir(i)}", "--num-cpus=2",
                    "--object-store-memory=100000000"]  # of /dev/shm; Ray's minimum is 75 MiB
            if i == 0:
                args += ["--head", f"--port={PORT}", "--include-dashboard=false"]
            else:
                args += [f"--address={self.bed.addr(0)}:{PORT}"]
            proc = self.popen(i, args, env=self.envs[i], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.nodes.append((proc, Lines(proc.stdout)))
            if not self.nodes[-1][1].wait_for("Ray runtime started", 1, START_DEADLINE):
                return f"the Ray node in host {i} did not start within {START_DEADLINE} s\n{self.logs()}"
        return None

    def logs(self):
        parts = []
        for i, (_, lines) in enumerate(self.nodes):
            parts.append(f"--- ray start in host {i}:\n{lines.text()[-3000:]}")
            for name in ("raylet.out", "gcs_server.out"):
                path = os.path.join(self.node_dir(i), "session_latest", "logs", name)
                if os.path.exists(path):
                    parts.append(f"--- host {i} {name}:\n{tail(path, 20)}")
        return "\n".join(parts)

    def stop(self):
        """Kills every process in both hosts (the nodes, their workers and
        any driver), until a look finds none: a process killed while it
        forked may leave a child the previous look did not see."""
        deadline = time.monotonic() + STOP_DEADLINE
        while any([self.bed.kill_host(i) for i in range(2)]) and time.monotonic() < deadline:
            pass
        testbed.kill_all([proc for proc, _ in self.nodes])  # reaps them
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run(self, case, directory):
        """Runs `case` of the driver in host 0: its result (the RESULT line's JSON)."""
        env = {**self.envs[0], "RAY_ADDRESS": f"{self.bed.addr(0)}:{PORT}"}
        proc = self.popen(0, [sys.executable, DRIVER, case, str(directory)], env=env, cwd=HERE,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=CASE_DEADLINE[case])
        except subprocess.TimeoutExpired:
            testbed.kill_all([proc])
            out, _ = proc.communicate()
            pytest.fail(f"the driver's case {case} did not end within {CASE_DEADLINE[case]} s:\n{out[-6000:]}\n"
                        f"{self.logs()}")
        results = [line for line in out.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not results:
            pytest.fail(f"the driver's case {case} exited with {proc.returncode}:\n{out[-6000:]}\n{self.logs()}")
        return json.loads(results[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def hosts():
    reason = ray_testbed_unavailable()
    if reason:
        pytest.skip(reason)
    with testbed.Testbed(2) as bed:
        yield from running(RayHosts(bed), "the Ray cluster on the testbed")


def check_places(bed, places):
    """Two ranks ran in each host: its namespace, its node's address, its host identity."""
    def host(i):
        return {"ip": bed.addr(i), "netns": os.stat(f"/run/netns/{bed.host_ns(i)}").st_ino,
                "host_id": bed.env_for(i)["TDIST_HOST_ID"]}
    seen = collections.Counter(json.dumps({k: p[k] for k in ("ip", "netns", "host_id")}, sort_keys=True)
                               for p in places)
    assert seen == {json.dumps(host(i), sort_keys=True): 2 for i in range(2)}, places


def test_actors_on_two_hosts_form_a_group_across_the_link(hosts, tmp_path):
    # The driver also kills one of the actors once they have left the
    # group, and init_group names it (ray_cases.check_a_dead_actor_is_named).
    result = hosts.run("actors", tmp_path)
    check_places(hosts.bed, result["places"])
    # Each host must receive the other's partial sums of the whole array:
    # had tdist taken the other host for its own (shared memory), a few KB
    # of Ray's messages would be all the link carried.
    link = result["link"]
    assert link["rx"] >= result["bytes"] and link["tx"] >= result["bytes"], link


def test_actors_with_torch_distributed_on_two_hosts(hosts, tmp_path):
    check_places(hosts.bed, hosts.run("torch", tmp_path)["places"])


@full_suite_only("a minute of CPU")
def test_torch_trainer_names_a_killed_worker_and_ray_restarts_it_on_two_hosts(hosts, tmp_path):
    check_places(hosts.bed, hosts.run("trainer", tmp_path)["places"].values())
