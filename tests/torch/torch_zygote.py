"""A fork server for the torch tests' rank processes (torch_harness.py).

Importing torch costs 1.3-1.5 s of CPU per process on a 2-vCPU VM, and
building a DDP model (torch._dynamo's import) 1.7 s more; the torch tests
start about a hundred rank processes: minutes of the suite's CPU. This
process imports both once, then forks a child per request, and
the child becomes what `python SCRIPT ARGS...` would be: its argv, its
environment, its working directory, its stdin (/dev/null), stdout and
stderr (files), the script's directory first on sys.path, the tdist backend
loaded as torch's autoload would have loaded it, the debug level read from
its environment; then it runs the script as __main__ and ends through the
interpreter's own exit (atexit handlers, module teardown, C++ static
destructors), not os._exit, so the tests of exits still test them.

What a forked child cannot change (settings read when torch is imported:
OMP_*, MKL_*, TORCH_* but the debug level, PYTHON*) torch_forks.py
compares and runs such ranks as fresh processes instead.

Protocol, one JSON object per line. Requests on stdin:
  {"argv": [...], "env": {...}, "cwd": DIR, "stdout": PATH, "stderr": PATH}
      answered {"pid": N} once forked;
  {"signal": N, "pid": N}: sends a signal to a child that has not ended
      (only this process knows whether the pid is still its child's);
Unprompted, on stdout: {"ended": N, "returncode": RC} when a child ends
(RC as subprocess gives it: -N for a signal). End of stdin: this process
kills its children and ends.
"""

import ctypes
import gc
import json
import os
import select
import signal
import sys
import types

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # each child autoloads with its own environment
import torch  # noqa: E402,F401  the point of this process
import torch.distributed  # noqa: E402
# Building a DDP, FSDP or DTensor model imports torch._dynamo (some 800
# modules, 1.7 s of CPU here), which most ranks would otherwise pay.
import torch._dynamo  # noqa: E402,F401
import torch.nn.parallel  # noqa: E402,F401


def _reply(obj):
    os.write(1, (json.dumps(obj) + "\n").encode())


def _die_with(parent):
    """The child ends if this fork server does (a killed pytest, a crash):
    a fresh rank would have been killed by the harness's deadline, an
    orphan would hold its ports and a core until its group's timeout."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the server ended before prctl took effect
        os._exit(1)


def _become(request):
    """In a forked child: the process `python argv...` would have been."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(out, fd)
        os.close(out)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][1]
    sys.argv = request["argv"][1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    gc.unfreeze()
    torch.distributed.set_debug_level_from_env()
    if torch._is_device_backend_autoload_enabled():
        torch._import_device_backends()
    return script


def serve():
    """Answers requests until stdin ends; returns (in a forked child only)
    the script that child is to run."""
    gc.collect()
    gc.freeze()  # the children's collections then leave the shared pages alone
    if len(os.listdir("/proc/self/task")) != 1:
        # fork() keeps only the forking thread: a child could inherit a lock
        # some other thread held. Say so; the harness starts fresh processes.
        _reply({"error": "threads running after import torch: %s" % os.listdir("/proc/self/task")})
        return None
    _reply({"ready": True})
    children = {}  # pidfd -> pid
    pending = b""
    while True:
        readable, _, _ = select.select([0] + list(children), [], [])
        for fd in readable:
            if fd in children:
                pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                _reply({"ended": pid, "returncode": os.waitstatus_to_exitcode(status)})
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                for pid in children.values():
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                return None
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                script = _answer(json.loads(line), children)
                if script is not None:
                    return script


def _answer(request, children):
    """Signals a child, or forks one (registered in `children`, pidfd ->
    pid); returns, in the new child only, the script it is to run."""
    if "signal" in request:
        if request["pid"] in children.values():
            os.kill(request["pid"], request["signal"])
        return None
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        _die_with(server)
        for other in children:
            os.close(other)
        return _become(request)
    children[os.pidfd_open(pid)] = pid
    _reply({"pid": pid})
    return None


if __name__ == "__main__":
    if serve() is None:
        sys.exit(0)
    # A child, from here on. The script runs in a __main__ module of its own
    # that stays until the interpreter finalizes (as `python SCRIPT`'s does:
    # its globals outlive the atexit handlers), and its exceptions and exit
    # are the interpreter's.
    _main = types.ModuleType("__main__")
    _main.__file__ = sys.argv[0]
    _main.__builtins__ = __builtins__
    sys.modules["__main__"] = _main
    with open(sys.argv[0], "rb") as _source:
        _code = compile(_source.read(), sys.argv[0], "exec")
    exec(_code, _main.__dict__)
