"""Argument forms torch 1.13 rejects in Python but tdist groups accept.

torch.distributed checks some arguments in Python before any backend sees
them. The spec's test programs (docs/torch.md) call three functions in forms
those checks reject, whatever the backend, and one function is refused for
every backend but gloo:

- ``all_to_all(output, input)`` with two tensors instead of two lists: for a
  tdist group it runs as ``all_to_all_single(output, input)`` (equal splits
  along the first dimension, which is what the lists would hold);
- ``scatter``, ``reduce_scatter`` and ``all_to_all`` with input tensors whose
  dtype differs from the output's: for a tdist group the inputs are converted
  to the output dtype first (``Tensor.to``, the rules of ``Tensor.copy_``);
- ``monitored_barrier(group, timeout, wait_all_ranks)``: torch 1.13 raises
  "only implemented for GLOO backend" before asking the group; for a tdist
  group it calls the group's own monitored barrier, with torch's defaults
  (``timeout=None`` is ``default_pg_timeout``).

``install()`` (run by ``import tdist.torch``) wraps those four functions in
``torch.distributed``. A wrapper changes nothing unless the call uses one of
these forms *and* the group's backend is tdist; every other call, and every
call on another backend, goes to torch's function unchanged (and fails as
before). ``uninstall()`` puts torch's functions back.
"""

import functools
import inspect

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tdist.torch.backend import backend_of

_originals = {}


def _is_tdist_group(group):
    # backend_of, not get_backend: a "cpu:tdist" group's backend is named so.
    if not dist.is_initialized() or c10d._rank_not_in_group(group):
        return False
    return backend_of(group) is not None


def _converted(tensors, dtype):
    return [t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype != dtype else t for t in tensors]


def _mixed(tensors, dtype):
    return isinstance(tensors, list) and any(
        isinstance(t, torch.Tensor) and t.dtype != dtype for t in tensors)


def _all_to_all(bound):
    out, inp, group = bound["output_tensor_list"], bound["input_tensor_list"], bound["group"]
    if isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor) and _is_tdist_group(group):
        if inp.dtype != out.dtype:
            inp = inp.to(out.dtype)
        return True, dist.all_to_all_single(out, inp, group=group, async_op=bound["async_op"])
    if (isinstance(out, list) and out and isinstance(out[0], torch.Tensor) and _mixed(inp, out[0].dtype)
            and _is_tdist_group(group)):
        bound["input_tensor_list"] = _converted(inp, out[0].dtype)
    return False, None


def _scatter(bound):
    tensor, scatter_list = bound["tensor"], bound["scatter_list"]
    if isinstance(tensor, torch.Tensor) and _mixed(scatter_list, tensor.dtype) and _is_tdist_group(bound["group"]):
        bound["scatter_list"] = _converted(scatter_list, tensor.dtype)
    return False, None


def _reduce_scatter(bound):
    output, input_list = bound["output"], bound["input_list"]
    if isinstance(output, torch.Tensor) and _mixed(input_list, output.dtype) and _is_tdist_group(bound["group"]):
        bound["input_list"] = _converted(input_list, output.dtype)
    return False, None


def _monitored_barrier(bound):
    group = bound["group"]
    if not _is_tdist_group(group):
        return False, None
    timeout = bound["timeout"] if bound["timeout"] is not None else c10d.default_pg_timeout
    group_to_use = c10d._get_default_group() if group is None else group
    return True, group_to_use.monitored_barrier(timeout, wait_all_ranks=bound["wait_all_ranks"])


_ADAPTERS = {"all_to_all": _all_to_all, "scatter": _scatter, "reduce_scatter": _reduce_scatter,
             "monitored_barrier": _monitored_barrier}


def _wrap(name, original, adapter):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        handled, result = adapter(bound.arguments)
        if handled:
            return result
        return original(*bound.args, **bound.kwargs)

    wrapper._tdist_original = original
    return wrapper


def _work_abort(work):
    """Work.abort(): on a tdist operation, aborts its group (docs/fault-tolerance.md)."""
    from tdist.torch._plugin import _abort_work
    _abort_work(work)


def install():
    """Wraps all_to_all, scatter, reduce_scatter and monitored_barrier of torch.distributed (once),
    and gives torch's Work the abort() that torch 1.13 binds only in C++."""
    if not hasattr(dist.Work, "abort"):
        dist.Work.abort = _work_abort
    for name, adapter in _ADAPTERS.items():
        if name in _originals:
            continue
        original = getattr(c10d, name)
        _originals[name] = original
        wrapper = _wrap(name, original, adapter)
        setattr(c10d, name, wrapper)
        setattr(dist, name, wrapper)


def uninstall():
    """Restores torch's own functions."""
    for name, original in list(_originals.items()):
        setattr(c10d, name, original)
        setattr(dist, name, original)
        del _originals[name]


def installed():
    return bool(_originals)
