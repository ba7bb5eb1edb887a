"""DataParallel over parameters of two dtypes (bfloat16 and float32, so two
buckets), one that only rank 0 uses and one that no rank uses; a second
step in eval() mode with another graph's backward run between the forward
and the backward. Prints each rank's averaged gradients as JSON for
test_paddle_fleet.py."""

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
        self.never = self.create_parameter([5], dtype="float32")

    def forward(self, x):
        out = (self.w * x).astype("float32").sum() + (self.v * 2.0).sum() * float(self.rank + 1)
        if self.rank == 0:
            out = out + (self.u * 3.0).sum()
        return out


def grads(layer):
    return {name: None if p.grad is None else p.grad.astype("float32").numpy().tolist()
            for name, p in layer.named_parameters()}


def main():
    dist.init_parallel_env()
    rank = dist.get_rank()
    layer = Layer(rank)
    model = dist.DataParallel(layer)
    x = paddle.ones([4], dtype="bfloat16") * (rank + 1)
    model(x).backward()
    first = grads(layer)
    layer.clear_gradients(set_to_zero=False)
    # eval() does not stop the averaging (as in paddle); a backward through
    # another graph in between neither starts nor spends it.
    model.eval()
    out = model(x)
    other = paddle.to_tensor([1.0, 2.0], stop_gradient=False)
    (other * 3.0).sum().backward()
    out.backward()
    print(json.dumps({"rank": rank, "dtypes": [str(layer.w.grad.dtype), str(layer.v.grad.dtype)],
                      "first": first, "second": grads(layer), "other": other.grad.numpy().tolist()}))


if __name__ == "__main__":
    main()
