"""torch_npu's distributed spellings on tdist, for a torch_npu program that
runs on CPUs by changing one line::

    import tdist.torch_npu as torch_npu      # instead of: import torch_npu

After the import:

- ``torch.distributed.is_hccl_available()`` answers True (tdist takes
  HCCL's place), and ``init_process_group("hccl")`` / ``new_group(backend=
  "hccl")`` make tdist groups: "hccl" is registered as a name of the tdist
  backend, for CPU tensors;
- ``torch.distributed.ProcessGroupHCCL(store, rank, size, timeout)`` is
  tdist's backend class, the same four-argument constructor;
- ``dist.distributed_c10d._world.default_pg._get_backend(device)
  .get_hccl_comm_name(rank)`` reaches the group's communicator name, with
  ``torch.device("cpu")`` for the device: "npu" is no device of this torch
  (naming one, as torch_npu does by renaming torch's PrivateUse1, makes
  torch look for that accelerator's runtime in calls such as barrier);
- ``torch_npu.distributed`` has ``reinit_process_group``,
  ``all_gather_into_tensor_uneven``, ``reduce_scatter_tensor_uneven`` and
  ``is_hccl_available``;
- ``Tensor.npu()`` returns the tensor itself: tensors stay on the CPU.

Nothing else of torch_npu (NPU memory, kernels, ``torch.npu``) exists here.
docs/torch_npu.md lists what each call does on tdist.
"""

import torch
import torch.distributed as _dist

import tdist.torch as _tdist_torch
from tdist.torch import backend as _backend
from tdist.torch_npu import distributed  # noqa: F401 - torch_npu.distributed

HCCL = "hccl"


def _is_hccl_available():
    """True: tdist's backend is registered under HCCL's name."""
    return True


def _install():
    if HCCL.upper() not in _dist.Backend._plugins:
        _dist.Backend.register_backend(HCCL, _backend.create_process_group, extended_api=True, devices=["cpu"])
    _dist.is_hccl_available = _is_hccl_available
    _dist.ProcessGroupHCCL = _tdist_torch.ProcessGroupTdist
    if not hasattr(torch.Tensor, "npu"):
        torch.Tensor.npu = lambda self, *args, **kwargs: self


_install()
