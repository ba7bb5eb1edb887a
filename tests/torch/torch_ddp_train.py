"""One rank of the DistributedDataParallel test: trains a small MLP for a few
steps on fixed per-rank data, once on backend "tdist" and once on "gloo"
(each a fresh default group), and prints the final parameters of both runs
plus those of a single-process reference that averages the ranks' gradients
itself. Prints one JSON object.

    torch_ddp_train.py PORT_TDIST,PORT_GLOO
"""

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
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


def train_ddp(backend, port, rank, world_size):
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    # A different initialisation per rank: DDP must broadcast rank 0's.
    model = make_model(seed=rank)
    # A tiny bucket size splits the gradients into several buckets, so
    # several all_reduces are in flight at once.
    ddp = DDP(model, bucket_cap_mb=0.0005)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches(rank):
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    params = [p.detach().clone() for p in model.parameters()]
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
    on_tdist = train_ddp("tdist", ports[0], rank, world_size)
    on_gloo = train_ddp("gloo", ports[1], rank, world_size)
    reference = train_reference(world_size)
    print(json.dumps({
        "tdist": [p.tolist() for p in on_tdist],
        "gloo": [p.tolist() for p in on_gloo],
        "reference": [p.tolist() for p in reference],
        "bitwise_equal_to_gloo": all(torch.equal(a, b) for a, b in zip(on_tdist, on_gloo)),
        "max_abs_diff_to_gloo": max(float((a - b).abs().max()) for a, b in zip(on_tdist, on_gloo)),
    }))


if __name__ == "__main__":
    main()
