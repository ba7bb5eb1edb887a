#!/usr/bin/env python3
"""DistributedDataParallel training steps on tdist, on gloo and with a
communication hook that does nothing, side by side in the same processes.

    tools/measure/ddp_bench.py                                 # the MLP, 2 and 4 ranks
    tools/measure/ddp_bench.py --models mlp,conv,small --world 2,4 --threads 1,2 \\
        --bucket-mb 1,25,100 --gbv on,off              # the whole matrix
    tools/measure/ddp_bench.py --jsonl rows.jsonl --markdown table.md

For each configuration it starts WORLD rank processes on 127.0.0.1. Every rank
builds three copies of the model from one seed: DDP over a tdist group, DDP over
a gloo group and DDP (over gloo) whose communication hook returns the bucket
unreduced ("noop": DDP's bookkeeping plus compute, the floor a backend adds to).
The three take turns: in each of ROUNDS rounds each runs STEPS training steps
back to back on the same per-rank batches, after a barrier, and a round's
figure is the slowest rank's time per step. The table gives medians over the
rounds:

- step (noop, tdist, gloo): milliseconds per training step;
- overhead: what communication adds to a step, the median over the rounds of
  the run's step minus the noop step of the same round;
- raw: the same buckets (their sizes recorded from the noop run's hook)
  all-reduced directly with all_reduce(async_op=True), all issued at once and
  then waited for, in the same processes, milliseconds;
- weights: the final parameters of the tdist run against the gloo run's
  (they must be equal at 2 ranks, and within 1e-5 beyond, where gloo's ring
  adds in another order).

The JSON lines (--jsonl) add each run's CPU time per step on the main thread
(forward, backward, optimizer) and on all other threads (the backend's), and
every round's step times. --trace DIR dumps every rank's flight recorder after
the timed steps, one directory per configuration: tdist-trace on one shows
when each rank entered each bucket's all_reduce.

Models: "mlp", 6 Linear(2048, 2048) layers (25M parameters, 100 MB of
gradients), batch 8; "conv", a four-layer convolutional net on 32x32 images
(0.96M parameters), batch 16; "small", 100 Linear(100, 100) layers (100
weights of 10,000 elements and 100 biases of 100), batch 8.

The table goes to standard output (markdown with --markdown), every row as a
JSON line with --jsonl. Exit status 1 if a run failed or the weights differed.
"""

import argparse
import json
import os
import statistics
import sys
import time

from local_ranks import run_ranks
from step_timing import (add_common_arguments, check_and_record, check_common_arguments, mlp, parse_list, slowest,
                         start_table, summarize, time_rounds, write_markdown)

MODELS = ("mlp", "conv", "small")
RUNS = ("noop", "tdist", "gloo")


# ---- One rank ----

def build_model(name):
    import torch.nn as nn
    if name == "mlp":
        return mlp(nn)
    if name == "conv":
        return nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(256, 10))
    if name == "small":
        layers = []
        for _ in range(100):
            layers += [nn.Linear(100, 100), nn.Tanh()]
        return nn.Sequential(*layers)
    raise SystemExit("unknown model %r" % name)


def batch_for(name, rank, step, torch):
    g = torch.Generator().manual_seed(7919 * rank + step)
    if name == "mlp":
        return torch.randn(8, 2048, generator=g), torch.randn(8, 2048, generator=g)
    if name == "conv":
        return torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
    return torch.randn(8, 100, generator=g), torch.randn(8, 100, generator=g)


def rank_main(cfg):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    import tdist.torch  # noqa: F401  registers "tdist"

    torch.set_num_threads(cfg["threads"])
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    from datetime import timedelta
    dist.init_process_group("tdist", timeout=timedelta(seconds=120))
    groups = {"tdist": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    groups["noop"] = groups["gloo"]
    control = groups["gloo"]  # barriers and the max over ranks

    buckets = []

    def noop_hook(_state, bucket):
        buf = bucket.buffer()
        buckets.append((buf.numel(), buf.dtype))
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut

    ddps = {}
    opts = {}
    for run in RUNS:
        torch.manual_seed(0)
        model = build_model(cfg["model"])
        ddp = DDP(model, process_group=groups[run], bucket_cap_mb=cfg["bucket_mb"],
                  gradient_as_bucket_view=cfg["gbv"])
        if run == "noop":
            ddp.register_comm_hook(None, noop_hook)
        ddps[run] = ddp
        opts[run] = torch.optim.SGD(ddp.parameters(), lr=1e-3)

    loss_fn = F.cross_entropy if cfg["model"] == "conv" else F.mse_loss
    data = [batch_for(cfg["model"], rank, s, torch) for s in range(cfg["steps"])]

    def step(run, x, y):
        if run == "noop":
            buckets.clear()  # the hook records this step's buckets
        opts[run].zero_grad(set_to_none=False)
        loss = loss_fn(ddps[run](x), y)
        loss.backward()
        opts[run].step()

    # Per run and round: wall time per step, and CPU time per step of the
    # main thread (forward, backward, optimizer) and of all other threads
    # (the backend's and torch's), each the slowest rank's.
    wall, main_cpu, other_cpu = time_rounds(RUNS, step, data, cfg["rounds"], cfg["warmup"], dist, torch, control)
    bucket_sizes = list(buckets)  # the last timed noop step's (DDP rebuilds them after its first step)
    if cfg["trace"]:
        # The flight recorder's last calls (the tdist run's bucket all_reduces
        # among them), for tdist-trace.
        from tdist.torch import _plugin
        _plugin._dump_trace(os.path.join(cfg["trace"], "rank%d.json" % rank))

    # The same buckets, all-reduced directly: all issued at once, then waited
    # for.
    raw = {"tdist": [], "gloo": []}
    tensors = [torch.ones(n, dtype=dt) for n, dt in bucket_sizes]
    for i in range(cfg["rounds"]):
        for lib in (("tdist", "gloo") if i % 2 == 0 else ("gloo", "tdist")):
            dist.barrier(group=control)
            start = time.perf_counter()
            works = [dist.all_reduce(t, group=groups[lib], async_op=True) for t in tensors]
            for w in works:
                w.wait()
            raw[lib].append(slowest(time.perf_counter() - start, dist, torch, control))

    params = {run: [p.detach() for p in ddps[run].module.parameters()] for run in ("tdist", "gloo")}
    figures = summarize(wall, main_cpu, other_cpu, "noop", params["tdist"], params["gloo"])
    if rank == 0:
        out = dict(cfg, world=world)
        out.update(figures)
        out.update({
            "tdist_raw_ms": statistics.median(raw["tdist"]) * 1e3, "gloo_raw_ms": statistics.median(raw["gloo"]) * 1e3,
            "buckets": len(bucket_sizes),
            "grad_mb": sum(n * torch.empty(0, dtype=dt).element_size() for n, dt in bucket_sizes) / 1e6,
        })
        print("ROW " + json.dumps(out), flush=True)
    dist.barrier(group=control)
    # torch 1.13's gloo can deadlock when a DDP model is freed at exit (a gloo
    # thread waits for the GIL that ~Reducer holds): leave without freeing.
    sys.stdout.flush()
    os._exit(0)


# ---- The driver ----

def run_config(cfg, world, timeout):
    return run_ranks(__file__, cfg, world, timeout, env={"OMP_NUM_THREADS": str(cfg["threads"])})


def on_off(text):
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError("expected on or off, got %r" % text)
    return text == "on"


HEADER = ("| model | ranks | threads | bucket MB | gbv | noop ms | tdist ms | gloo ms | tdist overhead ms "
          "| tdist raw ms | overhead / raw | gloo overhead ms | gloo raw ms | gloo / tdist | weights |")


def table_row(r):
    ratio = r["tdist_overhead_ms"] / r["tdist_raw_ms"] if r["tdist_raw_ms"] > 0 else float("nan")
    weights = "equal" if r["weights_equal"] else "max diff %.1e" % r["weights_max_diff"]
    return ("| %s | %d | %d | %g | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %s |" % (
        r["model"], r["world"], r["threads"], r["bucket_mb"], "on" if r["gbv"] else "off", r["noop_ms"],
        r["tdist_ms"], r["gloo_ms"], r["tdist_overhead_ms"], r["tdist_raw_ms"], ratio, r["gloo_overhead_ms"],
        r["gloo_raw_ms"], r["gloo_ms"] / r["tdist_ms"], weights))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--rank-config":
        rank_main(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=lambda s: parse_list(s, str, MODELS), default=["mlp"])
    ap.add_argument("--bucket-mb", type=lambda s: parse_list(s, float), default=[25.0])
    ap.add_argument("--gbv", type=lambda s: parse_list(s, on_off), default=[False],
                    help="gradient_as_bucket_view: on, off or on,off")
    ap.add_argument("--trace", metavar="DIR",
                    help="dump every rank's flight recorder to DIR/rank<R>.json after the timed steps "
                         "(read them with tdist-trace)")
    add_common_arguments(ap)
    args = ap.parse_args()
    check_common_arguments(ap, args)
    if min(args.bucket_mb) <= 0:
        ap.error("--bucket-mb: bucket sizes must be positive")
    started = start_table(HEADER)
    lines, bad = [], 0
    for model in args.models:
        for world in args.world:
            for threads in args.threads:
                for bucket in args.bucket_mb:
                    for gbv in args.gbv:
                        cfg = {"model": model, "threads": threads, "bucket_mb": bucket, "gbv": gbv,
                               "steps": args.steps, "rounds": args.rounds, "warmup": args.warmup,
                               "trace": None}
                        if args.trace:
                            cfg["trace"] = os.path.join(os.path.abspath(args.trace), "%s-%dranks-%dthreads-%gMB-gbv%s" % (
                                model, world, threads, bucket, "on" if gbv else "off"))
                            os.makedirs(cfg["trace"], exist_ok=True)
                        row, why = run_config(cfg, world, args.timeout)
                        if row is None:
                            bad += 1
                            print("ddp_bench: %s, %d ranks, %d threads, %g MB, gbv %s failed: %s" % (
                                model, world, threads, bucket, gbv, why), file=sys.stderr, flush=True)
                            continue
                        what = "%s, %d ranks, %d threads, %g MB, gbv %s" % (model, world, threads, bucket, gbv)
                        bad += not check_and_record("ddp_bench", what, row, world, started, table_row, lines,
                                                    args.jsonl)
    if args.markdown:
        write_markdown(args.markdown, HEADER, lines)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
