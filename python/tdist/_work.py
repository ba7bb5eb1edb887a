"""Work handles and futures of asynchronous operations (async_op=True).

tdist's C++ side writes into the user's arrays by address, so an array must
live until the operation completes even if the user drops every reference to
it and to the handle. Each handle holds its arrays, and every pending handle
is kept in ``_pending`` until its operation has completed.
"""

import sys
import threading
import traceback

from tdist import _C

# Handles of operations that may still be running; pruned on every new one.
_pending = []
_pending_lock = threading.Lock()


def wrap(c_work, op, keep=(), outputs=()):
    """A Work for `c_work` (None when the operation already finished or this
    rank is not in the group), holding `keep` alive until it completes."""
    if c_work is None:
        return None
    work = Work(c_work, op, keep, list(outputs))
    with _pending_lock:
        _pending[:] = [w for w in _pending if not w._work.is_completed()]
        if not c_work.is_completed():
            _pending.append(work)
    return work


class Work:
    """A handle to one operation, as returned with ``async_op=True`` and by
    ``isend``/``irecv``/``batch_isend_irecv`` (torch's ``Work``)."""

    def __init__(self, c_work, op, keep, outputs):
        self._work = c_work
        self._op = op
        self._keep = keep
        self._outputs = outputs
        self._group = None  # set for receives, to translate source_rank()

    def wait(self, timeout=None):
        """Blocks until the operation completes and raises its error, if any.

        The GIL is released while waiting. ``timeout`` (a ``datetime.timedelta``)
        raises ``DistTimeoutError`` if the operation is still running then (the
        operation itself keeps running to its own deadline). Returns True.
        """
        return self._work.wait(timeout)

    def is_completed(self):
        """True once the operation finished, successfully or not."""
        return self._work.is_completed()

    def is_success(self):
        """True if it finished without error; raises DistError if still running."""
        return self._work.is_success()

    def exception(self):
        """The exception it failed with, or None."""
        return self._work.exception()

    def source_rank(self):
        """For a receive: the global rank the message came from (-1 before completion)."""
        group_rank = self._work.source_rank()
        if group_rank < 0 or self._group is None:
            return group_rank
        return _C.get_global_rank(self._group, group_rank)

    def result(self):
        """The operation's output tensors (the caller's own objects), after waiting."""
        self.wait()
        return list(self._outputs)

    def synchronize(self):
        """Same as wait() (torch's CPU semantics)."""
        self.wait()

    def get_future(self):
        """A ``Future`` completed with ``result()`` when the operation completes."""
        return Future._of_work(self)

    def __repr__(self):
        state = "completed" if self.is_completed() else "pending"
        return f"<tdist.Work {self._op} {state}>"


class Future:
    """The result of an asynchronous operation (torch.futures.Future's API:
    ``wait``, ``value``, ``done``, ``then``, ``add_done_callback``,
    ``set_result``, ``set_exception``)."""

    def __init__(self):
        self._work = None
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._value = None
        self._error = None
        self._callbacks = []

    @classmethod
    def _of_work(cls, work):
        future = cls()
        future._work = work
        return future

    def done(self):
        """True once completed."""
        if self._work is not None:
            return self._work.is_completed()
        return self._event.is_set()

    def wait(self):
        """Blocks until completed (GIL released); returns the value or raises the error."""
        if self._work is not None:
            self._work.wait()
            return self._work.result()
        self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def value(self):
        """The value (waits first); raises the error if it failed."""
        return self.wait()

    def set_result(self, result):
        """Completes a future created by the user with `result`."""
        self._finish(result, None)

    def set_exception(self, error):
        """Completes a future created by the user with an error."""
        self._finish(None, error)

    def _finish(self, value, error):
        if self._work is not None:
            raise RuntimeError("this future belongs to an operation and completes with it")
        with self._lock:
            if self._event.is_set():
                raise RuntimeError("the future is already completed")
            self._value, self._error = value, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            # One callback's exception must not keep the others from running.
            try:
                callback()
            except BaseException:  # noqa: BLE001 - reported, as torch reports a callback's error
                sys.stderr.write("tdist: a Future's done-callback raised:\n" + traceback.format_exc())

    def add_done_callback(self, callback):
        """Calls ``callback(self)`` once completed (at once if it already is).

        For an operation's future the callback runs on the thread that
        completes it (tdist's communication thread, or for point-to-point
        often the thread in ``wait()``), holding the GIL; keep it short.
        """
        run = lambda: callback(self)  # noqa: E731
        if self._work is not None:
            self._work._work.add_done_callback(run)
            return
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(run)
                return
        run()

    def then(self, callback):
        """A new Future completed with ``callback(self)`` once this one completes
        (or with the callback's exception)."""
        child = Future()

        def run(parent):
            try:
                child.set_result(callback(parent))
            except BaseException as error:  # the child reports it at wait()
                child.set_exception(error)

        self.add_done_callback(run)
        return child

    def __repr__(self):
        return f"<tdist.Future {'done' if self.done() else 'pending'}>"
