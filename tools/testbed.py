#!/usr/bin/env python3
"""Plays several hosts on one machine: each host is a network namespace with
its own address, joined to the others through a bridge that lives in a
namespace of its own, so nothing is added to the machine's own network.
Runs a command in every host, then tears everything down -- on success, on
failure and on Ctrl-C. Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and
iproute2. docs/testbed.md has the details.

    tools/testbed.py --hosts 2 --rate 5gbit -- \\
        build/bin/tdistrun --nnodes 2 --node-rank {host} --master-addr {master} \\
                           --master-port 29500 --nproc-per-node 2 prog.py

In each host's command, {host}, {hosts}, {addr} (this host's first
address), {master} (host 0's first address) and {ifname} are replaced; the
environment has TDIST_HOST_ID, TESTBED_HOST, TESTBED_HOSTS, TESTBED_ADDR,
TESTBED_ADDRS (every address of this host, comma-separated), TESTBED_MASTER,
TESTBED_MASTER_ADDRS (host 0's, one per NIC) and TESTBED_IFNAMES. Exit status: the first failing host's, 124 on timeout,
130 on Ctrl-C, 0 if every host succeeded.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

# Names of this tool's namespaces: tb<pid>-sw (the switch) and tb<pid>-h<i>.
_NAME = re.compile(r"^tb(\d+)-(sw|h\d+)$")


class TestbedError(RuntimeError):
    """The testbed could not be built (no permission, no iproute2, ...)."""


def _run(*args, check=True):
    result = subprocess.run(list(args), capture_output=True, text=True)
    if check and result.returncode != 0:
        raise TestbedError(f"{' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def namespaces():
    """The network namespaces that exist now (names)."""
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale():
    """Deletes namespaces left by testbeds whose process is gone (a kill -9)."""
    removed = []
    for name in namespaces():
        match = _NAME.match(name)
        if match and not _alive(int(match.group(1))):
            _run("ip", "netns", "del", name, check=False)
            removed.append(name)
    return removed


def parse_rate(text):
    """Bytes per second of a tc rate such as 5gbit, 100mbit, 1.5gbit."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(f"rate {text!r}: expected a number followed by kbit, mbit or gbit")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2)]
    return float(match.group(1)) * scale / 8


def has_netem():
    """True if this kernel can add delay (sch_netem); checked in a scratch namespace."""
    probe = f"tb{os.getpid()}-h999"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "-n", probe, "link", "set", "lo", "up")
        return _run("tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
                    check=False).returncode == 0
    finally:
        _run("ip", "netns", "del", probe, check=False)


def ifnames(nics):
    """The interfaces of a host with `nics` NICs, comma-separated: "eth0,eth1"."""
    return ",".join(f"eth{k}" for k in range(nics))


class Testbed:
    """H hosts (namespaces), each with `nics` interfaces eth0.. joined by one
    bridge per interface index; IPv4 10.(77+k).0.(i+1)/24, or with ipv6
    fd00:77:k::(i+1)/64 only. `rate` (bytes/s) shapes both ends of every link
    with tbf; `delay_ms` adds netem delay where the kernel has it."""

    def __init__(self, hosts, nics=1, ipv6=False, rate=None, burst=None, delay_ms=None):
        if hosts < 1 or hosts > 250:
            raise TestbedError(f"--hosts {hosts}: between 1 and 250")
        if nics < 1 or nics > 8:
            raise TestbedError(f"--nics {nics}: between 1 and 8")
        self.hosts, self.nics, self.ipv6 = hosts, nics, ipv6
        self.rate, self.burst, self.delay_ms = rate, burst, delay_ms
        self.prefix = f"tb{os.getpid()}"
        self.switch = f"{self.prefix}-sw"
        self.created = []
        self.started = []  # processes popen() started, killed by down() with their groups

    def host_ns(self, i):
        return f"{self.prefix}-h{i}"

    def addr(self, i, k=0):
        return f"fd00:77:{k}::{i + 1}" if self.ipv6 else f"10.{77 + k}.0.{i + 1}"

    def addrs(self, i):
        return [self.addr(i, k) for k in range(self.nics)]

    def ifnames(self):
        """Every host's interfaces, comma-separated: "eth0,eth1"."""
        return ifnames(self.nics)

    def _ns(self, name):
        _run("ip", "netns", "add", name)
        self.created.append(name)
        _run("ip", "-n", name, "link", "set", "lo", "up")

    def _shape(self, ns, dev):
        if self.rate:
            # tbf drops any packet larger than its bucket: leave room for
            # 64 KiB GSO packets (veth hands those over whole).
            burst = int(self.burst or max(256 * 1024, self.rate * 0.004))
            _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate",
                 f"{int(self.rate * 8)}bit", "burst", str(burst), "latency", "50ms")
        if self.delay_ms:
            parent = ["parent", "1:1"] if self.rate else ["root"]
            _run("tc", "-n", ns, "qdisc", "add", "dev", dev, *parent, "netem", "delay", f"{self.delay_ms}ms")

    def up(self):
        if self.delay_ms and not has_netem():
            raise TestbedError("--delay: this kernel has no netem (sch_netem), so links cannot be delayed; "
                               "run without --delay")
        try:
            self._ns(self.switch)
            for k in range(self.nics):
                _run("ip", "-n", self.switch, "link", "add", f"br{k}", "type", "bridge")
                _run("ip", "-n", self.switch, "link", "set", f"br{k}", "up")
            for i in range(self.hosts):
                ns = self.host_ns(i)
                self._ns(ns)
                if self.ipv6:  # IPv6-only hosts: no IPv4 beyond loopback
                    _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0")
                for k in range(self.nics):
                    peer = f"h{i}e{k}"
                    _run("ip", "-n", ns, "link", "add", f"eth{k}", "type", "veth", "peer", "name", peer, "netns",
                         self.switch)
                    _run("ip", "-n", self.switch, "link", "set", peer, "master", f"br{k}", "up")
                    # IPv6 without duplicate-address detection: usable at once.
                    address = f"{self.addr(i, k)}/64" if self.ipv6 else f"{self.addr(i, k)}/24"
                    _run("ip", "-n", ns, "addr", "add", address, "dev", f"eth{k}", *(["nodad"] if self.ipv6 else []))
                    _run("ip", "-n", ns, "link", "set", f"eth{k}", "up")
                    self._shape(ns, f"eth{k}")
                    self._shape(self.switch, peer)
        except BaseException:
            self.down()
            raise
        return self

    def down(self):
        """Kills whatever still runs in the hosts, then deletes every namespace
        this testbed made (their links go with them)."""
        # A process popen() just started may not have entered its host yet
        # (ip netns exec joins the namespace, then execs): the namespace's
        # list of processes would miss it, so its own group is killed too.
        kill_all(self.started)
        self.started = []
        for i in range(self.hosts):
            if self.host_ns(i) in self.created:
                self.kill_host(i)
        for name in reversed(self.created):
            _run("ip", "netns", "del", name, check=False)
        self.created = []

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    def command_for(self, i, template):
        values = {"host": str(i), "hosts": str(self.hosts), "addr": self.addr(i), "master": self.addr(0),
                  "ifname": self.ifnames()}
        return [arg.format(**values) if "{" in arg else arg for arg in template]

    def env_for(self, i, base=None):
        env = dict(os.environ if base is None else base)
        env.update(TDIST_HOST_ID=f"testbed-{self.prefix}-host{i}", TESTBED_HOST=str(i),
                   TESTBED_HOSTS=str(self.hosts), TESTBED_ADDR=self.addr(i), TESTBED_ADDRS=",".join(self.addrs(i)),
                   TESTBED_MASTER=self.addr(0), TESTBED_MASTER_ADDRS=",".join(self.addrs(0)),
                   TESTBED_IFNAMES=self.ifnames())
        return env

    def kill_host(self, i):
        """SIGKILLs every process in host i (a whole host lost at once)."""
        pids = _run("ip", "netns", "pids", self.host_ns(i), check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        return [int(p) for p in pids]

    def link_down(self, i, k=0):
        """Takes host i's interface eth<k> down (a cut cable)."""
        _run("ip", "-n", self.host_ns(i), "link", "set", f"eth{k}", "down")

    def popen(self, i, args, **kwargs):
        """A process running `args` in host i (its own process group, so it can be killed whole)."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.host_ns(i), *args], start_new_session=True, **kwargs)
        self.started.append(proc)
        return proc


def _pump(stream, label, out):
    for line in iter(stream.readline, b""):
        out.write(f"[host {label}] ".encode() + line)
        out.flush()


def kill_all(procs):
    """SIGKILLs each process's whole group (as popen made them) and reaps them."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def run_everywhere(bed, template, timeout, out=None, env=None):
    """Runs the command in every host at once, its output lines prefixed
    "[host i] " on `out` (stdout's bytes by default), with the variables of
    `env` added to each host's; the exit status as the module doc says."""
    out = out or sys.stdout.buffer
    procs, pumps = [], []
    for i in range(bed.hosts):
        p = bed.popen(i, bed.command_for(i, template), env={**bed.env_for(i), **(env or {})},
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(p)
        pumps.append(threading.Thread(target=_pump, args=(p.stdout, i, out), daemon=True))
        pumps[-1].start()
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        kill_all(procs)
        sys.stderr.write(f"testbed: timed out after {timeout} s; killed every host's command\n")
        return 124
    except KeyboardInterrupt:
        kill_all(procs)
        return 130
    finally:
        for t in pumps:
            t.join(timeout=5)
    codes = [p.returncode for p in procs]
    for i, code in enumerate(codes):
        if code != 0:
            sys.stderr.write(f"testbed: host {i} exited with {code}\n")
            return code if code > 0 else 128 - code
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [options] -- command [args...]")
    parser.add_argument("--hosts", type=int, default=2, help="number of hosts (namespaces)")
    parser.add_argument("--nics", type=int, default=1, help="interfaces per host, each on its own bridge")
    parser.add_argument("--ipv6", action="store_true", help="IPv6-only addresses (fd00:77:k::i+1)")
    parser.add_argument("--rate", type=parse_rate, help="shape every link to this rate (tbf), e.g. 5gbit")
    parser.add_argument("--burst", type=int, help="tbf bucket in bytes (default: 4 ms at the rate, >= 256 KiB)")
    parser.add_argument("--delay", type=float, help="add this many ms of delay (needs netem in the kernel)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before every command is killed")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="run in every host (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give one after --")
    stale = remove_stale()
    if stale:
        sys.stderr.write(f"testbed: removed namespaces of testbeds that died: {' '.join(stale)}\n")
    bed = Testbed(args.hosts, args.nics, args.ipv6, args.rate, args.burst, args.delay)
    # SIGTERM and SIGHUP tear down like Ctrl-C.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    try:
        with bed:
            return run_everywhere(bed, command, args.timeout)
    except TestbedError as e:
        sys.stderr.write(f"testbed: {e}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
