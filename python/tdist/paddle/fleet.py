"""paddle.distributed.fleet's collective (data-parallel) part on tdist::

    from tdist.paddle import fleet        # instead of: from paddle.distributed import fleet

    fleet.init(is_collective=True)
    model = fleet.distributed_model(model)           # tdist.paddle.DataParallel
    optimizer = fleet.distributed_optimizer(optimizer)

Gradients are averaged over the ranks during ``loss.backward()`` by the
model that distributed_model returns (tdist/paddle/data_parallel.py); the
optimizer that distributed_optimizer returns is the user's, wrapped only to
refuse what it cannot do. Worker queries (worker_index, worker_num, ...),
barrier_worker, fleet.all_reduce and a data-parallel-only
get_hybrid_communicate_group are provided. Parameter servers (init_server,
run_server, init_worker, ...), static graphs (minimize, save_*), and model,
pipeline or sharding parallelism are not: they raise DistInvalidArgument
naming what to use instead (docs/paddle.md). Importing this module imports
paddle.
"""

import os

import numpy
import paddle

import tdist.paddle as _dist
from tdist._C import DistInvalidArgument
from tdist.paddle import group as _group
from tdist.paddle.data_parallel import DataParallel
from tdist.paddle.env import ParallelEnv
from tdist.paddle.reduce_op import ReduceOp

__all__ = [
    "DistributedStrategy", "Fleet", "HybridCommunicateGroup", "all_reduce", "barrier_worker",
    "distributed_model", "distributed_optimizer", "distributed_scaler", "fleet", "get_hybrid_communicate_group",
    "init", "is_first_worker", "is_server", "is_worker", "local_rank", "node_num", "nranks", "rank",
    "server_endpoints", "server_index", "server_num", "worker_endpoints", "worker_index", "worker_num",
    "world_size",
]

# paddle's own strategy object: a configuration, read here, not a runtime.
DistributedStrategy = paddle.distributed.fleet.DistributedStrategy

_NOT_PROVIDED = ("tdist.paddle.fleet provides fleet's collective data parallelism only (fleet.init(is_collective="
                 "True), distributed_model, distributed_optimizer); {what} is not provided: {instead}")


def _not_provided(what, instead="use paddle.distributed.fleet for it"):
    return DistInvalidArgument(_NOT_PROVIDED.format(what=what, instead=instead))


def _check_strategy(strategy):
    """Refuses the parts of a DistributedStrategy that are more than data parallelism."""
    if strategy is None:
        return
    hybrid = dict(strategy.hybrid_configs)
    for key in ("mp_degree", "pp_degree", "sharding_degree", "sep_degree", "ep_degree", "cp_degree",
                "moe_sharding_degree"):
        degree = int(hybrid.get(key, 1) or 1)
        if degree > 1:
            raise _not_provided(f"hybrid_configs {key}={degree}", "tdist.paddle's auto-parallel API "
                                "(shard_tensor, parallelize) covers tensor parallelism")
    for switch in ("amp", "recompute", "sharding", "pipeline", "tensor_parallel", "gradient_merge", "lamb",
                   "lars", "localsgd", "dgc"):
        if getattr(strategy, switch, False):
            raise _not_provided(f"DistributedStrategy.{switch}", "apply it in the training script "
                                "(paddle.amp.auto_cast, paddle.distributed.fleet.utils.recompute, ...)")


class HybridCommunicateGroup:
    """fleet.get_hybrid_communicate_group() for pure data parallelism: every
    rank is in the one data-parallel group; the other degrees are 1."""

    def __init__(self, group):
        self._group = group

    def get_data_parallel_world_size(self):
        return self._group.nranks if self._group is not None else 1

    def get_data_parallel_rank(self):
        return self._group.rank if self._group is not None else 0

    def get_data_parallel_group(self):
        return self._group

    def get_data_parallel_group_src_rank(self):
        return self._group.ranks[0] if self._group is not None else 0

    def get_global_rank(self):
        return _dist.get_rank()

    def get_model_parallel_world_size(self):
        return 1

    def get_model_parallel_rank(self):
        return 0

    def get_pipe_parallel_world_size(self):
        return 1

    def get_stage_id(self):
        return 0

    def get_sharding_parallel_world_size(self):
        return 1

    def get_sharding_parallel_rank(self):
        return 0


class _DistributedOptimizer:
    """The user's optimizer, unchanged: its gradients were averaged during
    backward by the DataParallel model. Every attribute is the optimizer's."""

    def __init__(self, optimizer):
        self._inner_opt = optimizer

    def __getattr__(self, name):
        return getattr(self._inner_opt, name)

    def minimize(self, loss, startup_program=None, parameters=None, no_grad_set=None):
        if not paddle.in_dynamic_mode():
            raise _not_provided("static-graph minimize", "run in dynamic mode (the default)")
        return self._inner_opt.minimize(loss, startup_program, parameters, no_grad_set)


class Fleet:
    """paddle's Fleet, collective mode only. The module's functions are this
    class's methods on the module's ``fleet`` instance, as in paddle."""

    def __init__(self):
        self._strategy = None
        self._initialized = False

    def init(self, role_maker=None, is_collective=False, strategy=None, log_level="INFO"):
        """Joins the other ranks (init_parallel_env). Only collective mode:
        is_collective=True, or a role maker made with is_collective=True."""
        del log_level
        collective = is_collective or bool(getattr(role_maker, "_is_collective", False))
        if not collective:
            raise _not_provided("parameter-server mode (fleet.init without is_collective=True)",
                                "pass is_collective=True for data parallelism")
        _check_strategy(strategy)
        self._strategy = strategy
        if not _group.is_initialized() and ParallelEnv().world_size >= 2:
            _dist.init_parallel_env()
        self._initialized = True

    def is_first_worker(self):
        return self.worker_index() == 0

    def worker_index(self):
        return _dist.get_rank()  # also before init, from the environment

    def worker_num(self):
        return max(1, _dist.get_world_size())

    def node_num(self):
        return max(1, len({e.rsplit(":", 1)[0] for e in ParallelEnv().trainer_endpoints if e}))

    def local_rank(self):
        return int(os.environ.get("PADDLE_RANK_IN_NODE", os.environ.get("LOCAL_RANK", "0")))

    def is_worker(self):
        return True

    def is_server(self):
        return False

    def worker_endpoints(self, to_string=False):
        endpoints = [e for e in ParallelEnv().trainer_endpoints if e]
        return ",".join(endpoints) if to_string else endpoints

    def server_num(self):
        return 0

    def server_index(self):
        raise _not_provided("server_index (parameter servers)")

    def server_endpoints(self, to_string=False):
        return "" if to_string else []

    def barrier_worker(self):
        if _group.is_initialized():
            _dist.barrier()

    def all_reduce(self, input, mode="sum"):
        """fleet.util's all_reduce over the workers: a NumPy copy of `input`
        (a number, list or array) reduced with "sum", "mean", "max" or "min"."""
        modes = {"sum": ReduceOp.SUM, "mean": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN}
        if mode not in modes:
            raise DistInvalidArgument(f"fleet.all_reduce: mode {mode!r} is not one of {sorted(modes)}")
        data = numpy.array(input, copy=True)
        if _group.is_initialized():
            _dist.all_reduce(data, op=modes[mode])
        if mode == "mean":
            data = data / self.worker_num()
        return data

    def distributed_model(self, model):
        """`model` wrapped in tdist.paddle.DataParallel (buckets of the
        strategy's fuse_grad_size_in_MB, as paddle's fleet sizes them)."""
        if not self._initialized:
            raise RuntimeError("fleet.distributed_model: call fleet.init(is_collective=True) first")
        strategy = self._strategy or DistributedStrategy()
        return DataParallel(model, comm_buffer_size=strategy.fuse_grad_size_in_MB,
                            last_comm_buffer_size=strategy.last_comm_group_size_MB,
                            find_unused_parameters=strategy.find_unused_parameters)

    def distributed_optimizer(self, optimizer, strategy=None):
        """`optimizer`, whose gradients the DataParallel model averages."""
        if not self._initialized:
            raise RuntimeError("fleet.distributed_optimizer: call fleet.init(is_collective=True) first")
        if strategy is not None:
            _check_strategy(strategy)
            self._strategy = strategy
        return _DistributedOptimizer(optimizer)

    def distributed_scaler(self, scaler):
        """`scaler` itself: averaged gradients are equal on every rank, so
        every rank finds the same infinities."""
        return scaler

    def get_hybrid_communicate_group(self):
        return HybridCommunicateGroup(_group.global_group_or_none())

    def _refuse(self, what):
        def refuse(*_args, **_kwargs):
            raise _not_provided(what)
        return refuse

    def __getattr__(self, name):
        if name in ("init_worker", "init_server", "run_server", "stop_worker", "save_inference_model",
                    "save_persistables", "minimize", "shrink", "load_model", "save_cache_model"):
            return self._refuse(f"fleet.{name}")
        raise AttributeError(f"tdist.paddle.fleet has no {name!r}")


fleet = Fleet()
init = fleet.init
is_first_worker = fleet.is_first_worker
worker_index = fleet.worker_index
worker_num = fleet.worker_num
rank = fleet.worker_index
nranks = fleet.worker_num
world_size = fleet.worker_num
node_num = fleet.node_num
local_rank = fleet.local_rank
is_worker = fleet.is_worker
is_server = fleet.is_server
worker_endpoints = fleet.worker_endpoints
server_num = fleet.server_num
server_index = fleet.server_index
server_endpoints = fleet.server_endpoints
barrier_worker = fleet.barrier_worker
all_reduce = fleet.all_reduce
distributed_model = fleet.distributed_model
distributed_optimizer = fleet.distributed_optimizer
distributed_scaler = fleet.distributed_scaler
get_hybrid_communicate_group = fleet.get_hybrid_communicate_group


def __getattr__(name):
    """The parameter-server and static-graph names raise when called."""
    return getattr(fleet, name)
