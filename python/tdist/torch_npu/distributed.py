"""``torch_npu.distributed`` on tdist: its additions to torch.distributed
(tdist.torch's functions of the same names) and ``is_hccl_available``."""

from tdist.torch.npu import (  # noqa: F401 - re-exported under torch_npu's names
    all_gather_into_tensor_uneven,
    reduce_scatter_tensor_uneven,
    reinit_process_group,
)


def is_hccl_available():
    """True: the tdist backend answers to HCCL's name (tdist.torch_npu)."""
    return True
