#!/usr/bin/env python3
"""tdist against Gloo across hosts played by network namespaces
(tools/testbed.py), with each link shaped, side by side in one run, and
each figure set against the link's limit: the bytes each host must send
across its link divided by the link's rate (docs/performance.md,
"Across hosts").

    sudo tools/measure/multihost_compare.py --hosts 2 --ranks 2,4 --link 5gbit \\
        [--ops all_reduce,broadcast,all_gather,reduce_scatter,all_to_all] [--sizes 8,16M,64M]
        [--nics 1] [--rounds 3] [--jsonl rows.jsonl] [--plot chart.png] [--no-gloo]
    tools/measure/multihost_compare.py --plot-from rows.jsonl --plot chart.png

Sizes follow nccl-tests: the whole buffer (all_gather's output,
reduce_scatter's input, all_to_all's per-rank input). Also measures the
links' TCP round trip (1-byte ping-pong between host 0 and host 1), the
floor of a small all_reduce. Gloo is torch.distributed's (Debian's
python3-torch), run by the anchors' gloo_bench.py with GLOO_SOCKET_IFNAME
set to the hosts' interfaces. With --nics K every host has K interfaces,
each shaped to --link, and both libraries are given all of them
(TDIST_SOCKET_IFNAME / GLOO_SOCKET_IFNAME=eth0,...); the link limit is then
K times the rate. --plot draws the share of the link limit of each op at
its largest size, tdist's and Gloo's bars side by side, one panel per
link and ranks per host (--plot-from redraws it from rows written by
--jsonl, without running anything). With --rounds R each library runs R times, alternating,
and each figure is the median of its R runs (the lower middle one of an
even count; the VM's speed drifts). Needs
root (namespaces).
"""

import argparse
import io
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.dirname(HERE)
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)
import testbed  # noqa: E402 - tools/testbed.py

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


def rows_from(output, lib):
    rows = []
    for line in output.splitlines():
        brace = line.find("{")
        if brace < 0 or "[host 0] [rank 0]" not in line[:brace]:
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
    """Bars of each op's share of the link limit at its largest size, tdist
    and Gloo side by side, one panel per (link, NICs, ranks per host)."""
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
        for k, (lib, colour) in enumerate((("tdist", "tab:blue"), ("gloo", "tab:orange"))):
            shares = [(r["link_limit_us"] / r[f"{lib}_us"]) if r.get(f"{lib}_us") else 0 for r in by_op.values()]
            at = [i + (k - 0.5) * 0.4 for i in range(len(ops))]
            ax.bar(at, shares, 0.4, label=lib, color=colour)
            for x, share in zip(at, shares):
                if share == 0:  # Gloo has no reduce_scatter
                    ax.text(x, 0.02, "none", rotation=90, ha="center", va="bottom", fontsize=7)
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


def bench_command(args, op, size):
    """tdist-bench for one size, with as many iterations as gloo_bench.py
    gives it (up to 1000 for small ones), at least --iters."""
    iters = max(args.iters, min(1000, int(2e8 // max(size, 1))))
    return [os.path.join(args.build, "bin", "tdist-bench"), "--op", op, "-b", str(size), "-e", str(size),
            "-n", str(iters), "-w", str(max(2, iters // 10)), "--json", "--timeout", "600"]


def run_on_testbed(args, per_host, command, env_extra=None):
    """`command` on every rank of a fresh testbed, launched by tdistrun
    (one agent per host); every host's output, lines prefixed "[host i] "."""
    agent = [os.path.join(args.build, "bin", "tdistrun"), "--nnodes", str(args.hosts), "--node-rank", "{host}",
             "--master-addr", "{master}", "--master-port", "29500", "--nproc-per-node", str(per_host)]
    out = io.BytesIO()
    with testbed.Testbed(args.hosts, nics=args.nics, rate=args.rate_bytes) as bed:
        code = testbed.run_everywhere(bed, agent + command, args.timeout, out=out,
                                      env={"PYTHONPATH": os.path.join(args.build, "python"), **(env_extra or {})})
    if code == 124:
        raise SystemExit("multihost_compare: a run outlived --timeout: " + " ".join(command))
    return out.getvalue().decode(errors="replace")


def measure_rtt(args):
    bed = testbed.Testbed(args.hosts, rate=args.rate_bytes)
    with bed:
        procs = [bed.popen(i, [sys.executable, "-c", RTT], env=bed.env_for(i), stdout=subprocess.PIPE, text=True)
                 for i in range(min(2, args.hosts))]
        out = procs[1].communicate(timeout=60)[0]
        procs[0].wait(timeout=60)
    return float(out.split()[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--ranks", default="2,4", help="ranks per host, comma-separated (one table row group each)")
    parser.add_argument("--link", default="5gbit", help="tbf rate of every link (kbit/mbit/gbit), or 'none'")
    parser.add_argument("--ops", default="all_reduce,broadcast,all_gather,reduce_scatter,all_to_all")
    parser.add_argument("--sizes", default="8,16M,64M")
    parser.add_argument("--iters", type=int, default=10, help="timed iterations at least (more for small sizes)")
    parser.add_argument("--nics", type=int, default=1, help="interfaces per host, each shaped to --link")
    parser.add_argument("--rounds", type=int, default=1, help="runs per library, alternating; medians reported")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--gloo-bench", default=os.path.join(ROOT, os.pardir, "shared", "anchors", "gloo_bench.py"))
    parser.add_argument("--no-gloo", action="store_true")
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
        return
    args.rate_bytes = None if args.link == "none" else testbed.parse_rate(args.link)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    gloo = not args.no_gloo and os.path.exists(args.gloo_bench)
    ifnames = testbed.ifnames(args.nics)
    rate = args.rate_bytes * args.nics if args.rate_bytes else None  # bytes/s a host may send, all NICs
    testbed.remove_stale()

    rtt = measure_rtt(args)
    print(f"links: {args.link} x {args.nics} per host, {args.hosts} hosts, median of {args.rounds} round(s); TCP round trip host 0 <-> host 1: {rtt:.1f} us (median of 300)\n")
    print("| ranks | op | size | tdist ms | gloo ms | link limit ms | share of limit | tdist vs gloo |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    out_rows = []
    for per_host in (int(r) for r in args.ranks.split(",")):
        for op in args.ops.split(","):
            peer = [sys.executable, "-W", "ignore", args.gloo_bench, op, ",".join(map(str, sizes))]
            ours, theirs = [], []
            for _ in range(args.rounds):
                ours.append([row for size in sizes for row in rows_from(
                    run_on_testbed(args, per_host, bench_command(args, op, size), {"TDIST_SOCKET_IFNAME": ifnames}), "tdist")])
                if gloo:
                    theirs.append(rows_from(run_on_testbed(args, per_host, peer, {"GLOO_SOCKET_IFNAME": ifnames}),
                                            "gloo"))
            for size in sizes:
                t = median_time(ours, size)
                g = median_time(theirs, size)
                limit = host_bytes(op, size, args.hosts, per_host) / rate * 1e6 if rate else None
                row = {"hosts": args.hosts, "ranks_per_host": per_host, "link": args.link, "nics": args.nics,
                       "rounds": args.rounds, "op": op, "bytes": size, "tdist_us": t, "gloo_us": g,
                       "link_limit_us": limit, "rtt_us": rtt}
                out_rows.append(row)
                share = f"{limit / t:.2f}" if t and limit else "-"
                ratio = f"{g / t:.2f}x" if t and g else "-"
                print(f"| {args.hosts}x{per_host} | {op} | {size} | {ms(t)} | {ms(g)} | {ms(limit)} | {share} | {ratio} |",
                      flush=True)
    if args.jsonl:
        with open(args.jsonl, "a") as f:
            for row in out_rows:
                f.write(json.dumps(row) + "\n")
    if args.plot:
        plot(out_rows, args.plot)


if __name__ == "__main__":
    main()
