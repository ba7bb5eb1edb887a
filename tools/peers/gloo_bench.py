"""Peer benchmark for tools/compare: torch.distributed's Gloo backend.

One process per rank, started with MASTER_ADDR, MASTER_PORT, RANK and
WORLD_SIZE set (tools/compare does that). Measures each op the way
tdist-bench does (same buffer sizes, warmup, `iters` back-to-back calls
between two barriers, mean time on rank 0) and prints, on rank 0, one JSON
object per row with tdist-bench's keys and "lib": "gloo"; "errors" counts the
wrong elements --check found over all ranks (0 without --check). An op Gloo
does not support (reduce_scatter in torch 1.13) is reported on stderr and
skipped.

usage: gloo_bench.py --ops all_reduce,all_gather --sizes 8,1048576 [--iters N] [--warmup N] [--check]
"""
import argparse
import json
import sys
import time

import torch
import torch.distributed as dist

BUS_FACTOR = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,
    "gather": lambda p: (p - 1) / p,
    "scatter": lambda p: (p - 1) / p,
    "sendrecv": lambda p: 1.0,
    "barrier": lambda p: 0.0,
}
# Ops whose buffer is split across ranks: nccl-tests (and tdist-bench) round
# the element count down to a multiple of the world size.
SPLIT = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}
ELEM = 4  # float32


class Op:
    """The buffers of one op at one size, one call, and the check."""

    def __init__(self, name, count, rank, world):
        self.name, self.c, self.rank, self.p = name, count, rank, world
        self.next, self.prev = (rank + 1) % world, (rank - 1) % world
        n_in, n_out = {
            "all_reduce": (count, 0), "broadcast": (count, 0), "reduce": (count, 0),
            "sendrecv": (count, count), "all_gather": (count, count * world),
            "gather": (count, count * world if rank == 0 else 0),
            "reduce_scatter": (count * world, count), "scatter": (count * world if rank == 0 else 0, count),
            "all_to_all": (count * world, count * world), "barrier": (0, 0),
        }[name]
        self.inp = torch.zeros(n_in, dtype=torch.float32)
        self.out = torch.zeros(n_out, dtype=torch.float32)
        # gather's outputs on the root and all_gather's everywhere: views of
        # `out`, so the list forms of the ops fill the one buffer.
        gathers = name == "all_gather" or (name == "gather" and rank == 0)
        self.out_list = list(self.out.split(count)) if gathers else None
        self.in_list = list(self.inp.split(count)) if name == "scatter" and rank == 0 else None

    def run(self):
        n = self.name
        if n == "all_reduce":
            dist.all_reduce(self.inp)
        elif n == "broadcast":
            dist.broadcast(self.inp, 0)
        elif n == "reduce":
            dist.reduce(self.inp, 0)
        elif n == "all_gather":
            # Gloo in torch 1.13 lacks all_gather_into_tensor (_allgather_base);
            # the list form into views of one buffer moves the same bytes.
            dist.all_gather(self.out_list, self.inp)
        elif n == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.inp)
        elif n == "all_to_all":
            dist.all_to_all_single(self.out, self.inp)
        elif n == "gather":
            dist.gather(self.inp, self.out_list, dst=0)
        elif n == "scatter":
            dist.scatter(self.out, self.in_list, src=0)
        elif n == "sendrecv":
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, self.out, self.prev),
                                            dist.P2POp(dist.isend, self.inp, self.next)])
            for w in works:
                w.wait()
        elif n == "barrier":
            dist.barrier()

    # Small whole numbers, exact in float32 whatever the summation order.
    def check(self):
        n, r, p, c = self.name, self.rank, self.p, self.c
        idx = lambda k: torch.arange(k, dtype=torch.float32)
        if n in ("all_reduce", "reduce"):
            self.inp.copy_((r + 1) * (idx(c) % 7 + 1))
            expected, got = p * (p + 1) / 2 * (idx(c) % 7 + 1), self.inp
            if n == "reduce" and r != 0:  # only the root's buffer is specified after reduce
                expected, got = torch.zeros(0), torch.zeros(0)
        elif n == "reduce_scatter":
            self.inp.copy_((r + 1) * (idx(c * p) % 7 + 1))
            expected, got = p * (p + 1) / 2 * ((idx(c) + r * c) % 7 + 1), self.out
        elif n == "broadcast":
            self.inp.copy_(idx(c) % 1000 if r == 0 else torch.full((c,), -1.0))
            expected, got = idx(c) % 1000, self.inp
        elif n in ("all_gather", "gather"):
            self.inp.copy_(r * 1000 + idx(c) % 1000)
            self.out.fill_(-1)
            src = torch.arange(p, dtype=torch.float32).repeat_interleave(c)
            expected, got = src * 1000 + idx(c * p) % c % 1000, self.out
            if n == "gather" and r != 0:
                expected, got = torch.zeros(0), torch.zeros(0)
        elif n == "scatter":
            if r == 0:
                dst = torch.arange(p, dtype=torch.float32).repeat_interleave(c)
                self.inp.copy_(dst * 1000 + idx(c * p) % c % 1000)
            self.out.fill_(-1)
            expected, got = r * 1000 + idx(c) % 1000, self.out
        elif n == "all_to_all":
            block = torch.arange(p, dtype=torch.float32).repeat_interleave(c)  # receiver, then sender
            self.inp.copy_((r * p + block) * 16 + idx(c * p) % c % 16)
            self.out.fill_(-1)
            expected, got = (block * p + r) * 16 + idx(c * p) % c % 16, self.out
        elif n == "sendrecv":
            self.inp.copy_(r * 1000 + idx(c) % 1000)
            self.out.fill_(-1)
            expected, got = self.prev * 1000 + idx(c) % 1000, self.out
        else:
            return 0
        self.run()
        wrong = torch.tensor([int((got != expected).sum())], dtype=torch.int64)
        self.inp.zero_()
        self.out.zero_()
        dist.all_reduce(wrong)
        return int(wrong.item())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="all_reduce")
    ap.add_argument("--sizes", default="8,1024,65536,1048576")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for name in args.ops.split(","):
        if name not in BUS_FACTOR:
            sys.exit(f"gloo_bench.py: unknown op {name}")
        if name == "sendrecv" and world < 2:
            continue
        sizes = [0] if name == "barrier" else [int(s) for s in args.sizes.split(",")]
        for requested in sizes:
            count = requested // ELEM // (world if name in SPLIT else 1)
            nbytes = count * ELEM * (world if name in SPLIT else 1)
            if name != "barrier" and nbytes == 0:
                continue
            op = Op(name, count, rank, world)
            try:
                # 0 without --check, as tdist-bench prints (docs/benchmark.md).
                errors = op.check() if args.check else 0
                for _ in range(args.warmup):
                    op.run()
            except RuntimeError as e:  # the op is not supported by ProcessGroupGloo
                if rank == 0:
                    print(f"gloo_bench.py: {name}: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
                break
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                op.run()
            dist.barrier()
            dt = (time.perf_counter() - t0) / args.iters
            algbw = nbytes / dt / 1e9
            if rank == 0:
                print(json.dumps({"lib": "gloo", "op": name, "dtype": "float32", "world_size": world,
                                  "bytes": nbytes, "time_us": round(dt * 1e6, 3),
                                  "algbw_GBps": float(f"{algbw:.6g}"),
                                  "busbw_GBps": float(f"{algbw * BUS_FACTOR[name](world):.6g}"),
                                  "errors": errors}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
