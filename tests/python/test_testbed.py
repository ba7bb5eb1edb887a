"""tools/testbed.py: hosts played by network namespaces (docs/testbed.md).
Needs root and iproute2; skipped elsewhere, saying so. Checks that hosts
reach each other (IPv4, IPv6-only, two NICs), that shaping is installed,
that nothing survives a run (success, failure, Ctrl-C, a killed testbed),
and runs tdist jobs across hosts: every collective and point to point at
2 hosts x 2 ranks, 3 x 3 and 3 hosts with 1, 2 and 3 ranks over shaped links,
two NICs sharing a hierarchical all_reduce and 64 ranks on 8 hosts. A host
killed and a link cut mid all_reduce: test_testbed_host_killed.py and
test_testbed_link_cut.py (ctest entries of their own)."""

import json
import os
import signal
import subprocess
import sys

import pytest

from harness import full_suite_only
from testbed_tool import (BUILD, ROOT, TDISTRUN, TOOL, Lines, agent, load_tool, namespaces_unavailable, tdist_env,
                          testbed)

HERE = os.path.dirname(os.path.abspath(__file__))

REASON = namespaces_unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def ours(pid):
    return [n for n in testbed.namespaces() if n.startswith(f"tb{pid}-")]


def run_tool(*args, timeout=120):
    """Runs tools/testbed.py to its end; the result also holds the tool's
    pid, which names its namespaces (tb<pid>-...)."""
    proc = subprocess.Popen([sys.executable, TOOL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    result.pid = proc.pid
    return result


def orphaned():
    """Namespaces of testbeds whose process is gone (none should be left
    but by a killed testbed). Testbeds of other tests running beside this
    one (their ctest entries, python_slurm) are alive and not counted."""
    names = [(n, testbed._NAME.match(n)) for n in testbed.namespaces()]
    return [n for n, m in names if m and not testbed._alive(int(m.group(1)))]


def root_links():
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("\n")


# Host 0 listens on each of its addresses; every other host connects to it
# over each NIC (retrying until host 0 listens) and prints the reply, which
# names the address host 0 saw the client come from.
PING = """
import os, socket, time
n, me = int(os.environ["TESTBED_HOSTS"]), int(os.environ["TESTBED_HOST"])
masters = os.environ["TESTBED_MASTER_ADDRS"].split(",")
family = socket.AF_INET6 if ":" in masters[0] else socket.AF_INET
if me == 0:
    servers = []
    for address in masters:
        s = socket.socket(family)
        s.bind((address, 7000))
        s.listen()
        servers.append(s)
    for s in servers:
        for _ in range(n - 1):
            c, peer = s.accept()
            c.sendall(b"hi " + peer[0].encode())
            c.close()
else:
    for target in masters:
        for attempt in range(600):
            try:
                c = socket.create_connection((target, 7000), timeout=5)
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        print(c.recv(100).decode(), "via", target, flush=True)
"""


@pytest.mark.parametrize("options", [[], ["--ipv6"], ["--nics", "2"], ["--ipv6", "--nics", "2"]],
                         ids=["ipv4", "ipv6", "two-nics", "ipv6-two-nics"])
def test_hosts_reach_each_other_on_every_nic(options):
    before = root_links()
    result = run_tool("--hosts", "3", *options, "--", sys.executable, "-c", PING)
    assert result.returncode == 0, result.stdout + result.stderr
    nics = 2 if "--nics" in options else 1
    replies = [line for line in result.stdout.splitlines() if "hi " in line]
    assert len(replies) == 2 * nics, result.stdout
    for line in replies:  # the server saw the client's own address on that NIC
        assert ("fd00:77:" in line) == ("--ipv6" in options), line
    assert root_links() == before  # nothing was added to this machine's own network


def test_links_are_shaped_on_both_ends():
    result = run_tool("--hosts", "2", "--rate", "250mbit", "--", "sh", "-c",
                      "tc qdisc show dev eth0; ip -br -4 addr show dev eth0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("tbf") == 2 and "rate 250Mbit" in result.stdout, result.stdout


def test_ipv6_hosts_have_no_ipv4_address_besides_loopback():
    result = run_tool("--hosts", "2", "--ipv6", "--", "ip", "-o", "-4", "addr")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "inet " in line]
    assert lines and all(" lo " in line for line in lines), result.stdout


def test_delay_is_refused_clearly_without_netem():
    if testbed.has_netem():
        pytest.skip("this kernel has netem; the refusal cannot be seen")
    result = run_tool("--hosts", "2", "--delay", "5", "--", "true")
    assert result.returncode == 2 and "no netem" in result.stderr, result.stderr


def test_processes_left_in_a_host_are_killed_at_teardown():
    with testbed.Testbed(1) as bed:
        left = bed.popen(0, ["sleep", "300"])
    assert left.wait(timeout=30) == -signal.SIGKILL


def test_nothing_survives_success_failure_or_ctrl_c():
    # Other testbeds may run meanwhile (other ctest entries): what is
    # checked is that nothing of these runs is left, and no namespace of a
    # testbed that has ended.
    ok = run_tool("--hosts", "2", "--", "true")
    assert ok.returncode == 0 and ours(ok.pid) == [] and orphaned() == [], (ok.stderr, testbed.namespaces())
    failed = run_tool("--hosts", "3", "--", "sh", "-c", "test {host} != 1 || exit 3")
    assert failed.returncode == 3 and "host 1 exited with 3" in failed.stderr, failed.stderr
    assert ours(failed.pid) == [] and orphaned() == [], testbed.namespaces()
    # Ctrl-C while the hosts run: wait (on a condition, not a clock) until
    # the namespaces exist and the command has started, then interrupt.
    # SIGINT's default action restored in the tool: a shell that started
    # pytest in the background (`pytest &`) had it ignored, and an ignored
    # SIGINT is inherited, so the tool would never see the Ctrl-C.
    proc = subprocess.Popen([sys.executable, TOOL, "--hosts", "2", "--", "sh", "-c", "echo up; exec sleep 60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out = Lines(proc.stdout)
    assert out.wait_for("up", 2, timeout=60), out.text()
    assert len(ours(proc.pid)) == 3
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert ours(proc.pid) == [] and orphaned() == [], testbed.namespaces()


def test_a_killed_testbeds_namespaces_are_removed_by_the_next_run():
    proc = subprocess.Popen([sys.executable, TOOL, "--hosts", "2", "--", "sh", "-c", "echo up; exec sleep 60"],
                            stdout=subprocess.PIPE, text=True)
    assert "up" in proc.stdout.readline()
    proc.kill()  # no chance to tear down
    proc.wait()
    assert len(ours(proc.pid)) == 3
    result = run_tool("--hosts", "1", "--", "true")
    assert result.returncode == 0 and "removed namespaces of testbeds that died" in result.stderr
    assert ours(proc.pid) == []


@pytest.mark.skipif(not os.path.exists(TDISTRUN), reason="tdistrun is not built")
@pytest.mark.parametrize("hosts,ranks,options", [(2, "2", []), (3, "3", []), (3, "$((TESTBED_HOST + 1))", []),
                                                 (2, "2", ["--ipv6", "--nics", "2"])],
                         ids=["2x2", "3x3", "3-hosts-1-2-3", "2x2-ipv6-only-two-nics"])
def test_every_collective_across_shaped_hosts(hosts, ranks, options):
    # IPv6-only: the launcher's and the group's stores, the rendezvous and
    # the transport all run on fd00:77:... addresses (no IPv4 but loopback),
    # with both NICs listed.
    job = os.path.join(HERE, "testbed_job.py")
    line = f"TDIST_SOCKET_IFNAME=$TESTBED_IFNAMES exec {agent(hosts, ranks)} {sys.executable} {job}"
    result = subprocess.run([sys.executable, TOOL, "--hosts", str(hosts), "--rate", "5gbit", "--timeout", "200",
                             *options, "--", "sh", "-c", line], capture_output=True, text=True, timeout=240,
                            env=tdist_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    world = {"2": 2 * hosts, "3": 9}.get(ranks, 6)  # 1 + 2 + 3 ranks on the uneven hosts
    oks = sorted(int(line.split()[-3]) for line in result.stdout.splitlines() if " ok " in line + " ")
    assert oks == list(range(world)), result.stdout[-3000:]


@pytest.mark.skipif(not os.path.exists(TDISTRUN), reason="tdistrun is not built")
def test_two_listed_nics_each_carry_half_of_a_hierarchical_all_reduce():
    # 2 hosts x 2 ranks, two NICs each, both listed: every host's two
    # interfaces must each send between 40% and 60% of what it sent (the
    # hierarchy's messages across hosts are striped over connections to
    # both), and the results are checked.
    bench = os.path.join(BUILD, "bin", "tdist-bench")
    line = (f"TDIST_SOCKET_IFNAME=eth0,eth1 {agent(2, 2)} {bench} --op all_reduce -b 16M -e 16M -n 4 -w 1 --check "
            "&& echo sent $(cat /sys/class/net/eth0/statistics/tx_bytes) $(cat /sys/class/net/eth1/statistics/tx_bytes)")
    result = subprocess.run([sys.executable, TOOL, "--hosts", "2", "--nics", "2", "--rate", "5gbit", "--timeout",
                             "200", "--", "sh", "-c", line], capture_output=True, text=True, timeout=240,
                            env=tdist_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "# wrong elements in total: 0" in result.stdout
    sent = [[int(x) for x in line.split("sent ")[1].split()] for line in result.stdout.splitlines() if "sent " in line]
    assert len(sent) == 2, result.stdout[-3000:]
    for eth0, eth1 in sent:
        assert eth0 + eth1 > 2 * 16 << 20 and 0.4 < eth1 / (eth0 + eth1) < 0.6, sent


@pytest.mark.skipif(not os.path.exists(TDISTRUN), reason="tdistrun is not built")
@full_suite_only("37 CPU-seconds")
def test_64_ranks_on_8_hosts_pass_the_checks_and_meet():
    bench = os.path.join(BUILD, "bin", "tdist-bench")
    agents = agent(8, 8).split()
    # Every collective and send/recv at sizes that give each of the 64
    # ranks at least one element, each result checked; then 20 timed
    # iterations of each, barrier included.
    checked = subprocess.run([sys.executable, TOOL, "--hosts", "8", "--timeout", "400", "--", *agents, bench,
                              "--op", "all", "-b", "256", "-e", "4K", "-f", "4", "-n", "20", "-w", "1", "--check",
                              "--timeout", "300"], capture_output=True, text=True, timeout=450, env=tdist_env())
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    assert "# wrong elements in total: 0" in checked.stdout
    assert "world size 64" in checked.stdout
    # The launcher's rendezvous and the ranks' init, timed, then a barrier loop.
    met = subprocess.run([sys.executable, TOOL, "--hosts", "8", "--timeout", "400", "--", *agents, sys.executable,
                          os.path.join(HERE, "testbed_rendezvous.py"), "200"],
                         capture_output=True, text=True, timeout=450, env=tdist_env())
    assert met.returncode == 0, met.stdout[-3000:] + met.stderr[-3000:]
    line = next(line for line in met.stdout.splitlines() if "rendezvous " in line)
    seconds, world = line.split("rendezvous ")[1].split()
    assert world == "64"
    print(f"64 ranks on 8 hosts: init_process_group spread {seconds} s")


def test_the_multihost_comparison_runs_and_knows_each_ops_link_limit(tmp_path):
    compare = load_tool("multihost_compare")
    # Bytes each host must send at least: 2 hosts, 16 units, 2 ranks per host.
    assert compare.host_bytes("all_reduce", 16, 2, 2) == 16  # half out, half back in
    assert compare.host_bytes("all_reduce", 16, 4, 2) == 24  # 2 (H-1)/H
    assert compare.host_bytes("broadcast", 16, 3, 2) == 16
    assert compare.host_bytes("all_gather", 16, 2, 2) == 8
    assert compare.host_bytes("reduce_scatter", 16, 4, 1) == 12
    assert compare.host_bytes("all_to_all", 16, 2, 4) == 32  # 4 ranks, half of each one's input
    runs = [[{"bytes": 8, "time_us": 5.0}], [{"bytes": 8, "time_us": 1.0}, {"bytes": 9}], [{"bytes": 8, "time_us": 3.0}]]
    assert compare.median_time(runs, 8) == 3.0 and compare.median_time(runs, 9) is None
    assert compare.median_time(runs[:2], 8) == 1.0  # the lower middle of an even count
    if not os.path.exists(TDISTRUN):
        pytest.skip("tdistrun is not built")
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "measure", "multihost_compare.py"), "--ranks", "1",
                          "--ops", "all_reduce", "--sizes", "8,64K", "--no-gloo", "--link", "1gbit", "--nics", "2", "--rounds", "2",
                          "--build", BUILD, "--jsonl", str(tmp_path / "rows.jsonl"),
                          "--plot", str(tmp_path / "chart.png")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 2x1 | all_reduce |")]
    assert len(rows) == 2 and all(row.split("|")[4].strip() != "-" for row in rows), run.stdout
    assert "TCP round trip host 0 <-> host 1" in run.stdout and "1gbit x 2 per host" in run.stdout
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [(r["bytes"], r["nics"], r["rounds"]) for r in rows] == [(8, 2, 2), (65536, 2, 2)], rows
    # The link limit counts both NICs: 2 x 1 Gbit/s.
    assert rows[1]["link_limit_us"] == pytest.approx(65536 / (2 * 1e9 / 8) * 1e6), rows
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The chart again from the rows alone, without running anything.
    again = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "measure", "multihost_compare.py"), "--plot-from",
                            str(tmp_path / "rows.jsonl"), "--plot", str(tmp_path / "again.png")],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and (tmp_path / "again.png").stat().st_size > 1000, again.stderr


def test_the_agent_runs_a_command_in_a_hosts_namespace_under_its_name_and_refuses_other_hosts():
    agent_path = os.path.join(ROOT, "tools", "measure", "netns_rsh")
    bed = testbed.Testbed(2)
    with bed:
        env = {**os.environ, "NETNS_RSH_HOSTS": f"{bed.addr(0)}={bed.host_ns(0)} {bed.addr(1)}={bed.host_ns(1)}"}
        # As a launcher calls ssh: options first, then the host and a command line for its shell.
        ran = subprocess.run([agent_path, "-x", "-o", "BatchMode=yes", bed.addr(1), "hostname; ip -o -4 addr show eth0"],
                             capture_output=True, text=True, timeout=30, env=env)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines()[0] == bed.host_ns(1) and f"{bed.addr(1)}/24" in ran.stdout, ran.stdout
        refused = subprocess.run([agent_path, "127.0.0.1", "true"], capture_output=True, text=True, timeout=30, env=env)
        assert refused.returncode == 255 and "not one of the testbed's" in refused.stderr


def test_the_multihost_comparison_holds_every_peer_to_the_testbeds_interfaces():
    compare = load_tool("multihost_compare")
    args = type("Args", (), {"iters": 10, "nics": 2, "hosts": 2, "peer_bin": "/bin", "peers_dir": "/peers"})()
    hosts = ["10.77.0.1", "10.77.0.2"]
    for lib in compare.PEERS:
        command, env = compare.peer_command(args, lib, hosts, 2, "all_reduce", 1 << 20, "/tmp/kvs")
        line = " ".join(command)
        assert compare.AGENT in command and "--check" in command, line  # started through the agent, checked
        assert "10.77.0.2" in line and "lo" not in command, line
        if lib == "mpi":
            assert "btl_tcp_if_include eth0,eth1" in line and "oob_tcp_if_include eth0" in line, line
        elif lib == "mpich":
            assert "-iface eth0" in line and env["UCX_TLS"] == "tcp" and env["UCX_NET_DEVICES"] == "eth0,eth1", line
        else:
            assert env["I_MPI_FABRICS"] == "shm:ofi" and env["FI_PROVIDER"] == "tcp" and env["FI_TCP_IFACE"] == "eth0"
            assert env["I_MPI_HYDRA_IFACE"] == "eth0"
            if lib == "ccl":
                assert env["CCL_KVS_IFACE"] == "eth0" and env["CCL_BENCH_KVS_FILE"] == "/tmp/kvs"
