"""tdist.torch.compat: the argument forms torch 1.13 rejects are accepted for
tdist groups only; on gloo, torch's own functions (and errors) are unchanged.
One process, world size 1, groups over a HashStore. Also: ProcessGroupTdist
built directly from a store, as a four-argument creator would."""

import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import tdist.torch
from tdist.torch import compat


@pytest.fixture
def world_of_one():
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo stays on loopback
    created = []

    def init(backend):
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        created.append(backend)

    yield init
    if dist.is_initialized():
        dist.destroy_process_group()


def test_installed_on_import():
    assert compat.installed()
    assert dist.all_to_all._tdist_original is not None
    assert tdist.torch.is_registered()


def test_tensor_all_to_all_and_mixed_dtypes_on_tdist(world_of_one):
    world_of_one("tdist")
    out = torch.zeros(1, dtype=torch.int32)
    dist.all_to_all(out, torch.tensor([5]))
    assert torch.equal(out, torch.tensor([5], dtype=torch.int32))
    t = torch.zeros(1)
    dist.scatter(t, [torch.tensor([3])], src=0)
    assert torch.equal(t, torch.tensor([3.0]))
    dist.reduce_scatter(t, [torch.tensor([4])])
    assert torch.equal(t, torch.tensor([4.0]))
    outs = [torch.zeros(2)]
    dist.all_to_all(outs, [torch.tensor([1, 2])])
    assert torch.equal(outs[0], torch.tensor([1.0, 2.0]))


def test_other_backends_see_torch_unchanged(world_of_one):
    world_of_one("gloo")
    with pytest.raises(TypeError, match="List\\[torch.Tensor\\]"):
        dist.all_to_all(torch.zeros(1, dtype=torch.int32), torch.tensor([5]))
    with pytest.raises((RuntimeError, ValueError), match="different dtypes"):
        dist.scatter(torch.zeros(1), [torch.tensor([3])], src=0)


def test_uninstall_restores_torch():
    compat.uninstall()
    try:
        assert not hasattr(dist.all_to_all, "_tdist_original")
    finally:
        compat.install()
    assert hasattr(dist.all_to_all, "_tdist_original")


def test_direct_construction_like_a_four_argument_creator():
    # ProcessGroupTdist(store, rank, size, timeout), outside init_process_group.
    pg = tdist.torch.ProcessGroupTdist(dist.HashStore(), 0, 1, timedelta(seconds=30))
    assert pg.rank() == 0 and pg.size() == 1 and pg.timeout == timedelta(seconds=30)
    t = torch.arange(4.0)
    work = pg.allreduce([t])
    work.wait()
    assert torch.equal(t, torch.arange(4.0))
    assert torch.equal(work.get_future().wait()[0], t)
