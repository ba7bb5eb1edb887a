"""The task paddle's communication functions return: ``wait()``,
``is_completed()``, ``synchronize()``. With ``sync_op=True`` the operation
has already finished and the task is complete; with ``sync_op=False`` it
wraps tdist's Work of the running operation.

The collectives a group still runs are remembered, so that
``tdist.paddle.wait(tensor, group)`` can wait for them: on a GPU paddle's
wait orders the compute stream after the communication stream; on CPUs the
equivalent is to wait for the group's pending collectives."""

# Group id -> the Works of its collectives started with sync_op=False that
# may still run (held even if the program dropped the task: the operation
# still writes its outputs; finished ones are dropped at the next call).
_pending = {}


class Task:
    """A handle to one communication (paddle's ``task``)."""

    def __init__(self, work=None, name="communication"):
        self._work = work
        self._name = name

    def wait(self, timeout=None):
        """Blocks until the operation completes and raises its error, if any.
        `timeout` (a ``datetime.timedelta``) raises DistTimeoutError if it is
        still running then. Returns True."""
        if self._work is not None:
            self._work.wait(timeout)
        return True

    def is_completed(self):
        """True once the operation finished (successfully or not)."""
        return self._work is None or self._work.is_completed()

    def synchronize(self):
        """Same as wait(): CPU operations have no stream to synchronize."""
        self.wait()

    def is_sync(self):
        """True if the operation was synchronous (sync_op=True)."""
        return self._work is None

    def __repr__(self):
        return f"<tdist.paddle.Task {self._name} {'completed' if self.is_completed() else 'pending'}>"


def task_of(work, name, group=None):
    """The Task for tdist's return value: None (finished) or a Work. A
    collective's Work is remembered under its `group` for wait_group()."""
    if work is not None and group is not None:
        works = [w for w in _pending.get(group.id, ()) if not w.is_completed()]
        works.append(work)
        _pending[group.id] = works
    return Task(work, name)


def wait_group(group):
    """Waits for every collective of `group` started with sync_op=False
    that has not finished (raising the first error)."""
    works = _pending.pop(group.id, [])
    for k, work in enumerate(works):
        try:
            work.wait()
        except BaseException:
            _pending[group.id] = works[k + 1:] + _pending.get(group.id, [])
            raise
