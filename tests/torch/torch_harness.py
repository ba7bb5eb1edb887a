"""Runs one Python script as N rank processes on the loopback interface.

Every run has a deadline (the processes are killed when it passes) and its
ranks get the same command line plus their rank. The TCPStore port is picked
free just before the run, outside the range the kernel takes the ports of
outgoing connections from; if another process grabbed it meanwhile all the
same, the run is retried once with a new port.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

import torch_forks
from tdist._spawn import free_port  # below the ephemeral range; see its comment

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable  # the interpreter the plugin is built for (TDIST_PYTHON_EXECUTABLE), which runs pytest
DEADLINE_S = 150


class RankResult:
    def __init__(self, rank, returncode, stdout, stderr):
        self.rank, self.returncode, self.stdout, self.stderr = rank, returncode, stdout, stderr

    def lines(self, prefix=""):
        return [l for l in self.stdout.splitlines() if l.startswith(prefix)]


def _env(rank, world_size, port, extra):
    env = dict(os.environ)
    env.update({
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        "GLOO_SOCKET_IFNAME": "lo",  # gloo comparison runs stay on loopback
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONFAULTHANDLER": "1",
    })
    env.pop("TDIST_SOCKET_IFNAME", None)
    env.update(extra or {})
    return env


def _says_address_in_use(text):
    return "Address already in use" in text or "EADDRINUSE" in text


def _address_in_use(results):
    # The spec runner reports a program's error in its JSON output, on
    # stdout (and exits 1).
    return any(_says_address_in_use(r.stderr) or _says_address_in_use(r.stdout) for r in results)


def _port_taken(output):
    """Whether a rank's output files (stdout, stderr) say its store's port
    was in use; they are left positioned at their ends."""
    taken = False
    for f in output:
        f.seek(0)
        taken = _says_address_in_use(f.read()) or taken
    return taken


def run_ranks(script, world_size, args=(), extra_env=None, deadline_s=DEADLINE_S, ports=1):
    """Runs HERE/script as `world_size` processes; returns RankResult per rank.

    `args` may contain "{port}" / "{ports}" / "{rank}" / "{tmp}" placeholders.
    """
    for attempt in range(2):
        port_list = [free_port() for _ in range(ports)]
        with tempfile.TemporaryDirectory(prefix="tdist-torch-") as tmp:
            results = _run_once(script, world_size, args, extra_env, deadline_s, port_list, tmp)
        if attempt == 0 and any(r.returncode != 0 for r in results) and _address_in_use(results):
            continue
        return results
    return results


def _run_once(script, world_size, args, extra_env, deadline_s, port_list, tmp):
    # Each rank writes into files, not pipes: a rank whose output outgrew a
    # pipe (64 KiB) would block on it while this process read another
    # rank's, and ranks that wait for each other (a collective, the plugin's
    # leave at exit) would then wait out their timeouts.
    # (Named files, outside the ranks' working directory: a rank forked by
    # torch_forks.py opens them by name.)
    procs, outputs = [], []
    for rank in range(world_size):
        subst = {"port": port_list[0], "ports": ",".join(map(str, port_list)), "rank": rank, "tmp": tmp}
        argv = [PYTHON, os.path.join(HERE, script)] + [str(a).format(**subst) for a in args]
        out, err = (tempfile.NamedTemporaryFile("w+", prefix="tdist-rank%d-" % rank, suffix=suffix)
                    for suffix in (".out", ".err"))
        outputs.append((out, err))
        procs.append(torch_forks.start(argv, _env(rank, world_size, port_list[0], extra_env), tmp, out, err))
    deadline = time.monotonic() + deadline_s
    killed = set()
    for rank, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            if rank == 0 and proc.returncode != 0 and _port_taken(outputs[0]):
                # Rank 0's store could not listen: the others would wait for
                # it until the deadline. Stop them; run_ranks runs again.
                for p in procs[1:]:
                    p.kill()
                    p.wait()
                break
        except subprocess.TimeoutExpired:
            # SIGABRT first: faulthandler (PYTHONFAULTHANDLER) prints every
            # thread's Python stack, which says where a rank hung.
            for r, p in enumerate(procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGABRT)
                    killed.add(r)
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            break
    results = []
    for rank, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        out.close()
        err.close()
        if rank in killed:
            stderr += "\n[harness] rank %d killed after the %d s deadline" % (rank, deadline_s)
            results.append(RankResult(rank, -9, stdout, stderr))
        else:
            results.append(RankResult(rank, proc.returncode, stdout, stderr))
    return results


def check_all_ok(results):
    """Asserts that every rank exited 0, showing each failing rank's output."""
    failed = [r for r in results if r.returncode != 0]
    if failed:
        report = []
        for r in failed:
            report.append("---- rank %d exited %d ----\nstdout:\n%s\nstderr:\n%s"
                          % (r.rank, r.returncode, r.stdout[-4000:], r.stderr[-6000:]))
        raise AssertionError("\n".join(report))


def passed_checks(results):
    """The check names every rank reported as passed (torch_worker.py PASS lines)."""
    per_rank = [set(l.split()[1] for l in r.lines("PASS ")) for r in results]
    return set.intersection(*per_rank) if per_rank else set()


def suite_checks(suite):
    """The names torch_worker.py reports for the check_* functions of `suite` (a module)."""
    return {suite.__name__ + "." + n for n in vars(suite) if n.startswith("check_")}


def check_suite_passed(results, suite, suites, last):
    """Asserts that every check of `suite` passed on every rank of a job
    (torch_worker.py) that ran `suites` (module names, in order) one after
    the other in the same processes. A failure elsewhere in the job fails
    only the suites it kept from passing: each test reports its own
    checks, naming the ones that did not pass and showing the failing
    ranks' output (with the check that failed). The job's `last`
    suite also answers for the job's end: every rank must exit 0."""
    expected = suite_checks(suite)
    passed = passed_checks(results) & expected
    if passed == expected and (not last or all(r.returncode == 0 for r in results)):
        return
    reported = sorted(set(l for r in results for l in r.lines("FAIL ")))
    header = ("%s: not passed on every rank: %s\n(one job ran %s in this order; failures reported: %s)"
              % (suite.__name__, sorted(expected - passed) or "none, but the job did not end cleanly",
                 ", ".join(suites), reported or "none"))
    try:
        check_all_ok(results)
    except AssertionError as e:
        raise AssertionError(header + "\n" + str(e)) from None
    raise AssertionError(header)


if __name__ == "__main__":  # pragma: no cover - manual use: torch_harness.py script world_size args...
    res = run_ranks(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
    for r in res:
        print("rank", r.rank, "rc", r.returncode)
        print(r.stdout)
        print(r.stderr, file=sys.stderr)
