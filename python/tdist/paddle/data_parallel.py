"""paddle.DataParallel on tdist: a paddle ``Layer`` whose gradients are
averaged over the group's ranks during ``loss.backward()``.

paddle's own DataParallel runs on paddle's C++ process group, which tdist
cannot sit under, so this is tdist's own, with paddle's signature and
behaviour:

- at construction, every parameter and buffer is broadcast from the group's
  first rank, so all ranks start alike;
- gradients are grouped into buckets in reverse parameter order (the order
  backward produces them): the first of ``last_comm_buffer_size`` MB, the
  rest of ``comm_buffer_size`` MB, one dtype each. A parameter's backward
  hook (run by paddle once its gradient of this backward is complete) marks
  it ready; a bucket whose parameters are all ready is copied into its flat
  buffer and all-reduced in the background while backward goes on;
- a hook on the forward's outputs notes that a backward reached the layer;
  at that backward's end (paddle's backward-final hook) the buckets not yet
  sent (parameters that got no gradient count as zeros) are sent
  (all_reduce with AVG), all are waited for, and the averages are copied
  back into the ``grad`` of every parameter that had a gradient on some
  rank (a MAX over the ranks of one flag each); the others keep none.

Gradients reach the buffers through zero-copy NumPy views (DLPack; bfloat16
as its bits), so the copies are one into the bucket and one back; the
buckets are made once and reused. ``no_sync()`` skips the averaging, for
gradient accumulation.
Importing this module imports paddle.
"""

import contextlib

import numpy
import paddle
from paddle.base import core

from tdist._C import DistInvalidArgument
from tdist.paddle import _tensors
from tdist.paddle import communication
from tdist.paddle import group as _group
from tdist.paddle.reduce_op import ReduceOp

_MB = 1 << 20


def sync_params_buffers(model, comm_group=None, src_rank=0, is_model_parallel=False, fuse_params=True):
    """Broadcasts every parameter and buffer of `model` from global rank
    `src_rank` (paddle.distributed.parallel.sync_params_buffers)."""
    del is_model_parallel, fuse_params  # paddle's tuning switches; every tensor is sent whole
    seen = set()
    for tensor in list(model.parameters()) + list(model.buffers()):
        if tensor is None or id(tensor) in seen or tensor.size == 0:
            continue
        seen.add(id(tensor))
        communication.broadcast(tensor, src=src_rank, group=comm_group)


class _Bucket:
    """Parameters of one dtype whose gradients travel together, their flat
    buffer, and their entries of the layer's had-a-gradient flags."""

    def __init__(self, params, had_grad):
        self.params = params
        self.had_grad = had_grad
        self.offsets = []
        total = 0
        for p in params:
            self.offsets.append(total)
            total += int(p.size)
        self.flat = numpy.zeros(total, _numpy_dtype(params[0]))
        if _is_bfloat16(params[0]):
            self.flat = self.flat.view(_tensors.BFloat16Bits)
        self.ready = 0
        self.task = None

    def send(self, group):
        """Copies every gradient into the flat buffer (zeros for a parameter
        that has none, noted in had_grad) and starts its all_reduce."""
        for i, (p, at) in enumerate(zip(self.params, self.offsets)):
            part = self.flat[at:at + int(p.size)]
            self.had_grad[i] = p.grad is not None
            if p.grad is None:
                part.fill(0)
            else:
                numpy.copyto(part, _gradient(p).reshape(-1))
        self.task = communication.all_reduce(self.flat, op=ReduceOp.AVG, group=group, sync_op=False)

    def finish(self):
        """Waits for the all_reduce and writes the averages into the
        gradients of the parameters some rank had one for (had_grad, once
        reduced with MAX over the ranks); the others keep no gradient, as in
        paddle, so optimizers skip them."""
        self.task.wait()
        for p, at, used in zip(self.params, self.offsets, self.had_grad):
            if not used:
                continue
            if p.grad is None:  # unused here but used elsewhere
                p.grad = paddle.zeros(p.shape, p.dtype)
            numpy.copyto(_gradient(p), self.flat[at:at + int(p.size)].reshape(p.shape))
        self.task = None
        self.ready = 0


def _gradient(param):
    """A writable NumPy view of `param`'s gradient."""
    if str(param.grad.dtype) != str(param.dtype):
        raise DistInvalidArgument(f"DataParallel: the gradient of parameter {param.name} is {param.grad.dtype}, "
                                  f"the parameter {param.dtype}; tdist.paddle averages gradients of the "
                                  "parameters' dtype (no master gradients)")
    return _tensors.as_tdist(param.grad, "DataParallel", f"the gradient of parameter {param.name}")


def _tensors_in(value):
    """The paddle tensors in a forward's output (nested lists, tuples, dicts)."""
    if isinstance(value, paddle.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


def _is_bfloat16(param):
    return str(param.dtype) == "paddle.bfloat16"


def _numpy_dtype(param):
    """The NumPy dtype of a parameter's bucket (bfloat16's bits as uint16)."""
    return numpy.dtype("uint16") if _is_bfloat16(param) else numpy.dtype(str(param.dtype).replace("paddle.", ""))


def _group_params(params, comm_buffer_size, last_comm_buffer_size):
    """The parameters of each bucket, in reverse parameter order: the first
    bucket holds up to last_comm_buffer_size MB, the others comm_buffer_size
    MB; a dtype change starts a new one."""
    groups, current, current_bytes = [], [], 0
    limit = last_comm_buffer_size * _MB
    for p in reversed(params):
        nbytes = int(p.size) * _numpy_dtype(p).itemsize
        if current and (current_bytes + nbytes > limit or str(current[0].dtype) != str(p.dtype)):
            groups.append(current)
            current, current_bytes, limit = [], 0, comm_buffer_size * _MB
        current.append(p)
        current_bytes += nbytes
    if current:
        groups.append(current)
    return groups


class DataParallel(paddle.nn.Layer):
    """paddle.DataParallel(layers, strategy=None, comm_buffer_size=25,
    last_comm_buffer_size=1, find_unused_parameters=False, group=None) on
    tdist. `strategy` is ignored (paddle's legacy ParallelStrategy); a
    parameter without a gradient counts as zeros, so find_unused_parameters
    changes nothing."""

    def __init__(self, layers, strategy=None, comm_buffer_size=25, last_comm_buffer_size=1,
                 find_unused_parameters=False, group=None):
        if not isinstance(layers, paddle.nn.Layer):
            raise TypeError(f"DataParallel: layers must be a paddle.nn.Layer, not {type(layers).__name__}")
        super().__init__(layers.full_name() + "_data_parallel")
        if comm_buffer_size <= 0 or last_comm_buffer_size <= 0:
            raise DistInvalidArgument(f"DataParallel: comm_buffer_size ({comm_buffer_size}) and "
                                      f"last_comm_buffer_size ({last_comm_buffer_size}) must be positive (MB)")
        del strategy
        self._layers = layers
        self.find_unused_parameters = find_unused_parameters
        self.group = group if group is not None else _group.global_group_or_none()  # None: one rank alone
        self._nranks = self.group.nranks if self.group is not None else 1
        self.grad_need_sync = True
        self._buckets = []
        self._hooked = False
        self._next = 0  # the first bucket not yet sent in this backward
        if self._nranks < 2:
            return
        _group.raise_non_member(self.group, "DataParallel")
        sync_params_buffers(layers, self.group, src_rank=self.group.ranks[0])
        params, seen = [], set()
        for p in layers.parameters():
            if not p.stop_gradient and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        # Which parameters had a gradient here, each bucket's in a slice;
        # reduced with MAX over the ranks, which had one anywhere.
        self._had_grad = numpy.zeros(len(params), numpy.uint8)
        at = 0
        for members in _group_params(params, comm_buffer_size, last_comm_buffer_size):
            bucket = _Bucket(members, self._had_grad[at:at + len(members)])
            at += len(members)
            self._buckets.append(bucket)
            for p in members:
                p._register_backward_hook(self._ready_hook(bucket))

    def _ready_hook(self, bucket):
        def ready(*_):
            if not self._hooked:
                return  # a backward this layer's forward did not start (or no_sync)
            bucket.ready += 1
            # Buckets leave in index order on every rank, whatever order their
            # gradients come in, so the ranks' all_reduces pair up.
            while self._next < len(self._buckets) and \
                    self._buckets[self._next].ready == len(self._buckets[self._next].params):
                self._buckets[self._next].send(self.group)
                self._next += 1
        return ready

    def _finish_backward(self):
        if not self._hooked:
            return
        self._hooked = False
        for bucket in self._buckets[self._next:]:
            bucket.send(self.group)
        self._next = 0
        communication.all_reduce(self._had_grad, op=ReduceOp.MAX, group=self.group)
        for bucket in self._buckets:
            bucket.finish()

    def _backward_starts(self, grad):
        """A hook on the forward's outputs: a backward reaches this layer, so
        its gradients are averaged at that backward's end (and not at the end
        of a backward through another graph)."""
        if not self._hooked:
            self._hooked = True
            # One-shot: paddle runs it once, at the end of the running backward.
            core.eager._add_backward_final_hook(self._finish_backward)
        return grad

    def forward(self, *inputs, **kwargs):
        outputs = self._layers(*inputs, **kwargs)
        # As paddle's: whatever the layer's mode (eval() too), if gradients
        # are recorded and not under no_sync().
        if self._buckets and self.grad_need_sync and paddle.is_grad_enabled():
            for t in _tensors_in(outputs):
                if not t.stop_gradient:
                    t.register_hook(self._backward_starts)
        return outputs

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients of the backwards inside accumulate on each rank without
        being averaged; the first backward after it averages the sums."""
        before = self.grad_need_sync
        self.grad_need_sync = False
        try:
            yield
        finally:
            self.grad_need_sync = before

    def scale_loss(self, loss):
        """paddle's legacy API: the loss unchanged (gradients are averaged)."""
        return loss

    def apply_collective_grads(self):
        """paddle's legacy API: nothing to do (gradients are averaged during backward)."""

    def state_dict(self, *args, **kwargs):
        return self._layers.state_dict(*args, **kwargs)

    def set_state_dict(self, state_dict, use_structured_name=True):
        return self._layers.set_state_dict(state_dict, use_structured_name=use_structured_name)

    set_dict = set_state_dict
    load_dict = set_state_dict
