"""One rank of the spec-program test: runs each program of spec_programs/ as
__main__ (its text executed as is, one after another in this process, each
with its own TCPStore port), captures what it prints and destroys its
process group before the next. Rank 0 picks each next port just before the
program that needs it and broadcasts it over the group it is about to
destroy (as tests/python/spec_driver.py does): ports picked all at the start
stayed unused for up to a minute, and another test's connection once took
one meanwhile ("Address already in use"). With "gloo" among the backends,
the programs gloo supports run a second time with the backend name switched
back to the spec's "gloo", for comparison. Prints one JSON object,
{"program/backend": {"stdout": ..., "error": ...}}, and exits 1 if a
program failed.

    torch_spec_runner.py PORT BACKENDS PROGRAM...
"""

import contextlib
import io
import json
import os
import sys
import traceback
from datetime import timedelta

import torch  # noqa: F401  imported once, as every program imports it
import torch.distributed as dist

from torch_harness import free_port

STORE_TIMEOUT = timedelta(seconds=30)


def _init_with_timeout(init):
    """init_process_group with a 30 s timeout unless the program gives one:
    with torch's default (30 min) the other ranks of a program whose rank 0
    could not listen on its port would wait past the harness's deadline
    instead of failing, and the harness could not retry in time."""
    def init_process_group(*args, **kwargs):
        kwargs.setdefault("timeout", STORE_TIMEOUT)
        return init(*args, **kwargs)
    return init_process_group


dist.init_process_group = _init_with_timeout(dist.init_process_group)
HERE = os.path.dirname(os.path.abspath(__file__))
GLOO_SUPPORTS = {"broadcast", "all_reduce", "reduce", "all_gather", "gather", "barrier"}


def run_program(name, backend, port, last):
    """Runs one program on `port`; returns its result and the port of the next one."""
    path = os.path.join(HERE, "spec_programs", name + ".py")
    with open(path) as f:
        source = f.read()
    if backend != "tdist":
        assert source.count('init_process_group("tdist"') == 1, path
        source = source.replace('init_process_group("tdist"', 'init_process_group("%s"' % backend)
    os.environ["MASTER_PORT"] = str(port)
    out = io.StringIO()
    error = None
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, path, "exec"), {"__name__": "__main__", "__file__": path})
    except Exception:
        error = traceback.format_exc()
    next_port = None
    if dist.is_initialized():
        if error is None:
            try:
                if not last:
                    chosen = [free_port() if dist.get_rank() == 0 else None]
                    dist.broadcast_object_list(chosen, src=0)
                    next_port = chosen[0]
                dist.barrier()  # no rank tears down while another still reads
            except Exception:  # a peer failed the program and left
                error = traceback.format_exc()
        dist.destroy_process_group()
    elif error is None and not last:
        error = "the program destroyed its process group: no group to agree on the next program's port"
    return {"stdout": out.getvalue(), "error": error}, next_port


def main():
    port = int(sys.argv[1])
    backends = sys.argv[2].split(",")
    programs = sys.argv[3:]
    results = {}
    runs = [(name, backend) for name in programs for backend in backends
            if backend == "tdist" or name in GLOO_SUPPORTS]
    for i, (name, backend) in enumerate(runs):
        result, port = run_program(name, backend, port, last=i + 1 == len(runs))
        results[name + "/" + backend] = result
        if result["error"]:
            break  # the other ranks fail or time out in this program too
    print(json.dumps(results))
    # The harness shows the output of ranks that fail, and retries a run
    # whose rank 0 could not listen on its port.
    sys.exit(1 if any(r["error"] for r in results.values()) else 0)


if __name__ == "__main__":
    main()
