"""Runs cases of paddle_cases.py (named in $CASES, comma-separated) on
paddle's own paddle.distributed and its CPU backend, as paddle's launcher
starts it: the same calls, checked against the same NumPy values, as on
tdist.paddle (test_paddle.py, test_paddle_on_paddles_backend)."""

import os
import sys

import paddle
import paddle.distributed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paddle_cases  # noqa: E402

paddle_cases.dist = paddle.distributed  # the module the cases call
paddle.distributed.init_parallel_env()
rank, n = paddle.distributed.get_rank(), paddle.distributed.get_world_size()
names = os.environ["CASES"].split(",")
unknown = set(names) - {name for name, _ in paddle_cases.CASES}
assert not unknown, f"no such case: {sorted(unknown)}"
for name, fn in paddle_cases.CASES:
    if name in names:
        fn(paddle, rank, n)
        print("passed", name, flush=True)
