#!/usr/bin/env python3
"""The figures behind the shared-memory thresholds of docs/tuning.md.

For each threshold, runs tdist-bench at sizes on both sides of it with the
choice left to tdist ("chosen", and the algorithm it named) and with each
alternative forced through the variables that override the choice, in
alternating runs; prints the median time of each as a Markdown table.

    python3 tools/measure/tuning_figures.py [--build build] [--runs 5] [--only single_copy,ring,streaming]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

KiB, MiB = 1024, 1024 * 1024
BIG = str(1 << 50)

# (group, op, ranks, sizes, {variant: environment})
SINGLE_COPY = {"off": {"TDIST_SHM_SINGLE_COPY": "0"},
               "forced": {"TDIST_SHM_SINGLE_COPY_MIN_BYTES": "0", "TDIST_SHM_SINGLE_COPY_MAX_BYTES": BIG}}
RING = {"no ring": {"TDIST_SHM_RING_BYTES": BIG, "TDIST_SHM_SINGLE_COPY": "0"},
        "ring": {"TDIST_SHM_RING_BYTES": "1", "TDIST_SHM_SINGLE_COPY": "0"}}
# (0 turns streaming off; 1 streams every output.)
STREAMING = {"cached": {"TDIST_SHM_STREAMING_BYTES": "0"}, "streamed": {"TDIST_SHM_STREAMING_BYTES": "1"}}
CASES = [
    ("single_copy", op, ranks, [64 * KiB, MiB, 16 * MiB], SINGLE_COPY)
    for op in ("all_reduce", "broadcast", "all_gather", "all_to_all", "scatter") for ranks in (2, 4)
] + [
    ("ring", op, ranks, [512 * KiB, MiB, 8 * MiB, 64 * MiB], RING)
    for op in ("broadcast", "all_gather") for ranks in (2, 4)
] + [
    ("streaming", op, 2, [16 * MiB, 64 * MiB], STREAMING) for op in ("broadcast", "all_gather", "all_to_all")
]


def bench(build, op, ranks, size, env, iters):
    # Under tdistrun, which binds ranks that do not outnumber the CPUs to
    # one each: forked by tdist-bench --nproc, two ranks shared one core in
    # about a third of the runs here (a 1 KiB all_reduce 8.8 us, not 0.4).
    cmd = [os.path.join(build, "bin", "tdistrun"), "--standalone", "--nproc-per-node", str(ranks),
           os.path.join(build, "bin", "tdist-bench"), "--op", op, "-b", str(size), "-e", str(size), "-n", str(iters),
           "-w", str(max(2, iters // 10)), "--json"]
    out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=600, check=True)
    rows = [l.split(": ", 1)[1] for l in out.stdout.splitlines() if l.startswith("[rank 0]: {")]
    row = json.loads(rows[-1])
    return row["time_us"], row.get("algorithm", "-")


def fmt(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"


def size_text(n):
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5, help="alternating runs per variant (median)")
    ap.add_argument("--only", default="", help="comma-separated groups: single_copy, ring, streaming")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    print("| threshold | op | ranks | bytes | chosen | " + " | ".join(["alternative A", "alternative B"]) + " |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for group, op, ranks, sizes, variants in CASES:
        if only and group not in only:
            continue
        for size in sizes:
            iters = 200 if size <= MiB else 20
            runs = {"chosen": []}
            runs.update({name: [] for name in variants})
            algorithm = "-"
            for _ in range(args.runs):  # alternating, so that drift favours none
                t, algorithm = bench(args.build, op, ranks, size, {}, iters)
                runs["chosen"].append(t)
                for name, env in variants.items():
                    runs[name].append(bench(args.build, op, ranks, size, env, iters)[0])
            cells = [f"{fmt(statistics.median(runs['chosen']))} ({algorithm})"]
            cells += [f"{name}: {fmt(statistics.median(runs[name]))}" for name in variants]
            print(f"| {group} | {op} | {ranks} | {size_text(size)} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
