"""paddle's auto-parallel API (ProcessMesh, shard_tensor, reshard) on tdist
against paddle's own on CPU. paddle_programs/auto_parallel_placements.py
runs under ``python3 -m tdist.paddle.launch`` as written and under
``python3 -m paddle.distributed.launch`` with its one tdist import line
replaced by paddle's, over transitions between Replicate, Shard and Partial
layouts: every transition at 2 ranks (a 1-D mesh), on an even and an uneven
shape; a set at 4 ranks (a 2 x 2 mesh; paddle's own, run over every pair or
on uneven shapes, ends in an abort inside gloo once a transition it cannot
do on CPU has left its ranks out of step).

- Where paddle's runs, every rank's blocks before and after the reshard are
  the same on tdist, bit for bit.
- Where paddle's cannot run on CPU (its CPU kernels lack reduce_scatter and
  all_to_all), tdist's reshard must still give the layout that shard_tensor
  makes straight from the whole tensor, with no communication.
docs/mesh.md lists the transitions paddle's cannot run."""

import json
import os

import pytest

from paddle_launch import launch

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "paddle_programs", "auto_parallel_placements.py")
SWAP = ("import tdist.paddle as dist", "import paddle.distributed as dist")
PAIRS_4 = ("S0,R>R,R;R,S1>R,R;S0,S1>R,R;S0,S0>R,R;P,R>R,R;R,P>R,R;P,P>R,R;R,R>S0,S1;R,R>P,R;S0,R>S0,S1;"
           "R,S1>S0,S1;P,R>S0,R;R,P>R,S1;S0,P>S0,R;S0,S1>S0,R;S0,S1>R,S1")
CASES = {2: {"SHAPES": "8x6;7x5"}, 4: {"SHAPES": "8x8", "PAIRS": PAIRS_4}}


def run(nprocs, library, tmp_path):
    """Every rank's rows: {(shape, layout): block} made straight, and
    {(shape, src, dst): row} of the transitions."""
    out = tmp_path / library
    out.mkdir()
    launch(PROGRAM, nprocs, library, str(tmp_path), SWAP, dict(CASES[nprocs], AUTO_PARALLEL_OUT=str(out)))
    ranks = []
    for r in range(nprocs):
        direct, moves = {}, {}
        for line in open(out / f"rank{r}.jsonl"):
            row = json.loads(line)
            shape = tuple(row["shape"])
            if "layout" in row:
                direct[(shape, row["layout"])] = row["direct"]
            else:
                moves[(shape, row["src"], row["dst"])] = row
        ranks.append((direct, moves))
    return ranks


@pytest.mark.parametrize("nprocs", [2, 4])
def test_reshard_gives_paddles_blocks_and_runs_where_paddles_cannot_on_cpu(nprocs, tmp_path):
    ours = run(nprocs, "tdist", tmp_path)
    theirs = run(nprocs, "paddle", tmp_path)
    compared, paddle_cannot = 0, {}
    for r in range(nprocs):
        (our_direct, our_moves), (their_direct, their_moves) = ours[r], theirs[r]
        assert our_direct == their_direct, f"rank {r}: shard_tensor's blocks differ from paddle's"
        assert sorted(our_moves) == sorted(their_moves)
        for key, row in our_moves.items():
            assert "error" not in row, f"rank {r}, {key}: {row['error']}"
            theirs_row = their_moves[key]
            if "error" in theirs_row:
                paddle_cannot[key] = theirs_row["error"]
                shape, _, dst = key
                if "P" not in dst.split(","):  # a Partial layout may split its sum another way
                    assert row["after"] == our_direct[(shape, dst)], f"rank {r}, {key}"
                continue
            assert (row["before"], row["after"]) == (theirs_row["before"], theirs_row["after"]), f"rank {r}, {key}"
            compared += 1
    print(f"{nprocs} ranks: {compared} rank-transitions equal to paddle's; paddle cannot on CPU:")
    for (shape, src, dst), error in sorted(paddle_cannot.items()):
        print(f"  {shape}: {src} -> {dst}: {error}")
    # Not an empty comparison: paddle runs most of these on CPU.
    assert compared >= nprocs * (12 if nprocs == 4 else 20)


def test_every_transition_on_a_2x2_mesh_gives_the_blocks_shard_tensor_cuts(tmp_path):
    """tdist alone, every one of the 256 pairs of layouts of a 2 x 2 mesh, on
    an even and an uneven shape: no error, and every layout without Partial
    ends with the blocks shard_tensor cuts straight."""
    out = tmp_path / "out"
    out.mkdir()
    launch(PROGRAM, 4, "tdist", str(tmp_path), SWAP, {"SHAPES": "8x6;7x5", "AUTO_PARALLEL_OUT": str(out)})
    checked = 0
    for r in range(4):
        direct, moves = {}, []
        for line in open(out / f"rank{r}.jsonl"):
            row = json.loads(line)
            if "layout" in row:
                direct[(tuple(row["shape"]), row["layout"])] = row["direct"]
            else:
                moves.append(row)
        assert len(moves) == 2 * 16 * 16
        for row in moves:
            assert "error" not in row, f"rank {r}: {row}"
            if "P" not in row["dst"].split(","):
                assert row["after"] == direct[(tuple(row["shape"]), row["dst"])], f"rank {r}: {row['src']} -> {row['dst']}"
                checked += 1
    assert checked == 4 * 2 * 16 * 9
