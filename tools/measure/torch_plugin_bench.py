"""all_reduce through torch.distributed on backend "tdist" against torch's
gloo in the same run, and against the dispatch floor: a 1-rank gloo group,
where the call moves nothing and costs only torch's Python and dispatcher.

Each (backend, world size) runs as its own job of local processes, rounds
alternating between backends, and reports the median over rounds of rank
0's mean time per call (`iters` back-to-back calls between two barriers).

usage: PYTHONPATH=build/python .venv/bin/python tools/measure/torch_plugin_bench.py
           [--world 2,4] [--sizes 8,1048576,67108864] [--rounds 3]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iters(nbytes):
    return 2000 if nbytes <= 4096 else 50 if nbytes <= (1 << 21) else 5


def worker(backend, sizes):
    import torch
    import torch.distributed as dist

    import tdist.torch  # noqa: F401 - registers "tdist"

    torch.set_num_threads(1)
    dist.init_process_group(backend)
    rows = []
    for nbytes in sizes:
        t = torch.ones(max(1, nbytes // 4))
        iters = _iters(nbytes)
        for _ in range(min(iters, 20)):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dist.barrier()
        rows.append({"bytes": nbytes, "us": (time.perf_counter() - start) / iters * 1e6})
    if dist.get_rank() == 0:
        print(json.dumps(rows))
    dist.destroy_process_group()


def run_job(backend, world, sizes):
    port = _free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", backend, ",".join(map(str, sizes))],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    out = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{backend} at {world} ranks failed: exit codes {[p.returncode for p in procs]}")
    return {r["bytes"]: r["us"] for r in json.loads(out[0].strip().splitlines()[-1])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--world", default="2,4")
    ap.add_argument("--sizes", default="8,1048576,67108864")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], [int(s) for s in args.worker[1].split(",")])
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    floor = [run_job("gloo", 1, sizes) for _ in range(args.rounds)]
    floor = {n: statistics.median(r[n] for r in floor) for n in sizes}
    print("| ranks | bytes | tdist (us) | gloo (us) | gloo / tdist | floor: 1-rank gloo (us) | tdist / floor |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for world in [int(w) for w in args.world.split(",")]:
        runs = {"tdist": [], "gloo": []}
        for _ in range(args.rounds):
            for backend in runs:
                runs[backend].append(run_job(backend, world, sizes))
        for n in sizes:
            t = statistics.median(r[n] for r in runs["tdist"])
            g = statistics.median(r[n] for r in runs["gloo"])
            print(f"| {world} | {n:,} | {t:,.1f} | {g:,.1f} | {g / t:.2f}x | {floor[n]:,.1f} | {t / floor[n]:.2f}x |")


if __name__ == "__main__":
    main()
