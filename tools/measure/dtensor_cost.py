#!/usr/bin/env python3
"""What a DTensor redistribution costs against the bare collective that
moves the same bytes, on a 1-d mesh of all ranks (docs/mesh.md):

    python3 -m tdist.run --standalone --nproc-per-node 4 tools/measure/dtensor_cost.py [--sizes 0.004,1,16] [--reps 15]

Rows: Shard(0) -> Replicate against all_gather_into_tensor, Partial ->
Replicate against an in-place all_reduce (redistribute leaves its input as it
was, so it first copies it), Shard(0) -> Shard(1) (one all_to_all). Each
figure is the median over --reps calls, every call started after a barrier,
in milliseconds, as rank 0 sees it.
"""

import argparse
import time

import numpy as np

import tdist
from tdist.tensor import Partial, Replicate, Shard, distribute_tensor


def median_ms(fn, reps):
    times = []
    for _ in range(reps):
        tdist.barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[len(times) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.004,1,16", help="MiB per tensor, comma-separated")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    tdist.init_process_group("tdist")
    mesh = tdist.init_device_mesh("cpu", (tdist.get_world_size(),))
    if tdist.get_rank() == 0:
        print("| MiB | S0->R | all_gather | P->R | all_reduce | S0->S1 |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for mib in (float(s) for s in args.sizes.split(",")):
        rows = max(4, int(mib * 2 ** 20 / 4 / 256))
        x = np.ones((rows, 256), np.float32)
        sharded = distribute_tensor(x, mesh, [Shard(0)])
        partial = distribute_tensor(x, mesh, [Partial()])
        out, block, buf = np.empty_like(x), np.ascontiguousarray(sharded.to_local()), x.copy()
        figures = [
            median_ms(lambda: sharded.redistribute(mesh, [Replicate()]), args.reps),
            median_ms(lambda: tdist.all_gather_into_tensor(out, block), args.reps),
            median_ms(lambda: partial.redistribute(mesh, [Replicate()]), args.reps),
            median_ms(lambda: tdist.all_reduce(buf), args.reps),
            median_ms(lambda: sharded.redistribute(mesh, [Shard(1)]), args.reps),
        ]
        if tdist.get_rank() == 0:
            print(f"| {x.nbytes / 2 ** 20:.3f} | " + " | ".join(f"{f:.3f}" for f in figures) + " |")
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
