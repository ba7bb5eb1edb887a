#!/usr/bin/env python3
"""Tensor-parallel training of a two-layer MLP on a 2-d mesh (data parallel
x tensor parallel) with tdist's DTensor, on CPU torch tensors.

    python3 -m tdist.run --nproc-per-node 4 examples/tensor_parallel_mlp.py --dp 2 --tp 2

The first layer's weight is split by columns over "tp" and the second's by
rows (Megatron's column- then row-parallel pair), so the hidden activations
never leave their rank; the batch is split over "dp". Each step:

    h = relu(x @ W1)          x: [Shard(0), Replicate]  W1: [Replicate, Shard(1)]  h: [Shard(0), Shard(1)]
    y = h @ W2                W2: [Replicate, Shard(0)]  y: [Shard(0), Partial] -> all_reduce over tp
    loss = sum((y - t)^2) / N
    backward by hand with the same DTensor ops; the weight gradients come out
    [Partial, <the weight's shard>] and one all_reduce over dp makes them
    the weight's layout (data-parallel averaging); then SGD.

Sizes are deliberately uneven (31 hidden units over 2 or 3 tp ranks, an odd
batch). Rank 0 also runs the same model in one process with torch autograd
and reports the largest difference of the losses and final weights; with
--check the run fails if it exceeds --tolerance. It prints the plan of the
tp all_reduce and the communication per step (bytes this rank moves, time).
"""

import argparse
import sys
import time

import torch

import tdist
from tdist.device_mesh import init_device_mesh
from tdist.tensor import Replicate, Shard, communication_counters, distribute_tensor, elementwise

D_IN, HIDDEN, D_OUT = 13, 31, 5


def weights(seed):
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(D_IN, HIDDEN, generator=g) / D_IN ** 0.5
    w2 = torch.randn(HIDDEN, D_OUT, generator=g) / HIDDEN ** 0.5
    return w1, w2


def batch(step, size):
    """The global batch of `step`: the same on every rank and in the reference."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, D_IN, generator=g)
    t = torch.sin(x[:, :D_OUT] * 2.0) + 0.1 * torch.randn(size, D_OUT, generator=g)
    return x, t


def reference(args):
    """Losses and final weights of the same training in one process (torch autograd)."""
    w1, w2 = (w.clone().requires_grad_() for w in weights(args.seed))
    losses = []
    for step in range(args.steps):
        x, t = batch(step, args.batch)
        loss = ((torch.relu(x @ w1) @ w2 - t) ** 2).sum() / t.numel()
        w1.grad = w2.grad = None
        loss.backward()
        with torch.no_grad():
            w1 -= args.lr * w1.grad
            w2 -= args.lr * w2.grad
        losses.append(loss.item())
    return losses, w1.detach(), w2.detach()


def train(args):
    mesh = init_device_mesh("cpu", (args.dp, args.tp), mesh_dim_names=("dp", "tp"))
    rows, w1_layout, w2_layout = [Shard(0), Replicate()], [Replicate(), Shard(1)], [Replicate(), Shard(0)]
    full_w1, full_w2 = weights(args.seed)
    # Every rank made the same weights: cut them locally (no communication).
    w1 = distribute_tensor(full_w1, mesh, w1_layout, src_data_rank=None)
    w2 = distribute_tensor(full_w2, mesh, w2_layout, src_data_rank=None)
    relu_mask = lambda h: (h > 0).to(h.dtype)  # noqa: E731
    losses, step_times = [], []
    communication_counters(reset=True)
    for step in range(args.steps):
        started = time.perf_counter()
        x_full, t_full = batch(step, args.batch)
        x = distribute_tensor(x_full, mesh, rows, src_data_rank=None)
        t = distribute_tensor(t_full, mesh, rows, src_data_rank=None)
        # Forward.
        h_pre = x @ w1                                                   # [Shard(0), Shard(1)]
        h = elementwise(torch.relu, h_pre)
        y = (h @ w2).redistribute(mesh, rows)                            # [Shard(0), Partial] -> all_reduce over tp
        diff = y - t
        loss = (diff * diff).sum() / t_full.numel()                      # [Partial, Replicate]
        # Backward, by hand.
        dy = diff * (2.0 / t_full.numel())                               # [Shard(0), Replicate]
        dw2 = (h.T @ dy).redistribute(mesh, w2_layout)                   # [Partial, Shard(0)] -> all_reduce over dp
        dh = (dy @ w2.T) * elementwise(relu_mask, h_pre)                 # [Shard(0), Shard(1)]
        dw1 = (x.T @ dh).redistribute(mesh, w1_layout)                   # [Partial, Shard(1)] -> all_reduce over dp
        w1 = w1 - dw1 * args.lr
        w2 = w2 - dw2 * args.lr
        losses.append(float(loss.full_tensor()))
        step_times.append(time.perf_counter() - started)
    comm = communication_counters()
    plan = (h @ w2).explain_redistribute(rows)
    return mesh, losses, w1.full_tensor(), w2.full_tensor(), step_times, comm, plan


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dp", type=int, default=2, help="data-parallel size (mesh dim 0)")
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel size (mesh dim 1)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=19, help="global batch (any size; split over dp)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="exit 1 if the run differs from the reference")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()

    tdist.init_process_group("tdist")
    mesh, losses, w1, w2, step_times, comm, plan = train(args)
    status = 0
    if tdist.get_rank() == 0:
        ref_losses, ref_w1, ref_w2 = reference(args)
        loss_diff = max(abs(a - b) for a, b in zip(losses, ref_losses))
        weight_diff = max(float((w1 - ref_w1).abs().max()), float((w2 - ref_w2).abs().max()))
        steady = sorted(step_times[1:] or step_times)
        print(f"mesh {mesh!r}")
        print(f"loss: step 0 {losses[0]:.6f}, step {args.steps - 1} {losses[-1]:.6f} "
              f"(reference {ref_losses[0]:.6f}, {ref_losses[-1]:.6f})")
        print(f"largest difference from the one-process run: losses {loss_diff:.2e}, weights {weight_diff:.2e}")
        print(f"per step on rank 0: {comm['collectives'] / args.steps:.0f} collectives, "
              f"{comm['bytes'] / args.steps:.0f} B moved, {1e3 * comm['seconds'] / args.steps:.2f} ms redistributing, "
              f"{1e3 * steady[len(steady) // 2]:.2f} ms per step (median)")
        print("plan of y's reduction over tp (rank 0):")
        print(plan, end="")
        if args.check and max(loss_diff, weight_diff) > args.tolerance:
            print(f"FAILED: difference above {args.tolerance}", file=sys.stderr)
            status = 1
    # Every rank learns the verdict, so a failed check fails the whole job.
    verdict = torch.tensor([status], dtype=torch.int64)
    tdist.broadcast(verdict, src=0)
    tdist.destroy_process_group()
    return int(verdict.item())


if __name__ == "__main__":
    sys.exit(main())
