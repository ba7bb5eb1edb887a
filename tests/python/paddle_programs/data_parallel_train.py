"""A paddle.DataParallel training script as paddle documents it; only its
import differs from paddle's (test_paddle_fleet.py runs it both ways).
Writes the final weights and losses to $FLEET_TRAIN_OUT/rank<r>.npz."""

import os

import numpy as np
import paddle
import tdist.paddle as dist


def main():
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    paddle.seed(99 + rank)
    layer = paddle.nn.Sequential(paddle.nn.Linear(6, 32), paddle.nn.Tanh(), paddle.nn.Linear(32, 32),
                                 paddle.nn.Tanh(), paddle.nn.Linear(32, 2))
    # Buckets of 1 KB: the gradients travel in several all_reduces.
    model = dist.DataParallel(layer, comm_buffer_size=0.001, last_comm_buffer_size=0.001)
    optimizer = paddle.optimizer.SGD(learning_rate=0.05, parameters=model.parameters())
    rng = np.random.default_rng(3)
    losses = []
    for _ in range(8):
        x = rng.standard_normal((8 * world, 6)).astype(np.float32)
        y = np.stack([x.sum(1), x[:, 0] * x[:, 1]], axis=1).astype(np.float32)
        loss = paddle.nn.functional.mse_loss(model(paddle.to_tensor(x[rank::world])),
                                             paddle.to_tensor(y[rank::world]))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))
    weights = {name: p.numpy() for name, p in model.state_dict().items()}
    np.savez(os.path.join(os.environ["FLEET_TRAIN_OUT"], f"rank{rank}.npz"), losses=np.array(losses), **weights)
    dist.barrier()


if __name__ == "__main__":
    main()
