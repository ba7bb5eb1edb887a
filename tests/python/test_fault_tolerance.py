"""tdist.revoke, tdist.shrink and tdist.agree from Python: ranks killed with
SIGKILL before and during the calls (forked processes over a file:// store,
which no rank hosts), a revoke that reaches a rank in no call, non-members
and bad timeouts. Every survivor's result is checked against what is
computed here from the known survivors; the shrunk group's all_reduce
against sums computed here."""

import os
import pickle
import signal
import tempfile
import time
import traceback
from datetime import timedelta

import numpy as np
import pytest

import tdist
from harness import run_ranks

DEADLINE = 60  # seconds for a whole multi-rank run
PG_TIMEOUT = timedelta(seconds=40)  # far beyond what these calls may take
FT_TIMEOUT = timedelta(seconds=30)


def _flag(rank):
    """Every bit but the rank's: an AND of flags has exactly their bits cleared."""
    return ~(1 << rank)


def _and_of(ranks):
    out = -1
    for r in ranks:
        out &= _flag(r)
    return out


def _run_with_victims(job, n, victims, env=None):
    """Runs job(rank, n, store) on n forked ranks after file:// rendezvous;
    returns {rank: value} of the survivors. The ranks in `victims` must end
    by SIGKILL; survivors meet at a store barrier before they leave."""
    with tempfile.TemporaryDirectory(prefix="tdist_ft_") as tmp:
        pids = {}
        for rank in range(n):
            pid = os.fork()
            if pid == 0:  # the rank
                result = None
                try:
                    for key, value in (env or {}).get(rank, {}).items():
                        os.environ[key] = value
                    store = tdist.FileStore(os.path.join(tmp, "test_store"), n)
                    tdist.init_process_group("tdist", init_method="file://" + os.path.join(tmp, "pg_store"),
                                             rank=rank, world_size=n, timeout=PG_TIMEOUT)
                    result = ("ok", job(rank, n, store))
                    if store.add("survivors_done", 1) == n - len(victims):
                        store.set("survivors_done/all", "1")
                    store.wait(["survivors_done/all"])
                except BaseException:  # reported to the parent
                    result = ("error", traceback.format_exc())
                with open(os.path.join(tmp, f"rank{rank}.pkl"), "wb") as f:
                    pickle.dump(result, f)
                os._exit(0)
            pids[pid] = rank
        deadline = time.monotonic() + DEADLINE
        statuses = {}
        while pids:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                if time.monotonic() > deadline:
                    for p in pids:
                        os.kill(p, signal.SIGKILL)
                        os.waitpid(p, 0)
                    raise AssertionError(f"ranks {sorted(pids.values())} still running after {DEADLINE} s")
                time.sleep(0.01)  # the parent polls its children; no rank waits on it
                continue
            statuses[pids.pop(pid)] = status
        results = {}
        for rank in range(n):
            status = statuses[rank]
            if rank in victims:
                assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (rank, status)
                continue
            with open(os.path.join(tmp, f"rank{rank}.pkl"), "rb") as f:
                state, value = pickle.load(f)
            if state != "ok":
                raise AssertionError(f"rank {rank} failed:\n{value}")
            results[rank] = value
        return results


def _shrunk_facts(shrunk, rank):
    """What the parent checks of a shrunk group: members, this rank's place,
    and a SUM all_reduce of (old rank + 1) * (i % 7 + 1)."""
    x = (np.arange(1001) % 7 + 1).astype(np.float64) * (rank + 1)
    tdist.all_reduce(x, group=shrunk)
    return {"ranks": tdist.get_process_group_ranks(shrunk), "rank": tdist.get_rank(shrunk),
            "size": tdist.get_world_size(shrunk), "sum": x.tolist()}


def _check_shrunk(results, survivors):
    weight = sum(r + 1 for r in survivors)
    want_sum = ((np.arange(1001) % 7 + 1) * weight).astype(np.float64).tolist()
    for rank, r in results.items():
        assert r["ranks"] == survivors, r["ranks"]
        assert r["rank"] == survivors.index(rank) and r["size"] == len(survivors)
        assert r["sum"] == want_sum


def _kill_before_job(victim):
    def job(rank, n, store):
        x = np.ones(8, np.float32)
        tdist.all_reduce(x)
        # Dying as soon as its call returned, the victim could cut off a
        # message of it that a peer still reads.
        if store.add("first_done", 1) == n:
            store.set("first_done/all", "1")
        store.wait(["first_done/all"])
        if rank == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            tdist.all_reduce(x)
            raise AssertionError("an all_reduce completed although a rank was killed")
        except tdist.DistError as e:
            failure = str(e)
        tdist.revoke()
        agreed = tdist.agree(_flag(rank), timeout=FT_TIMEOUT)
        shrunk = tdist.shrink(timeout=FT_TIMEOUT)
        return dict(_shrunk_facts(shrunk, rank), agreed=agreed, failure=failure)
    return job


@pytest.mark.parametrize("n,victim", [(3, 1), (4, 2), (5, 0)])
def test_survivors_agree_and_shrink_after_a_kill(n, victim):
    results = _run_with_victims(_kill_before_job(victim), n, [victim])
    survivors = [r for r in range(n) if r != victim]
    assert sorted(results) == survivors
    _check_shrunk(results, survivors)
    for r in results.values():
        assert f"rank {victim}" in r["failure"], r["failure"]
        assert r["agreed"] == _and_of(survivors)


def _agree_race_job(rank, n, store):
    agreed = tdist.agree(_flag(rank), timeout=FT_TIMEOUT)
    store.set(f"agreed/{rank}", str(agreed))
    return agreed


def test_agree_gives_one_value_when_a_rank_dies_in_it():
    n, victim = 4, 2
    env = {victim: {"TDIST_TESTONLY_FT_KILL_AFTER_JOIN": str(victim)}}
    results = _run_with_victims(_agree_race_job, n, [victim], env=env)
    values = set(results.values())
    # Whether the victim's flag counts depends on who decided when; every
    # survivor has the same value either way.
    assert len(values) == 1, results
    assert values <= {_and_of([0, 1, 3]), _and_of([0, 1, 2, 3])}, results


def _revoke_job(rank, n, store):
    x = np.ones(4, np.float32)
    errors = []
    if rank == 0:
        tdist.revoke()
        store.set("revoked", "1")
    else:
        store.wait(["revoked"])  # in no call while rank 0 revokes
        try:
            tdist.all_reduce(x)
        except tdist.DistError as e:
            errors.append(str(e))
    try:
        tdist.barrier()
    except tdist.DistError as e:
        errors.append(str(e))
    agreed = tdist.agree(_flag(rank), timeout=FT_TIMEOUT)
    shrunk = tdist.shrink(timeout=FT_TIMEOUT)
    return dict(_shrunk_facts(shrunk, rank), agreed=agreed, errors=errors)


def test_revoke_reaches_ranks_in_no_call_and_agree_shrink_still_work():
    n = 3
    results = _run_with_victims(_revoke_job, n, [])
    _check_shrunk(results, [0, 1, 2])
    for rank, r in results.items():
        assert r["agreed"] == _and_of([0, 1, 2])
        assert len(r["errors"]) == (1 if rank == 0 else 2), r["errors"]
        assert all("revoke" in e for e in r["errors"]), r["errors"]


def _non_member_job(rank, n):
    sub = tdist.new_group([0])
    out = {}
    if rank == 1:
        for name, call in (("revoke", lambda: tdist.revoke(sub)), ("shrink", lambda: tdist.shrink(sub)),
                           ("agree", lambda: tdist.agree(1, sub))):
            try:
                call()
                out[name] = None
            except tdist.DistInvalidArgument as e:
                out[name] = str(e)
        return out
    for timeout in (timedelta(0), -1):
        try:
            tdist.agree(1, sub, timeout=timeout)
            out[f"timeout {timeout}"] = None
        except tdist.DistInvalidArgument as e:
            out[f"timeout {timeout}"] = str(e)
    out["agreed"] = tdist.agree(6, sub)
    alone = tdist.shrink(sub)
    out["alone"] = (tdist.get_world_size(alone), tdist.get_process_group_ranks(alone))
    return out


def test_non_members_and_bad_timeouts_are_refused():
    results = run_ranks(_non_member_job, 2)
    for name in ("revoke", "shrink", "agree"):
        assert results[1][name] and f"{name}: this process is not a member" in results[1][name], results[1]
    assert "agree: timeout must be positive" in results[0]["timeout 0:00:00"]
    assert "agree: timeout must be positive" in results[0]["timeout -1"]
    assert results[0]["agreed"] == 6
    assert results[0]["alone"] == (1, [0])
