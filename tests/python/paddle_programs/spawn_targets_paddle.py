"""Functions tdist.paddle.spawn runs in tests/python/test_paddle.py."""

import os

import tdist.paddle as dist


def fail_on_rank_1():
    dist.init_parallel_env()
    if dist.get_rank() == 1:
        raise ValueError("bad batch on rank 1")
    dist.barrier()


def rank_and_size():
    env = dist.ParallelEnv()
    return env.rank, env.world_size, os.environ["PADDLE_LOCAL_RANK"]
