"""The spec's eleven test programs (spec 002: send, recv, broadcast,
all_reduce, reduce, all_gather, gather, scatter, reduce_scatter, all_to_all,
barrier; send and recv share one program) run on backend "tdist" at 2 and 4
ranks. What each rank prints must equal the output computed here with torch
from the programs' known inputs, and, at 2 ranks for the programs gloo
supports, what the same program prints on gloo."""

import json
import os
import re

import pytest
import torch

from torch_harness import check_all_ok, run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = "/work/shared/spec/002_b629004e7b9a36c9.txt"
PROGRAMS = ["send_recv", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter",
            "reduce_scatter", "all_to_all", "barrier"]
GLOO_SUPPORTS = {"broadcast", "all_reduce", "reduce", "all_gather", "gather", "barrier"}


def expected_output(name, rank, world_size):
    """What the program prints on `rank`, from its inputs and torch's printing."""
    ranks = range(world_size)
    total = sum(r + 1 for r in ranks)
    if name == "send_recv":
        return "%s\n" % torch.tensor([1, 2, 3]).to(torch.float32) if rank == 1 else ""
    if name == "broadcast":
        return "Rank %d: %s\n" % (rank, torch.tensor([0]) + 1)
    if name == "all_reduce":
        return "Rank %d: %s\n" % (rank, torch.tensor([total]))
    if name == "reduce":
        return "Reduced result: %s\n" % torch.tensor([total]) if rank == 0 else ""
    if name == "all_gather":
        return "Rank %d: %s\n" % (rank, [torch.tensor([r]) for r in ranks])
    if name == "gather":
        return "Gathered result: %s\n" % [torch.tensor([r]) for r in ranks] if rank == 0 else ""
    if name == "scatter":
        return "Rank %d: %s\n" % (rank, torch.tensor([rank]).to(torch.float32))
    if name == "reduce_scatter":
        return "Rank %d: %s\n" % (rank, torch.tensor([total]).to(torch.float32))
    if name == "all_to_all":
        return "Rank %d: %s\n" % (rank, torch.tensor(list(ranks), dtype=torch.int))
    if name == "barrier":
        return "Rank %d reached barrier.\nRank %d passed barrier.\n" % (rank, rank)
    raise ValueError(name)


@pytest.mark.parametrize("world_size", [2, 4])
def test_spec_programs(world_size):
    # The send/recv program hard-codes world_size=2.
    programs = [p for p in PROGRAMS if world_size == 2 or p != "send_recv"]
    # The comparison with gloo runs once, at 2 ranks, to keep the test short.
    with_gloo = world_size == 2
    runs = len(programs) + (len([p for p in programs if p in GLOO_SUPPORTS]) if with_gloo else 0)
    backends = "tdist,gloo" if with_gloo else "tdist"
    results = run_ranks("torch_spec_runner.py", world_size, ["{ports}", backends] + programs, ports=runs)
    check_all_ok(results)
    for r in results:
        outputs = json.loads(r.stdout.strip().splitlines()[-1])
        for name in programs:
            got = outputs[name + "/tdist"]
            assert got["error"] is None, "rank %d, %s on tdist:\n%s" % (r.rank, name, got["error"])
            assert got["stdout"] == expected_output(name, r.rank, world_size), (name, r.rank, got["stdout"])
            if with_gloo and name in GLOO_SUPPORTS:
                gloo = outputs[name + "/gloo"]
                assert gloo["error"] is None, "rank %d, %s on gloo:\n%s" % (r.rank, name, gloo["error"])
                assert gloo["stdout"] == got["stdout"], (name, r.rank, gloo["stdout"], got["stdout"])


def _words(text):
    return " ".join(text.split())


@pytest.mark.skipif(not os.path.exists(SPEC), reason="the spec is not on this machine")
def test_programs_are_the_specs():
    """Each program's body is the spec's text; only the documented lines differ."""
    spec = _words(open(SPEC, encoding="utf-8").read())
    for name in PROGRAMS:
        source = open(os.path.join(HERE, "spec_programs", name + ".py")).read()
        if name == "send_recv":
            lines = [l for l in source.splitlines()
                     if l and not l.startswith("#") and l not in ("import os", "import tdist.torch")]
            body = "\n".join(lines).replace('"tdist", rank=int(os.environ["RANK"])', '"gloo", rank=0')
        else:
            body = source.rsplit("\n\n", 1)[1]
        assert _words(body) in spec, name
        assert len(re.findall(r"\bdist\.\w+\(", body)) >= 1
