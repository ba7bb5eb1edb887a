"""A job that starts and ends at once: every rank calls init_process_group
and exits right away, rank 0 (the store's host) included. No rank may fail
because rank 0's store went while it still read its start-up keys. Run
TDIST_STARTUP_RUNS times at 4 ranks (200 in the full suite that CI runs,
TDIST_FULL_SUITE=1; 50 elsewhere), through the Python package and through
the torch plugin. On the plugin's path, torch's TCPStore names each
client it accepts by a reverse lookup of its IPv4-mapped address
(::ffff:127.0.0.1), which /etc/hosts does not hold, so the lookup goes to
the DNS server; where that drops one query in ten, glibc's 5 s timeout
stalls the start-up (torch's, not the plugin's), 100 s over the 200 runs.
The ranks run with RES_OPTIONS="timeout:1 attempts:1" (ctest sets it for
every Python test; this test sets it for pytest run by hand too)."""

import atexit
import gc
import importlib
import multiprocessing
import os
import tempfile
import traceback

import pytest

import tdist
from harness import FULL_SUITE
from tdist._spawn import free_port

RUNS = {path: int(os.environ.get("TDIST_STARTUP_RUNS", 200 if FULL_SUITE else 50)) for path in ("python", "torch")}
WORLD = 4


def _init_and_exit(path, rank, port, out_dir):
    try:
        if path == "python":
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                              WORLD_SIZE=str(WORLD))
            tdist.init_process_group("tdist")
        else:
            import torch.distributed as td

            importlib.import_module("tdist.torch")  # registers "tdist"
            td.init_process_group("tdist", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    except BaseException:
        with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)
    if path == "torch":
        # What the interpreter's exit would run of the plugin's (its leave
        # protocol; a forked child skips exit handlers). Only that: the
        # others are pytest's, whose temporary folders they delete.
        backend = importlib.import_module("tdist.torch.backend")
        if not backend._LEAVING:
            os._exit(3)  # the plugin registered no leave protocol
        atexit.unregister(backend._leave)
        backend._leave()
    os._exit(0)  # at once: no destroy, no interpreter shutdown to slow rank 0 down


def _port_was_taken(out_dir):
    """Whether rank 0 failed only because its store could not listen: the
    port free_port picked was taken by another process of the machine (a
    test running beside this one) before the store listened. That run did
    not try the start-up under test."""
    try:
        with open(os.path.join(out_dir, "rank0.txt")) as f:
            error = f.read()
    except FileNotFoundError:
        return False
    return "EADDRINUSE" in error or "Address already in use" in error


def _run_many(path):
    # The forked ranks' collections then leave this process's objects (torch's,
    # by the plugin's run) alone instead of copying every page they sit on.
    gc.collect()
    gc.freeze()
    try:
        _run_many_frozen(path)
    finally:
        gc.unfreeze()


def _run_many_frozen(path):
    ctx = multiprocessing.get_context("fork")
    failures = []
    run, taken = 0, []
    while run < RUNS[path]:
        port = free_port()
        with tempfile.TemporaryDirectory(prefix="tdist_startup_") as out_dir:
            procs = [ctx.Process(target=_init_and_exit, args=(path, r, port, out_dir)) for r in range(WORLD)]
            for p in procs:
                p.start()
            # Once rank 0 has failed the others wait for a store that never
            # comes: give them a few seconds, not the minute.
            procs[0].join(60)
            for p in procs[1:]:
                p.join(60 if procs[0].exitcode == 0 else 5)
            hung = [r for r, p in enumerate(procs) if p.is_alive()]
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()
            codes = [p.exitcode for p in procs]
            if codes[0] == 1 and len(taken) < 5 and _port_was_taken(out_dir):
                taken.append(port)
                continue  # the same run again, on another port
            if hung or any(codes):
                errors = [open(os.path.join(out_dir, name)).read() for name in sorted(os.listdir(out_dir))]
                failures.append((run, codes, hung, errors[:1]))
        run += 1
    assert not failures, f"{len(failures)} of {RUNS[path]} runs failed (run, exit codes, ranks still running " \
        f"after 60 s, first error): {failures[:3]}"
    if taken:
        print(f"{len(taken)} runs were made again: another process took their port first ({taken})")


def test_init_then_exit_never_fails_python_package():
    _run_many("python")


def test_init_then_exit_never_fails_torch_plugin(monkeypatch):
    pytest.importorskip("torch")
    try:
        importlib.import_module("tdist.torch")
    except ImportError as error:
        pytest.skip(f"the torch plugin is not built: {error}")
    monkeypatch.setenv("RES_OPTIONS", "timeout:1 attempts:1")  # read by each rank's first lookup
    _run_many("torch")
