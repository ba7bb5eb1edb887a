"""DataParallel over parameters of two dtypes (bfloat16 and float32, so two
buckets) and one that only rank 0 uses; prints each rank's averaged
gradients as JSON for test_paddle_fleet.py."""

import json

import paddle
import tdist.paddle as dist


class Layer(paddle.nn.Layer):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank
        self.w = self.create_parameter([4], dtype="bfloat16")
        self.v = self.create_parameter([3], dtype="float32")
        self.u = self.create_parameter([2], dtype="float32")

    def forward(self, x):
        out = (self.w * x).astype("float32").sum() + (self.v * 2.0).sum() * float(self.rank + 1)
        if self.rank == 0:
            out = out + (self.u * 3.0).sum()
        return out


def main():
    dist.init_parallel_env()
    rank = dist.get_rank()
    layer = Layer(rank)
    model = dist.DataParallel(layer)
    model(paddle.ones([4], dtype="bfloat16") * (rank + 1)).backward()
    grads = {name: p.grad.astype("float32").numpy().tolist() for name, p in layer.named_parameters()}
    print(json.dumps({"rank": rank, "dtypes": [str(layer.w.grad.dtype), str(layer.v.grad.dtype)], **grads}))


if __name__ == "__main__":
    main()
