"""A paddle-style training step, written as a paddle.distributed user
writes it with only the import changed: data-parallel SGD on a linear
model, gradients averaged with all_reduce, then a check that every rank
ended with the same weights. Prints one line per rank."""

import os
import sys

import numpy

import tdist.paddle as dist


def train(steps=3):
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    env = dist.ParallelEnv()
    rng = numpy.random.default_rng(rank)
    w = numpy.zeros(4, numpy.float64)
    for _ in range(steps):
        x = rng.normal(size=(8, 4))
        y = x @ numpy.arange(1.0, 5.0)
        grad = 2 * x.T @ (x @ w - y) / len(y)
        dist.all_reduce(grad)
        grad /= world
        w -= 0.1 * grad
    weights = []
    dist.all_gather_object(weights, w.round(10).tolist())
    same = all(v == weights[0] for v in weights)
    print(f"rank {rank}/{world} trainer_id={os.environ.get('PADDLE_TRAINER_ID')} "
          f"trainers_num={os.environ.get('PADDLE_TRAINERS_NUM')} env_rank={env.rank} "
          f"endpoints={len(env.trainer_endpoints)} current={env.current_endpoint == env.trainer_endpoints[rank]} "
          f"local_rank={os.environ.get('PADDLE_LOCAL_RANK')} job={os.environ.get('PADDLE_JOB_ID')} "
          f"same_weights={same} args={sys.argv[1:]}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return w.tolist()


if __name__ == "__main__":
    train()
