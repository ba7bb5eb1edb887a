"""The task paddle's communication functions return: ``wait()``,
``is_completed()``, ``synchronize()``. With ``sync_op=True`` the operation
has already finished and the task is complete; with ``sync_op=False`` it
wraps tdist's Work of the running operation."""


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


def task_of(work, name):
    """The Task for tdist's return value: None (finished) or a Work."""
    return Task(work, name)
