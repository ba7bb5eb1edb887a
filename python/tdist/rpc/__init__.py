"""tdist.rpc: remote calls between named workers, with torch.distributed.rpc's
API (docs/rpc.md)::

    import tdist.rpc as rpc

    rpc.init_rpc("worker0", rank=0, world_size=2)     # env:// or init_method
    result = rpc.rpc_sync("worker1", torch.add, args=(x, 1))
    fut = rpc.rpc_async("worker1", my_function, args=(x,))
    fut.wait()
    rpc.shutdown()

A call pickles the function (by reference, as pickle does: it must be
importable on the callee) and its arguments; NumPy arrays and CPU torch
tensors inside them travel as tensors of their own, received straight into
new buffers on the other side. An exception the function raises is raised
again in the caller, as the same type where it can be rebuilt, with the
worker and the remote traceback in its message.
"""

import atexit
import io
import pickle
import sys
import traceback
from datetime import timedelta

from tdist import _C
from tdist._work import Future  # the one Future of tdist: calls' and collectives' compose

__all__ = [
    "Future",
    "RRef",
    "RemoteError",
    "RpcBackendOptions",
    "TensorPipeRpcBackendOptions",
    "WorkerInfo",
    "get_worker_info",
    "get_all_worker_infos",
    "init_rpc",
    "is_available",
    "pending_calls",
    "remote",
    "rpc_async",
    "rpc_sync",
    "shutdown",
]

# torch's defaults: 60 s per call, 16 serving threads.
DEFAULT_RPC_TIMEOUT_SEC = 60.0
DEFAULT_NUM_WORKER_THREADS = 16
DEFAULT_MAX_QUEUED_REQUESTS = 1024
DEFAULT_INIT_TIMEOUT_SEC = 300.0
# timeout=0 means "no timeout" (torch's convention): ten years.
_NO_TIMEOUT_MS = 10 * 365 * 24 * 3600 * 1000

_FUNCTION = "tdist.python"  # the C++ function every Python call runs through


def is_available():
    return True


class RpcBackendOptions:
    """What init_rpc's rpc_backend_options may say (torch's names)."""

    def __init__(self, rpc_timeout=DEFAULT_RPC_TIMEOUT_SEC, init_method="env://",
                 num_worker_threads=DEFAULT_NUM_WORKER_THREADS, max_queued_requests=DEFAULT_MAX_QUEUED_REQUESTS,
                 init_timeout=DEFAULT_INIT_TIMEOUT_SEC):
        self.rpc_timeout = rpc_timeout
        self.init_method = init_method
        self.num_worker_threads = num_worker_threads
        self.max_queued_requests = max_queued_requests
        self.init_timeout = init_timeout


TensorPipeRpcBackendOptions = RpcBackendOptions  # what torch programs name it


class WorkerInfo:
    """A worker: name and id (its rank), plus paddle's rank, ip and port."""

    __slots__ = ("name", "id", "ip", "port")

    def __init__(self, name, id, ip="", port=0):  # noqa: A002 - torch's field name
        self.name, self.id, self.ip, self.port = name, id, ip, port

    @property
    def rank(self):
        return self.id

    def __eq__(self, other):
        return isinstance(other, WorkerInfo) and (self.name, self.id) == (other.name, other.id)

    def __hash__(self):
        return hash((self.name, self.id))

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, name={self.name})"

    def __reduce__(self):
        return (WorkerInfo, (self.name, self.id, self.ip, self.port))


class RemoteError(RuntimeError):
    """A remote exception whose own type could not be rebuilt here."""


# --- pickling with tensors on the side ---------------------------------------

# NumPy dtypes that are tdist dtypes; arrays of others are pickled whole.
_NUMPY_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
                 "complex128"}


# What travels beside the pickle is always a C-contiguous NumPy array (the
# C++ side takes those fastest); the persistent id says what to rebuild.

def _sendable_numpy(obj):
    numpy = sys.modules.get("numpy")
    if numpy is None or type(obj) is not numpy.ndarray:
        return None
    if obj.dtype.name not in _NUMPY_DTYPES or not obj.dtype.isnative:
        return None
    return obj if obj.flags.c_contiguous else numpy.ascontiguousarray(obj), obj.dtype.name


_TORCH_DTYPES = []  # filled on first use: tdist does not import torch itself


def _torch_dtypes(torch):
    if not _TORCH_DTYPES:
        _TORCH_DTYPES.append(frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                        torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                        torch.complex64, torch.complex128}))
    return _TORCH_DTYPES[0]


def _sendable_torch(obj):
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return None
    if obj.device.type != "cpu" or obj.layout != torch.strided or obj.dtype not in _torch_dtypes(torch):
        return None
    dtype = obj.dtype
    t = obj.detach() if obj.requires_grad else obj
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    if dtype == torch.bfloat16:  # NumPy has no bfloat16: its bits, as int16
        t = t.view(torch.int16)
    return t.numpy(), str(dtype)  # shares the tensor's memory and keeps it alive


_PLAIN_TYPES = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, tuple, list, dict, set,
                          frozenset, type, type(len), type(_sendable_torch)})


class _Pickler(pickle.Pickler):
    def __init__(self, buffer):
        super().__init__(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors = []

    def persistent_id(self, obj):
        if type(obj) in _PLAIN_TYPES:  # the pickler asks for every object: most are not tensors
            return None
        for kind, convert in (("numpy", _sendable_numpy), ("torch", _sendable_torch)):
            sendable = convert(obj)
            if sendable is not None:
                array, dtype = sendable
                self.tensors.append(array)
                return (kind, len(self.tensors) - 1, dtype)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, buffer, tensors):
        super().__init__(buffer)
        self.tensors = tensors

    def persistent_load(self, pid):
        kind, index, dtype = pid
        array = self.tensors[index]  # a NumPy array of the received buffer
        if kind == "numpy":
            return array
        import torch

        if dtype == "torch.bfloat16":  # bits as uint16, which torch cannot take: through int16
            return torch.from_numpy(array.view("int16")).view(torch.bfloat16)
        return torch.from_numpy(array)


def _dumps(obj):
    buffer = io.BytesIO()
    p = _Pickler(buffer)
    outer = getattr(_rref._pickling, "forks", None)
    _rref._pickling.forks = forks = []  # RRefs in it register a fork for the receiver
    try:
        p.dump(obj)
    except BaseException:
        _rref._abandon(forks)
        raise
    finally:
        _rref._pickling.forks = outer
    return buffer.getvalue(), p.tensors, forks


def _send(to, func, args, kwargs, timeout, snapshot):
    """Pickles and sends a call; the C++ future of its answer. RRefs in it
    that got a fork for the callee lose it again if the call is not sent."""
    if not callable(func):
        raise TypeError(f"func must be callable, not {type(func).__name__}")
    name, agent, wait = _worker_name(to), _agent(), _timeout(timeout)
    args = tuple(args or ())
    payload, tensors, forks = _dumps((func, args, dict(kwargs or {})))
    try:
        return agent.call_async(name, _FUNCTION, payload, tensors, wait, _label(func, args), snapshot)
    except BaseException:
        _rref._abandon(forks)
        raise


def _loads(payload, tensors):
    return _Unpickler(io.BytesIO(payload), tensors).load()


def _qualname(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


class _RemoteFailure:
    """What a callee sends back instead of a result when the function raised.
    The exception travels as a pickle of its own, opened only by exception():
    one that cannot be rebuilt on the caller still gives its type's name and
    its text."""

    def __init__(self, exc_pickle, type_name, message, remote_traceback, worker, function):
        self.exc_pickle, self.type_name, self.message = exc_pickle, type_name, message
        self.remote_traceback, self.worker, self.function = remote_traceback, worker, function

    def exception(self):
        text = (f"{self.message}\n\n{self.type_name} raised in {self.function} on worker '{self.worker}'; "
                f"remote traceback:\n{self.remote_traceback}")
        exc = None
        if self.exc_pickle is not None:
            try:
                exc = pickle.loads(self.exc_pickle)
            except Exception:
                exc = None
        if exc is not None:
            try:
                rebuilt = type(exc)(text)
                rebuilt.remote_traceback = self.remote_traceback
                rebuilt.worker = self.worker
                return rebuilt
            except Exception:
                pass
        error = RemoteError(f"{self.type_name}: {text}")
        error.remote_traceback, error.worker = self.remote_traceback, self.worker
        return error


def _failure(exc, function):
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    type_name = f"{type(exc).__module__}.{type(exc).__qualname__}".replace("builtins.", "")
    me = _state.agent.current_worker_info()["name"] if _state.agent else "?"
    try:
        exc_pickle = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        exc_pickle = None  # the exception itself does not pickle: its type name and text still go
    failure = _RemoteFailure(exc_pickle, type_name, str(exc), tb, me, function)
    return pickle.dumps(failure, protocol=pickle.HIGHEST_PROTOCOL)


def _serve(payload, tensors, caller):
    """Runs one incoming call (on a serving thread of the C++ agent)."""
    function = "a function"
    try:
        fn, args, kwargs = _loads(payload, tensors)
        function = _label(fn, args)
        result = fn(*args, **(kwargs or {}))
    except BaseException as e:  # everything goes back to the caller
        return (True, _failure(e, function), [])
    try:
        data, out, _ = _dumps(result)  # (RRefs in it: their forks go with the answer)
    except Exception as e:
        error = TypeError(f"the result of {function} could not be pickled: {type(e).__name__}: {e}")
        return (True, _failure(error, function), [])
    return (True, data, out)


def _result(payload, tensors):
    value = _loads(payload, tensors)
    if isinstance(value, _RemoteFailure):
        raise value.exception()
    return value


# --- futures -----------------------------------------------------------------

class _CallFuture(Future):
    """The future of one call: completed from the C++ future's callback."""

    def __init__(self, cpp_future):
        super().__init__()
        self._cpp = cpp_future
        cpp_future.add_done_callback(self._complete)

    def _complete(self):
        try:
            payload, tensors = self._cpp.wait()
            value, error = _result(payload, tensors), None
        except BaseException as e:
            value, error = None, e
        self._finish(value, error)

    def wait(self):
        # The answer is decoded by the done-callback, on the thread that
        # completes the call; this waits for the C++ future first (without
        # the GIL), and raises what it raises unless the call is done: a
        # wait inside a callback on the completing thread would block it.
        if not self.done():
            try:
                self._cpp.wait()
            except BaseException:
                if not self._cpp.done():
                    raise
        return super().wait()


# --- the agent ---------------------------------------------------------------

class _State:
    agent = None
    rpc_timeout_s = DEFAULT_RPC_TIMEOUT_SEC  # init_rpc's default (0: none)


_state = _State()


def _agent():
    if _state.agent is None:
        raise RuntimeError("RPC has not been initialized: call tdist.rpc.init_rpc first")
    return _state.agent


def _seconds(value, what):
    if isinstance(value, timedelta):
        return value.total_seconds()
    if value is None:
        return None
    value = float(value)
    if value < 0 and value != -1:
        raise _C.DistInvalidArgument(f"{what}: a timeout of {value} s; give seconds >= 0, or -1 for the default")
    return value


def init_rpc(name, backend=None, rank=-1, world_size=None, rpc_backend_options=None):
    """Starts this worker's RPC agent and meets the others (torch's
    signature). rank and world_size default to RANK and WORLD_SIZE (or a
    launcher's variables), the rendezvous to env:// (MASTER_ADDR and
    MASTER_PORT); `backend` is accepted and ignored (there is one)."""
    del backend
    if _state.agent is not None:
        raise RuntimeError("RPC is already initialized on this process; call shutdown() first")
    opts = rpc_backend_options or RpcBackendOptions()
    rpc_timeout = _seconds(opts.rpc_timeout, "rpc_timeout")
    init_timeout = _seconds(getattr(opts, "init_timeout", DEFAULT_INIT_TIMEOUT_SEC), "init_timeout")
    _C.rpc_set_handler(_serve)
    _state.rpc_timeout_s = rpc_timeout if rpc_timeout is not None else DEFAULT_RPC_TIMEOUT_SEC
    _state.agent = _C.RpcAgent.start(
        name, -1 if rank is None else rank, -1 if world_size is None else world_size,
        getattr(opts, "init_method", None) or "env://",
        timedelta(seconds=rpc_timeout if rpc_timeout and rpc_timeout > 0 else _NO_TIMEOUT_MS / 1000),
        int(getattr(opts, "num_worker_threads", DEFAULT_NUM_WORKER_THREADS)),
        int(getattr(opts, "max_queued_requests", DEFAULT_MAX_QUEUED_REQUESTS)),
        timedelta(seconds=init_timeout))


@atexit.register
def _shutdown_at_exit():
    # A program that ends without shutdown() (an exception, say) closes at
    # once rather than leave the agent to the interpreter's teardown.
    if _state.agent is not None:
        try:
            shutdown(graceful=False)
        except Exception:
            pass


def _worker_name(to):
    if isinstance(to, WorkerInfo):
        return to.name
    if isinstance(to, int):
        return _agent().worker_info_by_id(to)["name"]
    if isinstance(to, str):
        return to
    raise TypeError(f"to: a worker name, id or WorkerInfo, not {type(to).__name__}")


def _default_timeout_s():
    return _state.rpc_timeout_s


def _timeout(timeout):
    seconds = _seconds(timeout, "timeout")
    if seconds is None or seconds == -1:
        return timedelta(0)  # the agent's default
    if seconds == 0:
        return timedelta(milliseconds=_NO_TIMEOUT_MS)
    return timedelta(milliseconds=max(1, round(seconds * 1000)))


def _label(fn, args):
    """How errors and pending_calls() name a call of fn: its name, or what
    fn._tdist_label(*args) says (remote() names the function it runs)."""
    label = getattr(fn, "_tdist_label", None)
    return label(*args) if label is not None else _qualname(fn)


def rpc_async(to, func, args=None, kwargs=None, timeout=-1.0):
    """Calls func(*args, **kwargs) on worker `to`; returns a Future of its result.
    Tensors in the arguments go as they are now, whatever happens to them later."""
    return _CallFuture(_send(to, func, args, kwargs, timeout, True))


def rpc_sync(to, func, args=None, kwargs=None, timeout=-1.0):
    """Calls func(*args, **kwargs) on worker `to` and returns its result."""
    # No snapshot of the arguments: this thread waits until the callee has them.
    answer, received = _send(to, func, args, kwargs, timeout, False).wait()
    return _result(answer, received)


def shutdown(graceful=True, timeout=0):
    """graceful: waits until every worker has called shutdown and nothing is
    outstanding anywhere, then closes; else fails outstanding calls and
    closes at once. A no-op if RPC is not initialized."""
    del timeout  # the graceful rounds are bounded by init_timeout
    agent = _state.agent
    if agent is None:
        return
    try:
        agent.shutdown(graceful)
    finally:
        _state.agent = None
        _rref._owned.clear()  # the values this worker kept for RRefs go with the agent


def _info(d):
    return WorkerInfo(d["name"], d["id"], d["ip"], d["port"])


def get_worker_info(worker_name=None):
    """This worker's WorkerInfo, or the named worker's."""
    agent = _agent()
    return _info(agent.current_worker_info() if worker_name is None else agent.worker_info_by_name(worker_name))


def get_all_worker_infos():
    return [_info(d) for d in _agent().all_worker_infos()]


def pending_calls():
    """This worker's calls that have no answer yet: caller, callee, function, age."""
    return list(_agent().pending_calls())


from tdist.rpc import rref as _rref  # noqa: E402 - it builds on what is above
from tdist.rpc.rref import RRef, remote  # noqa: E402,F401
