#!/usr/bin/env python3
"""A parameter server on tdist.rpc (docs/rpc.md): rank 0 holds the weights
of a linear model; every other rank is a trainer that pulls the weights,
computes the gradient of its own shard of the data and pushes it back, all
through rpc_sync, asynchronously (no trainer waits for another).

    python3 -m tdist.run --standalone --nproc-per-node 3 examples/parameter_server.py --steps 200 --check

The data are y = X w* + noise with a w* drawn from a fixed seed; the server
applies each pushed gradient at once (SGD, under a lock: the agent serves
calls on several threads) and counts them. At the end the server reports
how far its weights are from w*; with --check the run fails unless every
trainer's pushes arrived and the distance is below --tolerance.
"""

import argparse
import os
import sys
import threading

import torch

import tdist.rpc as rpc

FEATURES = 16
SAMPLES_PER_TRAINER = 256


class ParameterServer:
    def __init__(self, lr):
        self.weights = torch.zeros(FEATURES)
        self.lr = lr
        self.pushes = {}
        self.lock = threading.Lock()

    def get(self):
        with self.lock:
            return self.weights.clone()

    def push(self, trainer, gradient):
        with self.lock:
            self.weights -= self.lr * gradient
            self.pushes[trainer] = self.pushes.get(trainer, 0) + 1


_server = None  # the server's state, on rank 0 only


# What the trainers call on the server (by reference: this module is
# __main__ on every rank, so pickle finds them there).
def get_weights():
    return _server.get()


def push_gradient(trainer, gradient):
    _server.push(trainer, gradient)


def true_weights():
    return torch.linspace(-1.0, 1.0, FEATURES)


def shard(trainer):
    g = torch.Generator().manual_seed(1000 + trainer)
    x = torch.randn(SAMPLES_PER_TRAINER, FEATURES, generator=g)
    y = x @ true_weights() + 0.01 * torch.randn(SAMPLES_PER_TRAINER, generator=g)
    return x, y


def train(trainer, steps):
    x, y = shard(trainer)
    for _ in range(steps):
        w = rpc.rpc_sync("server", get_weights)
        gradient = 2.0 * x.t() @ (x @ w - y) / SAMPLES_PER_TRAINER  # of the mean squared error
        rpc.rpc_sync("server", push_gradient, args=(trainer, gradient))


def main():
    global _server
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="pushes per trainer")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--tolerance", type=float, default=0.05, help="largest distance from w* --check accepts")
    args = parser.parse_args()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world_size < 2:
        sys.exit("parameter_server.py needs at least 2 ranks: a server and a trainer")
    if rank == 0:
        _server = ParameterServer(args.lr)
    rpc.init_rpc("server" if rank == 0 else f"trainer{rank}", rank=rank, world_size=world_size)
    if rank != 0:
        train(rank, args.steps)
    rpc.shutdown()  # graceful: the server stays until every trainer is done
    if rank == 0:
        distance = float((_server.weights - true_weights()).norm())
        pushes = [_server.pushes.get(t, 0) for t in range(1, world_size)]
        print(f"server: {sum(pushes)} gradients from {world_size - 1} trainers {pushes}; "
              f"distance of the weights from w*: {distance:.4f}")
        if args.check and (pushes != [args.steps] * (world_size - 1) or distance > args.tolerance):
            sys.exit(f"check failed: pushes {pushes} (expected {args.steps} each), distance {distance:.4f} "
                     f"(tolerance {args.tolerance})")


if __name__ == "__main__":
    main()
