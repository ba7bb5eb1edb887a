"""paddle's ReduceOp (plain ints, as paddle defines them) and their tdist
counterparts."""

import tdist


class ReduceOp:
    """The reduction of all_reduce, reduce and reduce_scatter:
    ``ReduceOp.SUM``, ``MAX``, ``MIN``, ``PROD``, ``AVG``."""

    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3
    AVG = 4


_TO_TDIST = {
    ReduceOp.SUM: tdist.ReduceOp.SUM,
    ReduceOp.MAX: tdist.ReduceOp.MAX,
    ReduceOp.MIN: tdist.ReduceOp.MIN,
    ReduceOp.PROD: tdist.ReduceOp.PRODUCT,
    ReduceOp.AVG: tdist.ReduceOp.AVG,
}


def to_tdist(op, fn):
    """tdist's ReduceOp for paddle's `op`; ValueError (paddle's) for others."""
    if isinstance(op, bool) or not isinstance(op, int) or op not in _TO_TDIST:
        raise ValueError(f"Unknown reduce_op type for {fn}: {op!r} (expected ReduceOp.SUM, MAX, MIN, PROD or AVG)")
    return _TO_TDIST[op]
