#!/usr/bin/env python3
"""FSDP2 (torch.distributed.fsdp.fully_shard) training steps on tdist and on
gloo, side by side in the same processes, with the unsharded model's step as
the floor.

    tools/measure/fsdp_bench.py                                   # both models, 2 and 4 ranks
    tools/measure/fsdp_bench.py --models mlp --world 2 --threads 1,2 --rounds 7
    tools/measure/fsdp_bench.py --jsonl rows.jsonl --markdown table.md

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
import sys

from local_ranks import run_ranks
from step_timing import (add_common_arguments, check_and_record, check_common_arguments, mlp, parse_list, start_table,
                         summarize, time_rounds, write_markdown)

MODELS = ("mlp", "transformer")
RUNS = ("local", "tdist", "gloo")


# ---- One rank ----

def build_model(name, torch):
    nn = torch.nn
    if name == "mlp":
        return mlp(nn)
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

    wall, main_cpu, other_cpu = time_rounds(RUNS, step, data, cfg["rounds"], cfg["warmup"], dist, torch, control)

    params = {run: [p.detach().full_tensor() for p in models[run].parameters()] for run in ("tdist", "gloo")}
    figures = summarize(wall, main_cpu, other_cpu, "local", params["tdist"], params["gloo"])
    if rank == 0:
        out = dict(cfg, world=dist.get_world_size(), params_m=sum(p.numel() for p in params["tdist"]) / 1e6)
        out.update(figures)
        print("ROW " + json.dumps(out), flush=True)
    dist.barrier(group=control)
    sys.stdout.flush()
    dist.destroy_process_group()


# ---- The driver ----

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
    add_common_arguments(ap)
    args = ap.parse_args()
    check_common_arguments(ap, args)
    started = start_table(HEADER)
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
                what = "%s, %d ranks, %d threads" % (model, world, threads)
                bad += not check_and_record("fsdp_bench", what, row, world, started, table_row, lines, args.jsonl)
    if args.markdown:
        write_markdown(args.markdown, HEADER, lines)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
