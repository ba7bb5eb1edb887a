"""One rank of the spec-program test: runs each program of spec_programs/ as
__main__ (its text executed as is, one after another in this process, each
with its own TCPStore port), captures what it prints and destroys its
process group before the next. With "gloo" among the backends, the programs
gloo supports run a second time with the backend name switched back to the
spec's "gloo", for comparison. Prints one JSON object,
{"program/backend": {"stdout": ..., "error": ...}}, and exits 1 if a
program failed.

    torch_spec_runner.py PORTS BACKENDS PROGRAM...
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


def run_program(name, backend, port):
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
    if dist.is_initialized():
        if error is None:
            dist.barrier()  # no rank tears down while another still reads
        dist.destroy_process_group()
    return {"stdout": out.getvalue(), "error": error}


def main():
    ports = [int(p) for p in sys.argv[1].split(",")]
    backends = sys.argv[2].split(",")
    programs = sys.argv[3:]
    results = {}
    runs = [(name, backend) for name in programs for backend in backends
            if backend == "tdist" or name in GLOO_SUPPORTS]
    assert len(runs) <= len(ports), "need %d ports" % len(runs)
    for (name, backend), port in zip(runs, ports):
        results[name + "/" + backend] = run_program(name, backend, port)
        if results[name + "/" + backend]["error"]:
            break  # the other ranks fail or time out in this program too
    print(json.dumps(results))
    # The harness shows the output of ranks that fail, and retries a run
    # whose rank 0 could not listen on its port.
    sys.exit(1 if any(r["error"] for r in results.values()) else 0)


if __name__ == "__main__":
    main()
