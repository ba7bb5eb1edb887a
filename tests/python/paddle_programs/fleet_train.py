"""A paddle data-parallel training script in fleet's documented style; only
its import differs from paddle's (test_paddle_fleet.py runs it both ways).

Each rank trains on its share of one fixed dataset (rows rank, rank + n,
...), so the averaged gradient is that of the whole batch. Writes the final
weights and the losses to $FLEET_TRAIN_OUT/rank<r>.npz."""

import os

import numpy as np
import paddle
import paddle.nn as nn
from tdist.paddle import fleet

STEPS, BATCH, FEATURES = 6, 12, 10


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(FEATURES, 16)
        self.out = nn.Linear(16, 1)
        self.unused = nn.Linear(3, 3)  # no gradient: counts as zeros

    def forward(self, x):
        return self.out(nn.functional.relu(self.hidden(x)))


def main():
    fleet.init(is_collective=True)
    rank, world = fleet.worker_index(), fleet.worker_num()
    paddle.seed(1234 + rank)  # different on each rank: distributed_model broadcasts rank 0's
    model = Net()
    optimizer = paddle.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    model = fleet.distributed_model(model)
    optimizer = fleet.distributed_optimizer(optimizer)

    data = np.random.default_rng(7).standard_normal((STEPS, BATCH, FEATURES)).astype(np.float32)
    target = data.sum(axis=2, keepdims=True) * 0.5
    losses = []
    for step in range(STEPS):
        x = paddle.to_tensor(data[step, rank::world])
        y = paddle.to_tensor(target[step, rank::world])
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))
    # Gradient accumulation: two micro-batches per step, the first without
    # averaging (paddle.DataParallel.no_sync).
    for step in range(STEPS):
        half = BATCH // 2
        x, y = data[step, rank::world], target[step, rank::world]
        with model.no_sync():
            nn.functional.mse_loss(model(paddle.to_tensor(x[:half // world])),
                                   paddle.to_tensor(y[:half // world])).backward()
        loss = nn.functional.mse_loss(model(paddle.to_tensor(x[half // world:])), paddle.to_tensor(y[half // world:]))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))
    weights = {name: p.numpy() for name, p in model.state_dict().items()}
    np.savez(os.path.join(os.environ["FLEET_TRAIN_OUT"], f"rank{rank}.npz"), losses=np.array(losses), **weights)
    fleet.barrier_worker()


if __name__ == "__main__":
    main()
