#!/usr/bin/python3
"""Asynchronous all_reduces of the tdist Python package beside NumPy work, as a
training step issues gradient buckets during its backward pass.

    tools/measure/async_overlap.py                      # 2 and 4 ranks, 100 MB in 4 buckets
    tools/measure/async_overlap.py --world 2 --grad-mb 16 --buckets 8 --rounds 9

Each rank runs, in turns, ROUNDS times:

- compute: the "backward pass" alone, BUCKETS slices of NumPy matrix products
  (float32, single-threaded BLAS);
- overlapped: the same slices, each followed by all_reduce(bucket,
  async_op=True), then a wait for every bucket: the communication runs on
  tdist's thread while the next slice computes;
- raw: the buckets all-reduced alone, issued together and then waited for;
- serial: compute, then the blocking all_reduces.

It prints, per world size, the medians (slowest rank, milliseconds) and the
overhead, overlapped minus compute of the same round: at most raw when the
communication neither waits on the computation nor slows it. With --jsonl
every row is appended as a JSON line. The buckets' sums are checked.
"""

import argparse
import json
import os
import statistics
import sys
import time

from local_ranks import run_ranks


def rank_main(cfg):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy as np

    import tdist

    tdist.init_process_group("tdist")
    rank, world = tdist.get_rank(), tdist.get_world_size()
    n = int(cfg["grad_mb"] * 1e6 / 4 / cfg["buckets"])
    buckets = [np.empty(n, np.float32) for _ in range(cfg["buckets"])]
    rng = np.random.default_rng(rank)
    a = rng.standard_normal((cfg["batch"], 1024), dtype=np.float32)
    w = rng.standard_normal((1024, 1024), dtype=np.float32)

    def compute_slice():
        x = a
        for _ in range(cfg["matmuls"]):
            x = np.tanh(x @ w)
        return x

    def fill():
        for i, b in enumerate(buckets):
            b.fill(rank + i)

    def check():
        for i, b in enumerate(buckets):
            want = sum(r + i for r in range(world))
            if b.size and not (b[0] == want and b[-1] == want):
                raise SystemExit("rank %d: bucket %d holds %r, not %r" % (rank, i, b[0], want))

    def slowest(seconds):
        t = np.array([seconds], np.float64)
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
        return float(t[0]) * 1e3

    def compute():
        for _ in buckets:
            compute_slice()

    def overlapped():
        works = []
        for b in buckets:
            compute_slice()
            works.append(tdist.all_reduce(b, async_op=True))
        for wk in works:
            wk.wait()

    def raw():
        for wk in [tdist.all_reduce(b, async_op=True) for b in buckets]:
            wk.wait()

    def serial():
        compute()
        for b in buckets:
            tdist.all_reduce(b)

    modes = {"compute": compute, "overlapped": overlapped, "raw": raw, "serial": serial}
    times = {m: [] for m in modes}
    names = list(modes)
    for i in range(cfg["rounds"] + 1):  # the first round warms up
        for m in names[i % len(names):] + names[:i % len(names)]:
            fill()
            tdist.barrier()
            start = time.perf_counter()
            modes[m]()
            elapsed = slowest(time.perf_counter() - start)
            if m != "compute":
                check()
            if i:
                times[m].append(elapsed)
    if rank == 0:
        med = {m: statistics.median(v) for m, v in times.items()}
        over = statistics.median([o - c for o, c in zip(times["overlapped"], times["compute"])])
        row = dict(cfg, world=world, overhead_ms=over, **{m + "_ms": v for m, v in med.items()})
        print("ROW " + json.dumps(row), flush=True)
    tdist.destroy_process_group()


def run(cfg, world, timeout):
    row, why = run_ranks(__file__, cfg, world, timeout)
    if row is None:
        raise SystemExit("async_overlap: %d ranks: %s" % (world, why))
    return row


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--rank-config":
        rank_main(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", default="2,4", help="world sizes, comma-separated")
    ap.add_argument("--grad-mb", type=float, default=100.0, help="megabytes all-reduced per step")
    ap.add_argument("--buckets", type=int, default=4, help="buckets per step")
    ap.add_argument("--matmuls", type=int, default=2, help="matrix products per slice of the backward pass")
    ap.add_argument("--batch", type=int, default=64, help="rows of each product's left operand")
    ap.add_argument("--rounds", type=int, default=7, help="rounds; the figures are their medians")
    ap.add_argument("--timeout", type=int, default=600, help="seconds allowed per world size")
    ap.add_argument("--jsonl", help="append every row to this file as a JSON line")
    args = ap.parse_args()
    try:
        worlds = [int(w) for w in args.world.split(",")]
    except ValueError:
        ap.error("--world must be a comma-separated list of numbers, got %r" % args.world)
    if min(worlds) < 1 or args.buckets < 1 or args.rounds < 1 or args.batch < 1 or args.timeout < 1:
        ap.error("--world, --buckets, --rounds, --batch and --timeout must be at least 1")
    if args.matmuls < 0 or args.grad_mb < 0:
        ap.error("--matmuls and --grad-mb must not be negative")
    cfg = {"grad_mb": args.grad_mb, "buckets": args.buckets, "matmuls": args.matmuls, "batch": args.batch,
           "rounds": args.rounds}
    print("| ranks | MB | buckets | compute ms | overlapped ms | overhead ms | raw ms | overhead / raw | serial ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for world in worlds:
        r = run(cfg, world, args.timeout)
        print("| %d | %g | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f |" % (
            world, r["grad_mb"], r["buckets"], r["compute_ms"], r["overlapped_ms"], r["overhead_ms"], r["raw_ms"],
            r["overhead_ms"] / r["raw_ms"] if r["raw_ms"] > 0 else float("nan"), r["serial_ms"]), flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
