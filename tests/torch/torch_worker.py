"""One rank of a multi-process test: initializes torch.distributed with the
tdist backend, runs every check_* function of the given suite modules in
order and prints "PASS <suite>.<name>" for each. The first failure prints its traceback and
exits 1 (the other ranks then fail at their next collective, within the
group's timeout, and the harness reports all of them).

    torch_worker.py SUITE[,SUITE...] INIT [PATH]    INIT: env | tcp | file | tcpstore | filestore | hashstore
"""

import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tdist.torch  # noqa: E402  registers the "tdist" backend

import torch_checks as checks  # noqa: E402

# Long enough for two busy cores, short enough that a hang fails the test.
PG_TIMEOUT = timedelta(seconds=float(os.environ.get("TDIST_TEST_PG_TIMEOUT_S", "60")))


def init(kind, rank, world_size, port, path):
    if kind == "env":
        dist.init_process_group("tdist", timeout=PG_TIMEOUT)
    elif kind == "tcp":
        dist.init_process_group("tdist", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world_size, timeout=PG_TIMEOUT)
    elif kind == "file":
        dist.init_process_group("tdist", init_method="file://" + path, rank=rank, world_size=world_size,
                                timeout=PG_TIMEOUT)
    elif kind == "tcpstore":
        store = dist.TCPStore("127.0.0.1", port, world_size, rank == 0, timeout=PG_TIMEOUT)
        dist.init_process_group("tdist", store=store, rank=rank, world_size=world_size, timeout=PG_TIMEOUT)
    elif kind == "filestore":
        store = dist.FileStore(path, world_size)
        dist.init_process_group("tdist", store=store, rank=rank, world_size=world_size, timeout=PG_TIMEOUT)
    elif kind == "hashstore":
        dist.init_process_group("tdist", store=dist.HashStore(), rank=rank, world_size=world_size,
                                timeout=PG_TIMEOUT)
    else:
        raise ValueError("unknown init kind " + kind)


def main():
    suite_names, kind = sys.argv[1].split(","), sys.argv[2]
    path = sys.argv[3] if len(sys.argv) > 3 else ""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    port = int(os.environ["MASTER_PORT"])
    torch.set_num_threads(1)
    init(kind, rank, world_size, port, path)
    assert dist.get_backend() == "tdist", dist.get_backend()
    assert isinstance(tdist.torch.backend_of(dist.group.WORLD), tdist.torch.ProcessGroupTdist), type(dist.group.WORLD)
    ctx = checks.Context(rank, world_size)
    for suite_name in suite_names:
        suite = __import__(suite_name)
        names = [n for n in vars(suite) if n.startswith("check_") and callable(getattr(suite, n))]
        for name in names:
            try:
                getattr(suite, name)(ctx)
            except Exception:
                print("FAIL %s.%s on rank %d" % (suite_name, name, rank), flush=True)
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)  # do not wait in destroy_process_group for peers that moved on
            print("PASS %s.%s" % (suite_name, name), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
