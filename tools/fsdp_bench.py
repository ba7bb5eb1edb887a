#!/usr/bin/env python3
"""FSDP2 (torch.distributed.fsdp.fully_shard) training steps on tdist and on
gloo, side by side in the same processes, with the unsharded model's step as
the floor.

    tools/fsdp_bench.py                                   # both models, 2 and 4 ranks
    tools/fsdp_bench.py --models mlp --world 2 --threads 1,2 --rounds 7
    tools/fsdp_bench.py --jsonl rows.jsonl --markdown table.md

For each configuration it starts WORLD rank processes on 127.0.0.1. Every rank
builds three copies of the model from one seed: one sharded by fully_shard
over a DeviceMesh of a tdist group (each layer, then the root), one the same
over a gloo group, and a plain unsharded copy ("local": the compute alone,
with no communication and none of FSDP's bookkeeping, the floor). The three
take turns: in each of ROUNDS rounds each runs STEPS training steps back to
back on the same per-rank batches, after a barrier, and a round's figure is
the slowest rank's time per step. The table gives medians over the rounds:

- step (local, tdist, gloo): milliseconds per training step;
- overhead: the step minus the local step of the same round;
- weights: the final parameters of the tdist run against the gloo run's
  (equal at 2 ranks, within 1e-5 beyond, where gloo adds in another order).

FSDP2 all-gathers each layer's parameters in the forward pass and again in
the backward pass (reshard_after_forward=True, the default) and
reduce-scatters its gradients in the backward pass, prefetching the next
layer's all-gather while the current one computes.

Models: "mlp", 6 Linear(2048, 2048) layers with ReLU (25M parameters), batch
8; "transformer", 4 nn.TransformerEncoderLayer(512, 8 heads, 2048 wide,
batch_first) on a batch of 8 sequences of 64 tokens (12.6M parameters).

The JSON lines (--jsonl) add each run's CPU time per step on the main thread
and on all other threads, and every round's step times. Exit status 1 if a
run failed or the weights differed.
"""

import argparse
import json
import os
import statistics
import sys
import time

from local_ranks import run_ranks

MODELS = ("mlp", "transformer")
RUNS = ("local", "tdist", "gloo")


# ---- One rank ----

def build_model(name, torch):
    nn = torch.nn
    if name == "mlp":
        layers = []
        for i in range(6):
            layers.append(nn.Linear(2048, 2048))
            if i < 5:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)
    if name == "transformer":
        return nn.Sequential(*[nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
                               for _ in range(4)])
    raise SystemExit("unknown model %r" % name)


def batch_for(name, rank, step, torch):
    g = torch.Generator().manual_seed(7919 * rank + step)
    if name == "mlp":
        return torch.randn(8, 2048, generator=g), torch.randn(8, 2048, generator=g)
    return torch.randn(8, 64, 512, generator=g), torch.randn(8, 64, 512, generator=g)


def rank_main(cfg):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    import tdist.torch  # noqa: F401  registers "tdist"

    torch.set_num_threads(cfg["threads"])
    rank = int(os.environ["RANK"])
    dist.init_process_group("tdist", timeout=timedelta(seconds=120))
    groups = {"tdist": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    control = groups["gloo"]  # barriers and the max over ranks

    models, opts = {}, {}
    for run in RUNS:
        torch.manual_seed(0)
        model = build_model(cfg["model"], torch)
        if run != "local":
            mesh = DeviceMesh.from_group(groups[run], "cpu")
            for layer in model:
                if any(p.requires_grad for p in layer.parameters()):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
        models[run] = model
        opts[run] = torch.optim.SGD(model.parameters(), lr=1e-3)

    data = [batch_for(cfg["model"], rank, s, torch) for s in range(cfg["steps"])]

    def step(run, x, y):
        opts[run].zero_grad(set_to_none=False)
        loss = F.mse_loss(models[run](x), y)
        loss.backward()
        opts[run].step()

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control)
        return float(t[0])

    for run in RUNS:  # warm-up, untimed
        for s in range(cfg["warmup"]):
            step(run, *data[s % len(data)])
    wall = {run: [] for run in RUNS}
    main_cpu = {run: [] for run in RUNS}
    other_cpu = {run: [] for run in RUNS}
    for i in range(cfg["rounds"]):
        # The order rotates so that drift and what one run leaves in the
        # caches weigh on all three alike.
        for run in RUNS[i % len(RUNS):] + RUNS[:i % len(RUNS)]:
            dist.barrier(group=control)
            start, process0, thread0 = time.perf_counter(), time.process_time(), time.thread_time()
            for x, y in data:
                step(run, x, y)
            elapsed = time.perf_counter() - start
            thread = time.thread_time() - thread0
            process = time.process_time() - process0
            n = len(data)
            wall[run].append(slowest(elapsed) / n)
            main_cpu[run].append(slowest(thread) / n)
            other_cpu[run].append(slowest(process - thread) / n)

    params = {run: [p.detach().full_tensor() for p in models[run].parameters()] for run in ("tdist", "gloo")}
    diff = max(float((a - b).abs().max()) for a, b in zip(params["tdist"], params["gloo"]))
    if rank == 0:
        def ms(values):
            return statistics.median(values) * 1e3

        def overhead(run):
            return ms([t - n for t, n in zip(wall[run], wall["local"])])

        out = dict(cfg)
        out.update({
            "world": dist.get_world_size(),
            "local_ms": ms(wall["local"]), "tdist_ms": ms(wall["tdist"]), "gloo_ms": ms(wall["gloo"]),
            "tdist_overhead_ms": overhead("tdist"), "gloo_overhead_ms": overhead("gloo"),
            "params_m": sum(p.numel() for p in params["tdist"]) / 1e6,
            "weights_equal": diff == 0.0, "weights_max_diff": diff,
            "main_cpu_ms": {run: ms(v) for run, v in main_cpu.items()},
            "other_cpu_ms": {run: ms(v) for run, v in other_cpu.items()},
            "rounds_ms": {run: [round(t * 1e3, 2) for t in v] for run, v in wall.items()},
        })
        print("ROW " + json.dumps(out), flush=True)
    dist.barrier(group=control)
    sys.stdout.flush()
    dist.destroy_process_group()


# ---- The driver ----

def parse_list(text, conv, allowed=None):
    items = [conv(x) for x in text.split(",") if x]
    if not items:
        raise argparse.ArgumentTypeError("empty list")
    for item in items:
        if allowed is not None and item not in allowed:
            raise argparse.ArgumentTypeError("%r is not one of %s" % (item, ", ".join(map(str, allowed))))
    return items


HEADER = ("| model | ranks | threads | local ms | tdist ms | gloo ms | tdist overhead ms | gloo overhead ms "
          "| gloo / tdist | weights |")


def table_row(r):
    weights = "equal" if r["weights_equal"] else "max diff %.1e" % r["weights_max_diff"]
    return "| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %s |" % (
        r["model"], r["world"], r["threads"], r["local_ms"], r["tdist_ms"], r["gloo_ms"],
        r["tdist_overhead_ms"], r["gloo_overhead_ms"], r["gloo_ms"] / r["tdist_ms"], weights)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--rank-config":
        rank_main(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=lambda s: parse_list(s, str, MODELS), default=list(MODELS))
    ap.add_argument("--world", type=lambda s: parse_list(s, int), default=[2, 4])
    ap.add_argument("--threads", type=lambda s: parse_list(s, int), default=[1],
                    help="compute threads per rank (torch.set_num_threads)")
    ap.add_argument("--steps", type=int, default=5, help="steps each run takes back to back in a round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the figures are their medians")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--timeout", type=int, default=900, help="seconds allowed for each configuration")
    ap.add_argument("--jsonl", help="append every row to this file as a JSON line")
    ap.add_argument("--markdown", help="write the table to this file")
    args = ap.parse_args()
    if args.steps < 1 or args.rounds < 1 or args.warmup < 1 or args.timeout < 1:
        ap.error("--steps, --rounds, --warmup and --timeout must be at least 1")
    if min(args.threads) < 1:
        ap.error("--threads: at least 1 compute thread")
    if min(args.world) < 1:
        ap.error("--world: ranks must be at least 1")

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1), flush=True)
    lines, bad = [], 0
    for model in args.models:
        for world in args.world:
            for threads in args.threads:
                cfg = {"model": model, "threads": threads, "steps": args.steps, "rounds": args.rounds,
                       "warmup": args.warmup}
                row, why = run_ranks(__file__, cfg, world, args.timeout, env={"OMP_NUM_THREADS": str(threads)})
                if row is None:
                    bad += 1
                    print("fsdp_bench: %s, %d ranks, %d threads failed: %s" % (model, world, threads, why),
                          file=sys.stderr, flush=True)
                    continue
                tol = 0.0 if world <= 2 else 1e-5
                if not row["weights_max_diff"] <= tol:  # NaN fails too
                    bad += 1
                    print("fsdp_bench: %s, %d ranks: the tdist run's weights differ from gloo's by %g (allowed: %g)"
                          % (model, world, row["weights_max_diff"], tol), file=sys.stderr, flush=True)
                row["started"] = started
                lines.append(table_row(row))
                print(lines[-1], flush=True)
                if args.jsonl:
                    with open(args.jsonl, "a") as f:
                        f.write(json.dumps(row) + "\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(HEADER + "\n" + "|" + "---|" * (HEADER.count("|") - 1) + "\n" + "\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
