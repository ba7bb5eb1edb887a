"""all_reduce in a loop across testbed hosts until a peer is lost: prints
"looping <rank>" once it has run one, then "error <rank>: <message>" when
a call fails, and exits 3 (test_testbed_host_killed.py kills a host,
test_testbed_link_cut.py cuts a link mid-loop). TESTBED_LOOP_TIMEOUT: the
group's timeout in seconds (60)."""

import os
import sys
from datetime import timedelta

import numpy as np

import tdist


def main():
    timeout = float(os.environ.get("TESTBED_LOOP_TIMEOUT", "60"))
    tdist.init_process_group("tdist", timeout=timedelta(seconds=timeout))
    r = tdist.get_rank()
    x = np.ones(1 << 20, np.float32)
    try:
        for i in range(1_000_000):
            tdist.all_reduce(x)
            if i == 0:
                print("looping", r, flush=True)
    except tdist.DistError as e:
        print(f"error {r}: {e}", flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
