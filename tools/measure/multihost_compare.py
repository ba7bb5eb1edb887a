#!/usr/bin/env python3
"""tdist against Gloo, Open MPI, Intel MPI, MPICH and oneCCL across hosts
played by network namespaces (tools/testbed.py), with each link shaped,
side by side in one run, and each figure set against the link's limit: the
bytes each host must send across its link divided by the link's rate
(docs/performance.md, "Across hosts").

    sudo tools/measure/multihost_compare.py --hosts 2 --ranks 2,4 --link 5gbit \\
        [--ops all_reduce,broadcast,all_gather,reduce_scatter,all_to_all] [--sizes 8,16M,64M]
        [--libs tdist,gloo,mpi,impi,mpich,ccl] [--nics 1] [--rounds 3] [--jsonl rows.jsonl] [--plot chart.png]
    tools/measure/multihost_compare.py --plot-from rows.jsonl --plot chart.png

Sizes follow nccl-tests: the whole buffer (all_gather's output,
reduce_scatter's input, all_to_all's per-rank input). Every library runs
the same iterations at each size (as many as tdist-bench is given: up to
1000 for small sizes, at least --iters) and checks its results (--check;
a row with wrong elements is reported). Also measures the links' TCP round
trip (1-byte ping-pong between host 0 and host 1), the floor of a small
all_reduce.

How each library runs across the hosts (a fresh testbed for every run):
tdist (tdist-bench) and Gloo (the torch.distributed of the Python that runs
this tool, by tools/peers/gloo_bench.py) under tdistrun, one agent per host, with
TDIST_SOCKET_IFNAME / GLOO_SOCKET_IFNAME set to the hosts' interfaces. The
MPIs (tools/peers/mpi_bench.c) and oneCCL (tools/peers/ccl_bench.cpp), which
tools/peers/setup installs and builds, are started by their own launcher
in host 0, which reaches the other hosts through tools/measure/netns_rsh,
an ssh stand-in that enters a host's namespace: Open MPI's mpirun
(plm_rsh_agent), Intel MPI's and MPICH's hydra mpiexec (-bootstrap-exec,
-launcher-exec); oneCCL's ranks are started by Intel MPI's. Each is held to
the testbed's interfaces (peer_command says how), and after each run the
hosts' interfaces must have sent at least what the op must send across
them, else the run is refused as having bypassed the links. A library that
cannot be made ready, or whose run fails, is named with the reason.

With --nics K every host has K interfaces, each shaped to --link, and the
libraries are given all of them where they can use several
(TDIST_SOCKET_IFNAME / GLOO_SOCKET_IFNAME=eth0,...); the link limit is then
K times the rate. --plot draws the share of the link limit of each op at
its largest size, the libraries' bars side by side, one panel per
link and ranks per host (--plot-from redraws it from rows written by
--jsonl, without running anything). With --rounds R each library runs R
times, the libraries taking turns at each size in each round, and each
figure is the median of its R runs (the lower middle one of an even count;
the VM's speed drifts). Needs root (namespaces).
"""

import argparse
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.dirname(HERE)
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)
import testbed  # noqa: E402 - tools/testbed.py

LIBS = ("tdist", "gloo", "mpi", "impi", "mpich", "ccl")
NAMES = {"tdist": "tdist", "gloo": "Gloo", "mpi": "Open MPI", "impi": "Intel MPI", "mpich": "MPICH", "ccl": "oneCCL"}
PEERS = ("mpi", "impi", "mpich", "ccl")  # started by an MPI launcher, made ready by tools/peers/setup
COLOURS = {"tdist": "tab:blue", "gloo": "tab:orange", "mpi": "tab:green", "impi": "tab:red", "mpich": "tab:purple",
           "ccl": "tab:brown"}
AGENT = os.path.join(HERE, "netns_rsh")
LACKS = set()  # what a library said it lacks, said once
# The MPIs and oneCCL allocate temporaries per call; glibc is told to keep
# freed memory, as tools/compare does for them (docs/performance.md).
PEER_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"

RTT = r"""
import os, socket, time
me = int(os.environ["TESTBED_HOST"])
if me == 0:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["TESTBED_ADDR"], 7100)); s.listen()
    c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        b = c.recv(1)
        if not b: break
        c.sendall(b)
elif me == 1:
    for _ in range(600):
        try:
            c = socket.create_connection((os.environ["TESTBED_MASTER"], 7100)); break
        except ConnectionRefusedError:
            time.sleep(0.05)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for i in range(300):
        t = time.perf_counter(); c.sendall(b"x"); c.recv(1); times.append(time.perf_counter() - t)
    times.sort(); print("rtt_us", round(1e6 * times[len(times) // 2], 1), flush=True)
"""


def parse_size(text):
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if text[-1:] in "KMG" else text) * scale


def host_bytes(op, size, hosts, per_host):
    """Bytes each host must send across its link at least (the link limit's numerator)."""
    share = (hosts - 1) / hosts
    if op == "all_reduce":
        return 2 * share * size  # reduce-scatter then all-gather of the host's part, across hosts
    if op == "broadcast":
        return size  # the root's host sends the buffer out once
    if op in ("all_gather", "reduce_scatter"):
        return share * size  # every other host's share comes in (all_gather) / goes out (reduce_scatter)
    if op == "all_to_all":
        return per_host * share * size  # each rank's parts for the other hosts
    raise ValueError(op)


def rows_from(output, lib, prefix="[host 0] [rank 0]"):
    """The JSON rows of `lib` in output: those after `prefix` (rank 0's
    under tdistrun on the testbed), or with prefix None every line that is
    one (an MPI launcher's output, where only rank 0 prints rows)."""
    rows = []
    for line in output.splitlines():
        brace = line.find("{")
        if brace < 0 or (prefix is not None and prefix not in line[:brace]) or (prefix is None and brace > 0):
            continue
        try:
            row = json.loads(line[brace:])
        except json.JSONDecodeError:
            continue
        if row.get("lib") == lib:
            rows.append(row)
    return rows


def ms(us):
    return "-" if us is None else f"{us / 1e3:.3f}"


def median_time(runs, size):
    """The median of one size's times over runs (lists of rows); None if no run has it."""
    times = sorted(t for rows in runs for r in rows if r["bytes"] == size and (t := r.get("time_us")) is not None)
    return times[(len(times) - 1) // 2] if times else None  # the lower middle of an even count


def plot(rows, path):
    """Bars of each op's share of the link limit at its largest size, the
    libraries side by side, one panel per (link, NICs, ranks per host)."""
    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    panels = {}
    for row in rows:
        if row.get("link_limit_us") is None:
            continue  # unshaped: no limit to set the figures against
        key = (row["link"], row.get("nics", 1), row["hosts"], row["ranks_per_host"])
        largest = panels.setdefault(key, {})
        if row["bytes"] >= largest.get(row["op"], {}).get("bytes", -1):
            largest[row["op"]] = row
    if not panels:
        raise SystemExit("multihost_compare: no rows with a link limit to plot")
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False, sharey=True)
    for ax, (key, by_op) in zip(axes[0], sorted(panels.items())):
        link, nics, hosts, per_host = key
        ops = list(by_op)
        libs = [lib for lib in LIBS if any(f"{lib}_us" in r for r in by_op.values())]
        width = 0.8 / len(libs)
        for k, lib in enumerate(libs):
            shares = [(r["link_limit_us"] / r[f"{lib}_us"]) if r.get(f"{lib}_us") else 0 for r in by_op.values()]
            at = [i + (k - (len(libs) - 1) / 2) * width for i in range(len(ops))]
            ax.bar(at, shares, width, label=NAMES[lib], color=COLOURS[lib])
            for x, share in zip(at, shares):
                if share == 0:  # not measured (Gloo has no reduce_scatter)
                    ax.text(x, 0.02, "none", rotation=90, ha="center", va="bottom", fontsize=6)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlim(-0.7, max(len(ops), 3) - 0.3)  # bars as wide in every panel
        ax.set_xticks(range(len(ops)))
        ax.set_xticklabels([op.replace("_", "\n") for op in ops], fontsize=8)
        size = max(r["bytes"] for r in by_op.values()) >> 20
        ax.set_title(f"{hosts} hosts x {per_host} ranks, {nics} x {link}, {size} MiB", fontsize=9)
    axes[0][0].set_ylabel("share of the link's limit (1 = link speed)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def iterations(args, size):
    """Timed and warm-up iterations at one size, the same for every library:
    up to 1000 for small sizes (2e8 bytes' worth), at least --iters."""
    iters = max(args.iters, min(1000, int(2e8 // max(size, 1))))
    return iters, max(2, iters // 10)


def bench_command(args, op, size):
    """tdist-bench for one size."""
    iters, warmup = iterations(args, size)
    return [os.path.join(args.build, "bin", "tdist-bench"), "--op", op, "-b", str(size), "-e", str(size),
            "-n", str(iters), "-w", str(warmup), "--check", "--json", "--timeout", "600"]


def gloo_command(args, op, size):
    """tools/peers/gloo_bench.py for one size."""
    iters, warmup = iterations(args, size)
    return [sys.executable, "-W", "ignore", args.gloo_bench, "--ops", op, "--sizes", str(size), "--iters", str(iters),
            "--warmup", str(warmup), "--check"]


def sent_bytes(bed):
    """The bytes every host's interfaces have sent since the testbed was made."""
    total = 0
    for i in range(bed.hosts):
        for k in range(bed.nics):
            out = testbed._run("ip", "-n", bed.host_ns(i), "-s", "-j", "link", "show", "dev", f"eth{k}").stdout
            total += json.loads(out)[0]["stats64"]["tx"]["bytes"]
    return total


def run_on_testbed(args, per_host, command, env_extra=None):
    """`command` on every rank of a fresh testbed, launched by tdistrun
    (one agent per host): the exit status (testbed.run_everywhere's), every
    host's output (lines prefixed "[host i] ") and the bytes the hosts sent
    over their links."""
    agent = [os.path.join(args.build, "bin", "tdistrun"), "--nnodes", str(args.hosts), "--node-rank", "{host}",
             "--master-addr", "{master}", "--master-port", "29500", "--nproc-per-node", str(per_host)]
    out = io.BytesIO()
    with testbed.Testbed(args.hosts, nics=args.nics, rate=args.rate_bytes) as bed:
        code = testbed.run_everywhere(bed, agent + command, args.timeout, out=out,
                                      env={"PYTHONPATH": os.path.join(args.build, "python"), **(env_extra or {})})
        sent = sent_bytes(bed)
    return code, out.getvalue().decode(errors="replace"), sent


def oversubscribed(args, per_host):
    """True when the ranks of all the hosts outnumber this machine's CPUs
    (the hosts share them)."""
    return args.hosts * per_host > (os.cpu_count() or 1)


def peer_command(args, lib, hosts, per_host, op, size, kvs):
    """The command that starts `lib`'s benchmark on every host, run in host 0
    (the addresses `hosts`, per_host ranks each), and the variables it is
    given beyond this process's environment."""
    iters, warmup = iterations(args, size)
    ifaces = testbed.ifnames(args.nics)
    first = ifaces.split(",")[0]
    ranks = str(len(hosts) * per_host)
    bench = [os.path.join(args.peer_bin, f"{lib}_bench"), "--ops", op, "--sizes", str(size), "--iters", str(iters),
             "--warmup", str(warmup), "--check"]
    env = {"GLIBC_TUNABLES": PEER_MALLOC}
    spare = not oversubscribed(args, per_host)
    intel = os.path.join(args.peers_dir, "intel")
    if lib == "mpi":
        # Open MPI: its rsh launcher with the agent; the tcp BTL between
        # hosts on the testbed's interfaces (every NIC: it stripes over
        # them), out-of-band wire-up on the first; vader shared memory
        # within a host; coll tuned's default algorithms. Ranks that
        # outnumber the CPUs yield when idle (what --oversubscribe sets).
        return ["mpirun", "--allow-run-as-root", "--host", ",".join(f"{h}:{per_host}" for h in hosts), "-np", ranks,
                "--mca", "plm_rsh_agent", AGENT, "--mca", "btl_tcp_if_include", ifaces,
                "--mca", "oob_tcp_if_include", first, "--mca", "mpi_yield_when_idle", "0" if spare else "1",
                "-x", "GLIBC_TUNABLES", *bench], env
    if lib in ("impi", "ccl"):
        # Intel MPI: hydra's ssh bootstrap with the agent, on the first
        # interface; shared memory within a host and libfabric's tcp
        # provider between hosts (I_MPI_FABRICS=shm:ofi, the fabric a user of
        # a TCP cluster sets); algorithms its defaults. When the ranks
        # outnumber the CPUs, its wait mode (I_MPI_WAIT_MODE=1, Intel's
        # setting for oversubscription: spinning ranks took 22 ms for an 8 B
        # all_reduce at 2 x 2 here, 0.9 ms with it).
        env.update(I_MPI_ROOT=intel, I_MPI_FABRICS="shm:ofi", FI_PROVIDER="tcp", FI_TCP_IFACE=first,
                   I_MPI_HYDRA_IFACE=first)
        if not spare:
            env["I_MPI_WAIT_MODE"] = "1"
        launch = [os.path.join(intel, "bin", "mpiexec"), "-bootstrap", "ssh", "-bootstrap-exec", AGENT,
                  "-hosts", ",".join(hosts), "-ppn", str(per_host), "-n", ranks]
        if lib == "impi":
            return launch + bench + ["--lib", "impi"], env
        # oneCCL: its ranks started by Intel MPI's mpiexec, its MPI transport
        # over Intel MPI's (CCL_ATL_TRANSPORT=mpi; its ofi transport over
        # libfabric's tcp provider was no faster here), its KVS on the first
        # interface, rank 0's KVS address handed over through a file (the
        # hosts share this machine's file system). Workers and algorithms
        # are oneCCL's defaults.
        env.update(CCL_ATL_TRANSPORT="mpi", CCL_KVS_IFACE=first, CCL_BENCH_KVS_FILE=kvs)
        return launch + bench, env
    if lib == "mpich":
        # MPICH: hydra's ssh launcher with the agent, wire-up on the first
        # interface (-iface); ch4's shared memory within a host, its UCX
        # netmod between hosts, over TCP on the testbed's interfaces
        # (UCX_TLS=tcp: else UCX, seeing one kernel, reached the other
        # host's ranks through shared memory and the links carried 21 KB
        # of a 1 MiB all_reduce's 190 MB); default collectives. When the
        # ranks outnumber the CPUs, its progress throttle, as tools/compare
        # does.
        env.update(UCX_TLS="tcp", UCX_NET_DEVICES=ifaces)
        if not spare:
            env["MPIR_CVAR_CH4_PROGRESS_THROTTLE"] = "1"
        return [os.path.join(args.peers_dir, "mpich", "bin", "mpiexec"), "-launcher", "ssh", "-launcher-exec", AGENT,
                "-iface", first, "-hosts", ",".join(hosts), "-ppn", str(per_host), "-n", ranks,
                *bench, "--lib", "mpich"], env
    raise ValueError(lib)


def run_peer(args, lib, per_host, op, size):
    """`lib`'s benchmark at one size on a fresh testbed, its launcher in host
    0 (entered through the agent, as the other hosts are): the exit status
    (124 on timeout), its output (stdout: rank 0's rows; then stderr) and the
    bytes the hosts sent over their links."""
    kvs = os.path.join(args.peer_bin, "ccl.kvs")
    if os.path.exists(kvs):
        os.unlink(kvs)
    with testbed.Testbed(args.hosts, nics=args.nics, rate=args.rate_bytes) as bed:
        hosts = [bed.addr(i) for i in range(args.hosts)]
        command, env = peer_command(args, lib, hosts, per_host, op, size, kvs)
        env = {**os.environ, **env,
               "NETNS_RSH_HOSTS": " ".join(f"{bed.addr(i)}={bed.host_ns(i)}" for i in range(args.hosts))}
        proc = subprocess.Popen([AGENT, hosts[0], shlex.join(command)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
        bed.started.append(proc)  # down() kills its group, and whatever is left in the hosts
        try:
            out, err = proc.communicate(timeout=args.timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            testbed.kill_all([proc])
            out, err = proc.communicate()
            code = 124
        sent = sent_bytes(bed)
    return code, out + "\n" + err, sent


def measure_once(args, lib, per_host, op, size):
    """One library at one size: (rows, None), or ([], why) when it failed."""
    if lib in PEERS:
        code, output, sent = run_peer(args, lib, per_host, op, size)
        rows = rows_from(output, lib, prefix=None)
    else:
        if lib == "tdist":
            command, env = bench_command(args, op, size), {"TDIST_SOCKET_IFNAME": testbed.ifnames(args.nics)}
        else:
            command, env = gloo_command(args, op, size), {"GLOO_SOCKET_IFNAME": testbed.ifnames(args.nics)}
        code, output, sent = run_on_testbed(args, per_host, command, env)
        rows = rows_from(output, lib)
    where = f"{NAMES[lib]}, {op}, {size} bytes, {args.hosts} x {per_host} ranks"
    if code == 124:
        return [], f"{where}: outlived --timeout {args.timeout:g} s"
    if code != 0:
        said = [line for line in output.splitlines() if line.strip() and "CCL_WARN" not in line][-12:]
        return [], f"{where}: exit status {code}:\n    " + "\n    ".join(said)
    said = [line.split("gloo_bench.py:", 1)[1].strip() for line in output.splitlines() if "gloo_bench.py:" in line]
    if lib == "gloo" and not rows and said:
        # An op this Gloo lacks (reduce_scatter in torch 1.13): said once.
        if said[0] not in LACKS:
            LACKS.add(said[0])
            print(f"multihost_compare: Gloo: {said[0]}", file=sys.stderr)
        return [], None
    if not rows:
        return [], f"{where}: no rows in its output"
    wrong = sum(r.get("errors", 0) for r in rows)
    if wrong:
        return [], f"{where}: {wrong} wrong elements (--check)"
    iters, _ = iterations(args, size)
    must = host_bytes(op, size, args.hosts, per_host) * iters
    if sent < must:
        return [], (f"{where}: its hosts sent {sent} bytes over their links, less than the {must:.0f} the timed "
                    "calls must send: its traffic went around the testbed's links")
    return rows, None


def measure_rtt(args):
    bed = testbed.Testbed(args.hosts, rate=args.rate_bytes)
    with bed:
        procs = [bed.popen(i, [sys.executable, "-c", RTT], env=bed.env_for(i), stdout=subprocess.PIPE, text=True)
                 for i in range(min(2, args.hosts))]
        out = procs[1].communicate(timeout=60)[0]
        procs[0].wait(timeout=60)
    return float(out.split()[1])


def has_figure(op, size, ranks):
    """False where the buffer holds fewer float32 elements than an op that
    splits it needs, one per rank (every library skips that size)."""
    return op not in ("all_gather", "reduce_scatter", "all_to_all") or size // 4 >= ranks


def ready_peers(args, libs):
    """Has tools/peers/setup install and build the peers among libs into
    args.peer_bin; returns {lib: why} for those it could not make ready."""
    peers = [lib for lib in libs if lib in PEERS]
    if not peers:
        return {}
    setup = subprocess.run([os.path.join(TOOLS, "peers", "setup"), "--libs", ",".join(peers), "--out", args.peer_bin,
                            "--peers-dir", args.peers_dir], stdout=subprocess.PIPE, text=True)
    if setup.returncode != 0:
        return {lib: f"tools/peers/setup failed (exit status {setup.returncode})" for lib in peers}
    return dict(line.split("\t", 1) for line in setup.stdout.splitlines() if "\t" in line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--ranks", default="2,4", help="ranks per host, comma-separated (one table row group each)")
    parser.add_argument("--link", default="5gbit", help="tbf rate of every link (kbit/mbit/gbit), or 'none'")
    parser.add_argument("--ops", default="all_reduce,broadcast,all_gather,reduce_scatter,all_to_all")
    parser.add_argument("--sizes", default="8,16M,64M")
    parser.add_argument("--libs", default="tdist,gloo",
                        help="libraries, of tdist, gloo, mpi (Open MPI), impi (Intel MPI), mpich, ccl (oneCCL)")
    parser.add_argument("--iters", type=int, default=10, help="timed iterations at least (more for small sizes)")
    parser.add_argument("--nics", type=int, default=1, help="interfaces per host, each shaped to --link")
    parser.add_argument("--rounds", type=int, default=1, help="runs per library, alternating; medians reported")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--gloo-bench", default=os.path.join(TOOLS, "peers", "gloo_bench.py"))
    parser.add_argument("--peers-dir", default=os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                            os.path.expanduser("~/.cache"), "tdist-peers"),
                        help="where tools/peers/setup installs Intel MPI, oneCCL and MPICH")
    parser.add_argument("--no-gloo", action="store_true", help="leave Gloo out of --libs")
    parser.add_argument("--jsonl", help="also write every row here")
    parser.add_argument("--plot", help="draw the chart of shares of the link limit here (PNG)")
    parser.add_argument("--plot-from", help="only draw --plot from these rows (a --jsonl file)")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    if args.plot_from:
        if not args.plot:
            parser.error("--plot-from needs --plot")
        with open(args.plot_from) as f:
            plot([json.loads(line) for line in f if line.strip()], args.plot)
        return 0
    libs = [lib for lib in args.libs.split(",") if lib and not (lib == "gloo" and args.no_gloo)]
    for lib in libs:
        if lib not in LIBS:
            parser.error(f"--libs: unknown library {lib!r} (of {', '.join(LIBS)})")
    if "tdist" not in libs:
        parser.error("--libs must include tdist: every ratio is to tdist's time")
    args.rate_bytes = None if args.link == "none" else testbed.parse_rate(args.link)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rate = args.rate_bytes * args.nics if args.rate_bytes else None  # bytes/s a host may send, all NICs
    testbed.remove_stale()

    # Why a library is not measured at all, and the runs that failed.
    why_not = {}
    if "gloo" in libs and not os.path.exists(args.gloo_bench):
        why_not["gloo"] = f"no Gloo benchmark at {args.gloo_bench}"
    work = tempfile.TemporaryDirectory(prefix="tdist-multihost.")
    args.peer_bin = work.name
    why_not.update(ready_peers(args, libs))
    for lib, why in why_not.items():
        print(f"multihost_compare: {NAMES[lib]} cannot run: {why}; the run goes on without it", file=sys.stderr)
    run_libs = [lib for lib in libs if lib not in why_not]
    peers = [lib for lib in run_libs if lib != "tdist"]
    failures = []

    rtt = measure_rtt(args)
    print(f"links: {args.link} x {args.nics} per host, {args.hosts} hosts, median of {args.rounds} round(s); "
          f"TCP round trip host 0 <-> host 1: {rtt:.1f} us (median of 300)")
    out_rows = []
    for per_host in (int(r) for r in args.ranks.split(",")):
        for op in args.ops.split(","):
            results = {lib: [] for lib in run_libs}
            # The libraries take turns at each size, every round: a slow
            # spell of the VM hits one round of each, not one library.
            for _ in range(args.rounds):
                for size in sizes:
                    if not has_figure(op, size, args.hosts * per_host):
                        continue
                    for lib in run_libs:
                        rows, why = measure_once(args, lib, per_host, op, size)
                        results[lib] += rows
                        if why:
                            failures.append(why)
                            print(f"multihost_compare: {why}", file=sys.stderr, flush=True)
            head = ["ranks", "op", "size", "tdist ms"] + [f"{NAMES[lib]} ms" for lib in peers] + \
                ["link limit ms", "tdist's share of limit"] + [f"{NAMES[lib]} / tdist" for lib in peers]
            if len(peers) > 1:
                head.append("fastest peer / tdist")
            print(f"\n{op}, {args.hosts} hosts x {per_host} ranks:\n")
            print("| " + " | ".join(head) + " |")
            print("| --- | --- | " + " | ".join("---:" for _ in head[2:]) + " |")
            for size in sizes:
                times = {lib: median_time([results[lib]], size) for lib in run_libs}
                t = times["tdist"]
                limit = host_bytes(op, size, args.hosts, per_host) / rate * 1e6 if rate else None
                row = {"hosts": args.hosts, "ranks_per_host": per_host, "link": args.link, "nics": args.nics,
                       "rounds": args.rounds, "op": op, "bytes": size,
                       **{f"{lib}_us": times[lib] for lib in run_libs}, "link_limit_us": limit, "rtt_us": rtt,
                       # Every round's time, in the order they ran.
                       "runs_us": {lib: [r["time_us"] for r in results[lib] if r["bytes"] == size] for lib in run_libs}}
                out_rows.append(row)
                share = f"{limit / t:.2f}" if t and limit else "-"
                cells = [f"{args.hosts}x{per_host}", op, str(size), ms(t)] + [ms(times[lib]) for lib in peers] + \
                    [ms(limit), share] + [f"{times[lib] / t:.2f}x" if t and times[lib] else "-" for lib in peers]
                if len(peers) > 1:
                    known = [times[lib] for lib in peers if times[lib]]
                    cells.append(f"{min(known) / t:.2f}x" if t and known else "-")
                print("| " + " | ".join(cells) + " |", flush=True)
    if args.jsonl:
        with open(args.jsonl, "a") as f:
            for row in out_rows:
                f.write(json.dumps(row) + "\n")
    if args.plot:
        plot(out_rows, args.plot)
    work.cleanup()
    for lib, why in why_not.items():
        print(f"multihost_compare: not measured: {NAMES[lib]}: {why}", file=sys.stderr)
    if failures:
        print(f"multihost_compare: {len(failures)} run(s) failed, their figures left out (above)", file=sys.stderr)
    return 1 if why_not or failures else 0


if __name__ == "__main__":
    sys.exit(main())
