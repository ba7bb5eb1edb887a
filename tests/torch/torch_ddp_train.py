"""One rank of the DistributedDataParallel test: trains a small MLP for a few
steps on fixed per-rank data, once on backend "tdist" and once on "gloo"
(each a fresh default group), and prints the final parameters of both runs
plus those of a single-process reference that averages the ranks' gradients
itself. Prints one line per variant as it ends: "RESULT <hook> <JSON object>".

    torch_ddp_train.py PORT,PORT,... HOOK[,HOOK...]

Each HOOK is a variant trained in turn in this process, on two ports of its
own (tdist's, then gloo's): "none" (DDP's own all_reduce), or a DDP
communication hook registered in both runs: "allreduce" (torch's
default_hooks.allreduce_hook) or "powersgd" (PowerSGD, whose callbacks wait
for further collectives inside a future's then(): they must not run on
tdist's worker thread).
"""

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import tdist.torch  # noqa: F401  registers "tdist"

STEPS = 6
BATCH = 5


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batches(rank):
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(STEPS)]


# torch 1.13's gloo can deadlock when a DDP model with a PowerSGD hook is
# freed: ~Reducer (holding the GIL) destroys ProcessGroupGloo, which joins a
# gloo worker thread that is freeing a tensor with a Python object and waits
# for the GIL (seen in gdb). The gloo runs' models are therefore kept alive
# and the process ends with os._exit once its results are printed.
_keep_gloo_alive = []


def register_hook(ddp, hook):
    if hook == "allreduce":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "powersgd":
        # Compress from the third step on, every tensor (min_compression_rate=0).
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, min_compression_rate=0)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    elif hook != "none":
        raise SystemExit("unknown hook %r" % hook)


def train_ddp(backend, port, rank, world_size, hook):
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    # A different initialisation per rank: DDP must broadcast rank 0's.
    model = make_model(seed=rank)
    # A tiny bucket size splits the gradients into several buckets, so
    # several all_reduces are in flight at once.
    ddp = DDP(model, bucket_cap_mb=0.0005)
    register_hook(ddp, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches(rank):
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    params = [p.detach().clone() for p in model.parameters()]
    if backend == "gloo":
        _keep_gloo_alive.append(ddp)
    dist.barrier()
    dist.destroy_process_group()
    return params


def train_reference(world_size):
    """Plain single-process training with the gradients of all ranks'
    batches averaged here (the summation order differs from any backend's)."""
    model = make_model(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = [batches(r) for r in range(world_size)]
    for step in range(STEPS):
        grads = []
        for r in range(world_size):
            model.zero_grad()
            x, y = data[r][step]
            ((model(x) - y) ** 2).mean().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / world_size
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def main():
    ports = [int(p) for p in sys.argv[1].split(",")]
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    hooks = sys.argv[2].split(",")
    assert len(ports) == 2 * len(hooks), (ports, hooks)
    reference = [p.tolist() for p in train_reference(world_size)]
    for i, hook in enumerate(hooks):
        print("START %s" % hook, flush=True)
        on_tdist = train_ddp("tdist", ports[2 * i], rank, world_size, hook)
        on_gloo = train_ddp("gloo", ports[2 * i + 1], rank, world_size, hook)
        print("RESULT %s %s" % (hook, json.dumps({
            "tdist": [p.tolist() for p in on_tdist],
            "gloo": [p.tolist() for p in on_gloo],
            "reference": reference,
            "bitwise_equal_to_gloo": all(torch.equal(a, b) for a, b in zip(on_tdist, on_gloo)),
            "max_abs_diff_to_gloo": max(float((a - b).abs().max()) for a, b in zip(on_tdist, on_gloo)),
        })), flush=True)
    sys.stderr.flush()
    os._exit(0)  # see _keep_gloo_alive


if __name__ == "__main__":
    main()
