"""Data-parallel paddle training on tdist (tdist.paddle.fleet and
tdist.paddle.DataParallel) against paddle's own: each script in
paddle_programs/ runs under ``python3 -m tdist.paddle.launch`` as written.
The ranks must end with the same weights, and those must be paddle's (bit
for bit at 2 ranks, where a sum of two has one order; within float32
rounding at 4, where the reduction orders differ): the results of the same
script under ``python3 -m paddle.distributed.launch``, its one tdist import
line replaced by paddle's, which paddle_reference.py made and stored with
this paddle version and this program text (that file says why they are
stored rather than made in each test run)."""

import os
import subprocess
import sys

import numpy
import paddle  # python/requirements-dev.txt
import pytest

from paddle_launch import TIMEOUT, launch
from paddle_reference import RANKS, SCRIPTS, made_from, stored_dir
from tdist._C import DistInvalidArgument

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "paddle_programs")



def run(script, nprocs, out_dir, tmp_path):
    """Runs `script` on `nprocs` local ranks with tdist's launcher and
    returns the ranks' saved arrays."""
    os.makedirs(out_dir)
    launch(os.path.join(PROGRAMS, script), nprocs, "tdist", tmp_path, SCRIPTS[script], {"FLEET_TRAIN_OUT": out_dir})
    return [dict(numpy.load(os.path.join(out_dir, f"rank{r}.npz"))) for r in range(nprocs)]


def stored(script, nprocs):
    """paddle's results stored by paddle_reference.py, of this paddle and
    this program text."""
    where = stored_dir(script, nprocs)
    with open(os.path.join(where, "made_from.txt")) as f:
        stored_from = f.read()
    assert stored_from == made_from(script), (f"{where} holds results made from\n{stored_from}but this is\n"
                                              f"{made_from(script)}run tests/python/paddle_reference.py")
    return [dict(numpy.load(os.path.join(where, f"rank{r}.npz"))) for r in range(nprocs)]


@pytest.mark.parametrize("nprocs", RANKS)
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_training_ends_with_paddles_weights(script, nprocs, tmp_path):
    ours = run(script, nprocs, str(tmp_path / "tdist"), tmp_path)
    theirs = stored(script, nprocs)
    names = sorted(ours[0])
    assert names == sorted(theirs[0]) and "losses" in names
    for r in range(1, nprocs):
        for name in names:
            if name != "losses":  # each rank's loss is of its own rows
                assert numpy.array_equal(ours[r][name], ours[0][name]), (r, name)
    for r in range(nprocs):
        for name in names:
            if nprocs == 2:
                assert numpy.array_equal(ours[r][name], theirs[r][name]), (r, name, ours[r][name], theirs[r][name])
            else:
                numpy.testing.assert_allclose(ours[r][name], theirs[r][name], rtol=2e-5, atol=2e-6,
                                              err_msg=f"rank {r}, {name}")
    # The training did something: the losses moved.
    assert not numpy.allclose(ours[0]["losses"][0], ours[0]["losses"][-1])


def test_what_fleet_does_not_provide_is_refused_by_name():
    from tdist.paddle import fleet
    with pytest.raises(DistInvalidArgument, match="parameter-server mode"):
        fleet.init()
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 2, "pp_degree": 1}
    with pytest.raises(DistInvalidArgument, match="mp_degree=2"):
        fleet.init(is_collective=True, strategy=strategy)
    strategy = fleet.DistributedStrategy()
    strategy.amp = True
    with pytest.raises(DistInvalidArgument, match="DistributedStrategy.amp"):
        fleet.init(is_collective=True, strategy=strategy)
    with pytest.raises(DistInvalidArgument, match="fleet.init_server"):
        fleet.init_server()
    with pytest.raises(DistInvalidArgument, match="fleet.run_server"):
        fleet.fleet.run_server()


def test_one_rank_trains_alone():
    """Without a launcher (world size 1) fleet and DataParallel wrap and train
    as plain paddle does."""
    from tdist.paddle import fleet
    fleet.init(is_collective=True)
    assert (fleet.worker_index(), fleet.worker_num(), fleet.is_first_worker()) == (0, 1, True)
    paddle.seed(5)
    layer = paddle.nn.Linear(4, 2)
    reference = paddle.nn.Linear(4, 2)
    reference.set_state_dict(layer.state_dict())
    model = fleet.distributed_model(layer)
    x = paddle.ones([3, 4])
    model(x).sum().backward()
    reference(x).sum().backward()
    assert numpy.array_equal(layer.weight.grad.numpy(), reference.weight.grad.numpy())
    assert sorted(model.state_dict()) == ["bias", "weight"]


def test_data_parallel_checks_its_arguments():
    import tdist.paddle as dist
    with pytest.raises(TypeError, match="paddle.nn.Layer"):
        dist.DataParallel(object())
    with pytest.raises(DistInvalidArgument, match="comm_buffer_size"):
        dist.DataParallel(paddle.nn.Linear(2, 2), comm_buffer_size=0)


@pytest.mark.parametrize("nprocs", [2, 3])
def test_data_parallel_averages_bfloat16_float32_and_one_rank_only_gradients(nprocs, tmp_path):
    import json
    script = os.path.join(PROGRAMS, "mixed_dtype_dp.py")
    result = subprocess.run([sys.executable, "-m", "tdist.paddle.launch", "--nproc_per_node", str(nprocs), script],
                            capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reports = sorted((json.loads(line.split("]: ", 1)[1]) for line in result.stdout.splitlines() if '"rank"' in line),
                     key=lambda report: report["rank"])
    assert [report["rank"] for report in reports] == list(range(nprocs)), result.stdout
    mean_rank_plus_one = (nprocs + 1) / 2  # exact in bfloat16 for 2 and 3 ranks
    for report in reports:
        assert report["dtypes"] == ["paddle.bfloat16", "paddle.float32"]
        assert report["other"] == [3.0, 3.0]
        for step in ("first", "second"):
            grads = report[step]
            assert grads["w"] == [mean_rank_plus_one] * 4, (step, grads)
            assert grads["v"] == [2 * mean_rank_plus_one] * 3, (step, grads)
            assert grads["u"] == pytest.approx([3 / nprocs] * 2, rel=1e-6)  # rank 0's gradient, averaged
            assert grads["never"] is None  # no rank used it: no gradient, as in paddle
