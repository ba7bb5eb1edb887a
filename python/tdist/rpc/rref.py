"""tdist.rpc.rref: remote references for tdist.rpc: remote() and RRef (docs/rpc.md, "Remote
references").

An RRef names a value that lives on one worker, its owner. Every RRef
object on any worker is a *fork* of it, with an id of its own (the worker
that made the fork, a number); the owner keeps the set of live forks and
drops the value when the set is empty. The protocol:

1. remote(to, fn): the caller makes the RRef id and its own fork, and sends
   create(id, fork, fn, args) to the owner, which runs fn and keeps the
   value (or the exception) with that one fork.
2. An RRef pickled into a call's arguments or result (the only place it may
   be pickled): the sender first registers a new fork for the receiver with
   the owner (add_fork, a synchronous call, or directly on the owner) and
   only then sends it; the receiver's RRef object holds that fork.
3. An RRef object that is garbage collected sends delete(id, fork) to the
   owner -- for the creator's fork only once the creation has been
   answered, so the owner never sees a fork deleted before it was added.
4. to_here() fetches the value from the owner (waiting there until the
   creation is done); local_value() reads it on the owner.

Slots on the owner are made by whichever message about an id comes first:
a fetch or add_fork served before the create (the serving pool may run
them in any order) waits on the same slot.

Forks registered for a call that is never sent (its pickling or sending
failed) are deleted again. Not covered: forks held by a worker that dies
stay registered, and so does a fork whose call failed on the way; the owner
lets go of every value when it shuts down.
"""

import itertools
import threading

from tdist import rpc as _rpc

__all__ = ["RRef", "remote"]


class _Slot:
    """A value an owner keeps, and the forks that hold it."""

    def __init__(self):
        self.ready = threading.Event()
        self.value = None
        self.error = None
        self.forks = set()


class _Owned:
    """This worker's slots, by RRef id."""

    def __init__(self):
        # Reentrant: a collected RRef's __del__ may run inside any of these
        # methods on the same thread (the garbage collector runs at allocations).
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.slots = {}

    def slot(self, rref_id):
        with self.lock:
            slot = self.slots.get(rref_id)
            if slot is None:
                slot = self.slots[rref_id] = _Slot()
            return slot

    def add_fork(self, rref_id, fork):
        with self.lock:
            self.slot(rref_id).forks.add(fork)

    def delete_fork(self, rref_id, fork):
        with self.lock:
            slot = self.slots.get(rref_id)
            if slot is None:
                return
            slot.forks.discard(fork)
            if not slot.forks and slot.ready.is_set():
                del self.slots[rref_id]
                self.changed.notify_all()

    def existing(self, rref_id):
        """The slot of a value some worker still holds; raises if there is none
        (its last fork was deleted, or it never existed)."""
        with self.lock:
            slot = self.slots.get(rref_id)
        if slot is None:
            raise RuntimeError(f"RRef {rref_id}: worker '{_rpc.get_worker_info().name}' keeps no value for it "
                               "(every reference to it was deleted)")
        return slot

    def count(self, at_most=None, timeout=None):
        """How many values this worker keeps, once that is at most `at_most`
        or `timeout` seconds have passed."""
        with self.lock:
            if at_most is not None:
                self.changed.wait_for(lambda: len(self.slots) <= at_most, timeout)
            return len(self.slots)

    def clear(self):
        with self.lock:
            self.slots.clear()


_owned = _Owned()
_numbers = itertools.count(1)
# While tdist.rpc pickles a call or a result, `forks` lists the forks its
# RRefs registered (None otherwise: an RRef may not be pickled then).
_pickling = threading.local()


def _me():
    return _rpc.get_worker_info().id


def _new_id():
    return (_me(), next(_numbers))


def _wait_ready(slot, rref_id, timeout):
    if not slot.ready.wait(timeout):
        raise TimeoutError(f"RRef {rref_id}: its value was not created within {timeout} s")
    if slot.error is not None:
        raise slot.error
    return slot.value


# --- what runs on the owner ----------------------------------------------------


def _create(rref_id, fork, fn, args, kwargs):
    slot = _owned.slot(rref_id)
    _owned.add_fork(rref_id, fork)
    try:
        slot.value = fn(*args, **kwargs)
    except BaseException as e:
        slot.error = e
        slot.ready.set()
        raise
    slot.ready.set()


_create._tdist_label = lambda rref_id, fork, fn, *rest: f"remote({_rpc._qualname(fn)})"  # noqa: SLF001


def _add_fork(rref_id, fork):
    _owned.add_fork(rref_id, fork)


def _delete_fork(rref_id, fork):
    _owned.delete_fork(rref_id, fork)


def _slot_for(rref_id, unconfirmed):
    # A call from the creator whose creation was not answered yet may be
    # served before the creation: it waits on the slot (making it). Any
    # other caller holds a fork the owner knows of, so the slot must exist.
    return _owned.slot(rref_id) if unconfirmed else _owned.existing(rref_id)


def _fetch(rref_id, timeout):
    return _wait_ready(_owned.existing(rref_id), rref_id, timeout)


def _call_method(rref_id, timeout, unconfirmed, name, args, kwargs):
    value = _wait_ready(_slot_for(rref_id, unconfirmed), rref_id, timeout)
    return getattr(value, name)(*args, **kwargs)


def _timeout_s(timeout):
    seconds = _rpc._seconds(timeout, "timeout")  # noqa: SLF001 - one package
    if seconds is None or seconds < 0:
        seconds = _rpc._default_timeout_s()  # noqa: SLF001
    return None if seconds == 0 else seconds


# --- RRef ----------------------------------------------------------------------


class RRef:
    """A reference to a value owned by one worker (torch.distributed.rpc.RRef).

    RRef(value) makes one owned by this worker; remote() makes one owned by
    the callee."""

    def __init__(self, value=None, type_hint=None):
        del type_hint
        self._owner = _me()
        self._id = _new_id()
        self._fork = self._id
        self._created = None  # a Future of the creation (remote() only)
        _owned.add_fork(self._id, self._fork)
        slot = _owned.existing(self._id)
        slot.value = value
        slot.ready.set()

    @classmethod
    def _user(cls, owner, rref_id, fork, created):
        self = cls.__new__(cls)
        self._owner, self._id, self._fork, self._created = owner, rref_id, fork, created
        return self

    def owner(self):
        """The owner's WorkerInfo."""
        return _rpc.get_worker_info(_rpc._agent().worker_info_by_id(self._owner)["name"])  # noqa: SLF001

    def owner_name(self):
        return self.owner().name

    def is_owner(self):
        return self._owner == _me()

    def confirmed_by_owner(self):
        """True once the owner knows this reference (its creation was answered)."""
        return self._created is None or self._created.done()

    def local_value(self):
        """The value, on the owner (waits for its creation)."""
        if not self.is_owner():
            raise RuntimeError(f"RRef {self._id}: local_value() is for its owner, worker '{self.owner_name()}', "
                               f"not this worker ('{_rpc.get_worker_info().name}'); use to_here()")
        if self._created is not None:
            self._created.wait()  # remote() to this worker: the creation first
        return _wait_ready(_owned.existing(self._id), self._id, _timeout_s(-1))

    def to_here(self, timeout=-1.0):
        """The value, copied from the owner (waits for its creation)."""
        if self._created is not None:
            self._created.wait()  # the creation's own error first
        if self.is_owner():
            return _wait_ready(_owned.existing(self._id), self._id, _timeout_s(timeout))
        return _rpc.rpc_sync(self._owner, _fetch, args=(self._id, _timeout_s(timeout)), timeout=timeout)

    def rpc_sync(self, timeout=-1.0):
        """rref.rpc_sync().method(*args) runs the method on the owner's value."""
        return _Proxy(self, _rpc.rpc_sync, timeout)

    def rpc_async(self, timeout=-1.0):
        return _Proxy(self, _rpc.rpc_async, timeout)

    def __reduce__(self):
        forks = getattr(_pickling, "forks", None)
        if forks is None:
            raise RuntimeError("an RRef can only be pickled by tdist.rpc, as an argument or result of a call")
        fork = _new_id()
        if self.is_owner():
            _owned.add_fork(self._id, fork)
        else:
            _rpc.rpc_sync(self._owner, _add_fork, args=(self._id, fork))
        forks.append((self._owner, self._id, fork))  # deleted again if the call is not sent
        return (_rebuild, (self._owner, self._id, fork))

    def __del__(self):
        try:
            owner, rref_id, fork, created = self._owner, self._id, self._fork, self._created
        except AttributeError:  # __init__ failed
            return
        if _rpc._state.agent is None:  # noqa: SLF001 - shut down: the owner has let go of everything
            return

        def delete(_=None):
            _delete(owner, rref_id, fork)

        # Never before the owner has the fork: after the creation's answer.
        if created is not None and not created.done():
            created.add_done_callback(delete)
        else:
            delete()

    def __repr__(self):
        return f"RRef(owner={self._owner}, id={self._id}, fork={self._fork})"


def _delete(owner, rref_id, fork):
    """Tells the owner a fork is gone (never raises: best effort)."""
    try:
        if owner == _me():
            _owned.delete_fork(rref_id, fork)
        else:
            _rpc.rpc_async(owner, _delete_fork, args=(rref_id, fork))
    except Exception:  # shut down meanwhile: nothing to tell
        pass


def _abandon(forks):
    """Deletes forks registered for a call that was never sent."""
    for owner, rref_id, fork in forks:
        _delete(owner, rref_id, fork)


def _rebuild(owner, rref_id, fork):
    return RRef._user(owner, rref_id, fork, None)  # noqa: SLF001


class _Proxy:
    def __init__(self, rref, call, timeout):
        self._rref, self._call, self._timeout = rref, call, timeout

    def __getattr__(self, name):
        rref, call, timeout = self._rref, self._call, self._timeout

        def method(*args, **kwargs):
            unconfirmed = not rref.confirmed_by_owner()
            result = call(rref._owner, _call_method,  # noqa: SLF001
                          args=(rref._id, _timeout_s(timeout), unconfirmed, name, args, kwargs), timeout=timeout)
            if isinstance(result, _rpc.Future):
                # The RRef lives until the call is served: its deletion could
                # otherwise reach the owner first.
                result.add_done_callback(lambda _, keep=rref: None)
            return result

        return method


def remote(to, func, args=None, kwargs=None, timeout=-1.0):
    """Runs func(*args, **kwargs) on worker `to`, which keeps the result; returns
    an RRef to it at once (torch's remote())."""
    if not callable(func):
        raise TypeError(f"func must be callable, not {type(func).__name__}")
    owner = _rpc._agent().worker_info_by_name(_rpc._worker_name(to))["id"]  # noqa: SLF001
    rref_id = _new_id()
    created = _rpc.rpc_async(owner, _create, args=(rref_id, rref_id, func, tuple(args or ()), dict(kwargs or {})),
                             timeout=timeout)
    return RRef._user(owner, rref_id, rref_id, created)  # noqa: SLF001


def _owned_count(at_most=None, timeout=None):
    """Values this worker keeps for RRefs; with `at_most`, once that is at
    most so many (deletions arrive asynchronously) or `timeout` passed."""
    return _owned.count(at_most, timeout)
