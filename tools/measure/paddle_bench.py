"""paddle's collectives on tdist.paddle against paddle's own paddle.distributed
(its CPU backend, gloo), in the same run, on paddle tensors.

Each (library, world size) runs as its own job, started by that library's
launcher (python3 -m tdist.paddle.launch / python3 -m paddle.distributed.launch),
rounds alternating between libraries. Every figure is the median over rounds
of rank 0's mean time per call (`iters` back-to-back calls between two
barriers); an op paddle's CPU backend refuses (alltoall: "ProcessGroupGLOO
does not support all_to_all") shows as not supported. Bytes are per rank: all_reduce and broadcast move a tensor of
that size, all_gather gathers one of that size from every rank, alltoall
sends that many bytes in all, split evenly among the ranks.

usage: PYTHONPATH=build/python .venv/bin/python tools/measure/paddle_bench.py
           [--world 2,4] [--sizes 8,1048576,67108864] [--ops all_reduce,all_gather,broadcast,alltoall]
           [--rounds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

OPS = ["all_reduce", "all_gather", "broadcast", "alltoall"]


def _iters(nbytes):
    return 300 if nbytes <= 4096 else 20 if nbytes <= (1 << 21) else 3


def worker(library, ops, sizes, out_path):
    import paddle
    if library == "tdist":
        import tdist.paddle as dist
    else:
        import paddle.distributed as dist

    paddle.set_device("cpu")
    dist.init_parallel_env()
    world, rank = dist.get_world_size(), dist.get_rank()

    def call_of(op, nbytes):
        count = max(1, nbytes // 4)
        if op == "all_reduce":
            t = paddle.ones([count], "float32")
            return lambda: dist.all_reduce(t)
        if op == "broadcast":
            t = paddle.ones([count], "float32")
            return lambda: dist.broadcast(t, src=0)
        if op == "all_gather":
            t = paddle.ones([count], "float32")
            outs = [paddle.empty([count], "float32") for _ in range(world)]
            return lambda: dist.all_gather(outs, t)
        piece = max(1, count // world)
        ins = [paddle.ones([piece], "float32") for _ in range(world)]
        outs = [paddle.empty([piece], "float32") for _ in range(world)]
        return lambda: dist.alltoall(outs, ins)

    rows = []
    for op in ops:
        for nbytes in sizes:
            call = call_of(op, nbytes)
            iters = _iters(nbytes)
            try:
                call()
            except NotImplementedError:  # paddle's gloo has no all_to_all; every rank raises
                rows.append({"op": op, "bytes": nbytes, "us": None})
                continue
            for _ in range(min(iters, 10)):
                call()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                call()
            dist.barrier()
            rows.append({"op": op, "bytes": nbytes, "us": (time.perf_counter() - start) / iters * 1e6})
            del call
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)


def run_job(library, world, ops, sizes):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        launcher = "tdist.paddle.launch" if library == "tdist" else "paddle.distributed.launch"
        cmd = [sys.executable, "-m", launcher, "--nproc_per_node", str(world)]
        if library == "paddle":
            cmd += ["--log_dir", os.path.join(tmp, "log")]
        cmd += [os.path.abspath(__file__), "--worker", library, ",".join(ops), ",".join(map(str, sizes)), out]
        # Absolute paths: the job runs in `tmp`, where a relative PYTHONPATH
        # entry (build/python) would miss, and an installed tdist be used.
        path = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env, cwd=tmp)
        if result.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"{library} at {world} ranks failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
        with open(out) as f:
            return {(r["op"], r["bytes"]): r["us"] for r in json.load(f)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--world", default="2,4")
    ap.add_argument("--sizes", default="8,1048576,67108864")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.worker:
        library, ops, sizes, out = args.worker
        worker(library, ops.split(","), [int(s) for s in sizes.split(",")], out)
        return
    ops = args.ops.split(",")
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        ap.error(f"--ops: {unknown} are not among {OPS}")
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| op | ranks | bytes | tdist.paddle (us) | paddle, gloo (us) | paddle / tdist |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for world in [int(w) for w in args.world.split(",")]:
        runs = {"tdist": [], "paddle": []}
        for _ in range(args.rounds):
            for library in runs:
                runs[library].append(run_job(library, world, ops, sizes))
        for op in ops:
            for n in sizes:
                t = statistics.median(r[(op, n)] for r in runs["tdist"])
                if any(r[(op, n)] is None for r in runs["paddle"]):
                    print(f"| {op} | {world} | {n:,} | {t:,.1f} | not supported | |", flush=True)
                    continue
                p = statistics.median(r[(op, n)] for r in runs["paddle"])
                print(f"| {op} | {world} | {n:,} | {t:,.1f} | {p:,.1f} | {p / t:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
