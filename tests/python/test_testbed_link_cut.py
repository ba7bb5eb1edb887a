"""tools/testbed.py (docs/testbed.md): a link cut mid all_reduce across 2
hosts x 2 ranks (group timeout 5 s); every rank on both sides fails within
the timeout naming ranks it cannot reach, and the node cut off from the
agents' store leaves.
Needs root, iproute2 and tdistrun; skipped elsewhere, saying so. A ctest
entry of its own (python_testbed_link_cut), which can run beside the other
testbed tests: most of its time goes to waiting for the fault to be
noticed."""

import os
import re

import pytest

from testbed_tool import TDISTRUN, loop_then, namespaces_unavailable

REASON = namespaces_unavailable() or (None if os.path.exists(TDISTRUN) else "tdistrun is not built")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def test_a_cut_link_gives_errors_within_the_timeout_naming_the_unreachable_ranks():
    results = loop_then(lambda bed: bed.link_down(1), group_timeout=5)
    for host, (out, code) in enumerate(results):
        errors = [line for line in out.splitlines() if "error " in line]
        assert len(errors) == 2 and code != 0, out[-3000:]
        # Every error names a rank. The first rank of a side to time out
        # names whom it waited for; its host-mate may instead see that rank
        # leave ("rank 0 died or closed its connection"). On each side the
        # errors name ranks of the other side, the ones it cannot reach (a
        # rank whose host's leader is the stuck one names the leader, over
        # shared memory).
        assert all(re.search(r"ranks? \d", e.split("error ", 1)[1]) for e in errors), errors
        assert any("Timed out after 5000 ms waiting for rank" in e for e in errors), errors
        far = ("2", "3") if host == 0 else ("0", "1")
        assert any(any(f"rank {r}" in e.split("waiting for", 1)[-1] or f", {r}" in e for r in far)
                   for e in errors if "waiting for" in e), errors
    # The node cut off from the agents' store says so and leaves (read_timeout).
    assert "lost the node agents' store" in results[1][0], results[1][0][-3000:]
