#!/usr/bin/env python3
"""Measures tdist.rpc against torch.distributed.rpc (TensorPipe) on this
machine, side by side: 2 workers on one host (or, with --hosts 2, one in
each of two hosts played by network namespaces, tools/testbed.py, with
--link shaping the link; needs root), worker 0 calling
rpc_sync(worker1, torch.add, args=(t, 1)) on float32 tensors of 4 B, 1 MiB
and 64 MiB (the round trip: the tensor there and the sum back), and the
throughput of many rpc_async calls of 4 B in flight at once. The two
libraries run alternately, --rounds times each; each figure is the median
over rounds. Prints a markdown table and, with --jsonl, one JSON line per
figure. docs/rpc.md shows the current table.

    /usr/bin/python3 tools/measure/rpc_compare.py --rounds 3
    sudo /usr/bin/python3 tools/measure/rpc_compare.py --rounds 3 --hosts 2 [--link 5gbit]
"""

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, "build", "python"))

SIZES = {"4B": 1, "1MiB": 1 << 18, "64MiB": 1 << 24}  # float32 elements
ITERATIONS = {"4B": 2000, "1MiB": 200, "64MiB": 10}
ASYNC_CALLS = 2000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(lib, rank, port, queue, sizes, master="127.0.0.1"):
    import torch

    if lib == "tdist":
        import tdist.rpc as rpc

        options = rpc.RpcBackendOptions(init_method=f"tcp://{master}:{port}")
    else:
        import torch.distributed.rpc as rpc

        # Across namespace hosts TensorPipe would still find the other
        # process on this kernel and move tensors by cross-memory attach
        # around the link; held to TCP, it crosses the link as tdist does.
        across = {"_transports": ["uv"], "_channels": ["basic"]} if os.environ.get("TESTBED_HOST") else {}
        options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://{master}:{port}", **across)
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=options)
    if rank == 0:
        results = {}
        for name in sizes:
            t = torch.ones(SIZES[name])
            n = ITERATIONS[name]
            for _ in range(max(3, n // 10)):  # warm-up
                rpc.rpc_sync("worker1", torch.add, args=(t, 1))
            start = time.perf_counter()
            for _ in range(n):
                out = rpc.rpc_sync("worker1", torch.add, args=(t, 1))
            results[name] = (time.perf_counter() - start) / n * 1e6
            assert float(out[0]) == 2.0
        t = torch.ones(1)
        for _ in range(100):
            rpc.rpc_sync("worker1", torch.add, args=(t, 1))
        start = time.perf_counter()
        futures = [rpc.rpc_async("worker1", torch.add, args=(t, 1)) for _ in range(ASYNC_CALLS)]
        for f in futures:
            f.wait()
        results["async_calls_per_s"] = ASYNC_CALLS / (time.perf_counter() - start)
        queue.put(results)
    rpc.shutdown()


class _Printer:
    """A queue whose put() prints the result as JSON (a worker in a host)."""

    @staticmethod
    def put(results):
        print("RESULT " + json.dumps(results), flush=True)


def run_on_testbed(bed, lib, sizes, timeout):
    port = 29700
    env = {"TP_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    procs = [bed.popen(i, [sys.executable, os.path.abspath(__file__), "--worker", lib, str(i), bed.addr(0), str(port),
                           ",".join(sizes)], env=bed.env_for(i, {**os.environ, **env}), stdout=subprocess.PIPE,
                       text=True) for i in range(2)]
    try:
        out, _ = procs[0].communicate(timeout=timeout)
        procs[1].wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{lib}: worker 0 gave no result (exit {procs[0].returncode})")


def run(lib, sizes, timeout):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(lib, rank, port, queue, sizes)) for rank in range(2)]
    for p in procs:
        p.start()
    try:
        # A worker that dies (an import error, a crash) ends the wait at once.
        deadline = time.monotonic() + timeout
        while True:
            try:
                result = queue.get(timeout=1)
                break
            except Exception:  # queue.Empty
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or not any(p.is_alive() for p in procs) or time.monotonic() > deadline:
                    raise RuntimeError(f"{lib}: the workers ended without a result (exit codes "
                                       f"{[p.exitcode for p in procs]})")
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="4B,1MiB,64MiB")
    parser.add_argument("--no-torch", action="store_true", help="tdist only")
    parser.add_argument("--jsonl", help="also write every figure here")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--hosts", type=int, choices=(1, 2), default=1,
                        help="2: the workers in two hosts played by network namespaces (root)")
    parser.add_argument("--link", help="with --hosts 2: shape the link to this rate (5gbit, 1gbit, ...)")
    parser.add_argument("--worker", nargs=5, metavar=("LIB", "RANK", "MASTER", "PORT", "SIZES"),
                        help=argparse.SUPPRESS)  # one worker, in a testbed host
    args = parser.parse_args()
    if args.worker:
        lib, rank, master, port, sizes = args.worker
        worker(lib, int(rank), int(port), _Printer, sizes.split(","), master)
        return
    sizes = args.sizes.split(",")
    libs = ["tdist"] + ([] if args.no_torch else ["torch"])
    runs = {lib: [] for lib in libs}
    if args.hosts == 2:
        sys.path.insert(0, os.path.dirname(HERE))  # tools/testbed.py
        import testbed

        bed = testbed.Testbed(2, rate=testbed.parse_rate(args.link) if args.link else None)
        with bed:
            for _ in range(args.rounds):
                for lib in libs:
                    runs[lib].append(run_on_testbed(bed, lib, sizes, args.timeout))
        where = "2 workers on two namespace hosts" + (f" ({args.link} link)" if args.link else " (unshaped veth)")
    else:
        for _ in range(args.rounds):
            for lib in libs:
                runs[lib].append(run(lib, sizes, args.timeout))
        where = "2 workers on one host"
    median = {lib: {k: statistics.median(r[k] for r in runs[lib]) for k in runs[lib][0]} for lib in libs}
    print(f"{where}, median of {args.rounds} round(s); rpc_sync(torch.add) round trip in us, "
          "async: calls per second with all in flight\n")
    print("| what | tdist | torch RPC | tdist vs torch |")
    print("| --- | ---: | ---: | ---: |")
    rows = []
    for key in sizes + ["async_calls_per_s"]:
        ours = median["tdist"][key]
        theirs = median["torch"][key] if "torch" in median else None
        if theirs is None:
            ratio = "-"
        elif key == "async_calls_per_s":
            ratio = f"{ours / theirs:.1f}x"
        else:
            ratio = f"{theirs / ours:.1f}x"
        label = key if key == "async_calls_per_s" else f"rpc_sync {key}"
        print(f"| {label} | {ours:.1f} | {'-' if theirs is None else f'{theirs:.1f}'} | {ratio} |")
        rows.append({"what": key, "tdist": ours, "torch": theirs, "rounds": args.rounds, "hosts": args.hosts,
                     "link": args.link})
    if args.jsonl:
        with open(args.jsonl, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
