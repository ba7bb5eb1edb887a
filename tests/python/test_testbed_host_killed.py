"""tools/testbed.py (docs/testbed.md): a whole host killed mid all_reduce
across 2 hosts x 2 ranks; both ranks of the other host fail with errors
naming a rank, at least one a lost one.
Needs root, iproute2 and tdistrun; skipped elsewhere, saying so. A ctest
entry of its own (python_testbed_host_killed), which can run beside the other
testbed tests: most of its time goes to waiting for the fault to be
noticed."""

import os
import re

import pytest

from testbed_tool import TDISTRUN, loop_then, namespaces_unavailable

REASON = namespaces_unavailable() or (None if os.path.exists(TDISTRUN) else "tdistrun is not built")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def test_a_host_killed_mid_all_reduce_is_named_by_the_others():
    (out, code), _ = loop_then(lambda bed: bed.kill_host(1), group_timeout=60)
    errors = [line for line in out.splitlines() if "error " in line]
    assert len(errors) == 2, out[-3000:]
    # Both name a rank; at least one names a lost one (the other may see
    # its host-mate leave first).
    assert all(re.search(r"ranks? \d", e.split("error ", 1)[1]) for e in errors), errors
    assert any(("rank 2" in e or "rank 3" in e) for e in errors), errors
    assert code != 0
