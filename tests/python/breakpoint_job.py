"""Run by test_debug.py as `python3 breakpoint_job.py DIR`: two ranks; rank 0
stops in tdist.breakpoint() and reads its debugger's commands from standard
input. The commands test_debug.py feeds create DIR/flag from the caller's
frame; each rank then writes DIR/after<rank> saying whether the flag
existed when it left the breakpoint."""

import os
import sys
from datetime import timedelta

import tdist as dist


def rank_main(rank, out_dir):
    dist.init_process_group("tdist", timeout=timedelta(seconds=60))
    flag = os.path.join(out_dir, "flag")  # noqa: F841 - the debugger's commands use it
    marker = f"marker-of-rank-{rank}"  # noqa: F841 - the debugger prints it
    dist.breakpoint(rank=0)
    # The other rank gets here only once rank 0 continued, after its
    # debugger ran the commands that create the flag.
    with open(os.path.join(out_dir, f"after{rank}"), "w") as f:
        f.write("flag there" if os.path.exists(os.path.join(out_dir, "flag")) else "flag missing")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    dist.spawn(rank_main, args=(sys.argv[1],), nprocs=2, start_method="fork", timeout=60)
