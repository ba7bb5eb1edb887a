"""Starts the torch tests' rank processes, forked from a process that has
imported torch already (torch_zygote.py says why and how) where that gives
the same process as a fresh interpreter would, and as fresh interpreters
otherwise. TDIST_TEST_FRESH_RANKS=1 starts every rank fresh.

start(argv, env, cwd, stdout, stderr) takes what subprocess.Popen would
(stdout and stderr: files opened by name, in "w+") and returns an object
with Popen's pid, returncode, poll(), wait(timeout), send_signal(), kill().
"""

import atexit
import json
import os
import queue
import signal
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable

# Read after the rank's script starts (by tdist, by torch's launch-time
# code, by set_debug_level_from_env in the child), or not at all (pytest's
# PYTEST_CURRENT_TEST): a forked child may have its own. Any other
# difference from the fork server's environment (OMP_*, MKL_*, PYTHON*,
# TORCH_*: read while torch is imported) needs a fresh interpreter.
_PER_CHILD = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
              "GROUP_RANK", "TORCH_DISTRIBUTED_DEBUG", "GLOO_SOCKET_IFNAME"}


def _per_child(key):
    return key in _PER_CHILD or key.startswith(("TDIST_", "PYTEST_"))


class _Zygote:
    def __init__(self, env):
        self.env = env
        self.proc = subprocess.Popen([PYTHON, os.path.join(HERE, "torch_zygote.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=HERE)
        try:
            first = json.loads(self.proc.stdout.readline() or "{}")
        except ValueError:
            first = {"error": "its first answer was not JSON"}
        if not first.get("ready"):
            self.close()
            raise RuntimeError("torch_zygote.py did not start: %s" % (first.get("error") or "no answer"))
        self.lock = threading.Lock()  # one request and its answer at a time
        self.pids = queue.Queue()
        self.ended = {}  # pid -> returncode, guarded by `changed`
        self.gone = False  # the server has ended (and its children with it), guarded by `changed`
        self.changed = threading.Condition()
        threading.Thread(target=self._read, name="torch_zygote answers", daemon=True).start()
        atexit.register(self.close)

    def _read(self):
        for line in self.proc.stdout:
            try:
                answer = json.loads(line)
            except ValueError:
                continue  # not the server's (it writes JSON only)
            if "ended" in answer:
                with self.changed:
                    self.ended[answer["ended"]] = answer["returncode"]
                    self.changed.notify_all()
            else:
                with self.changed:  # a reused pid: not the earlier rank's exit
                    self.ended.pop(answer["pid"], None)
                self.pids.put(answer["pid"])
        with self.changed:  # the fork server ended: so did its children (their parent-death signal)
            self.gone = True
            self.changed.notify_all()
        self.pids.put(None)

    def returncode_locked(self, pid):
        """`pid`'s exit code, -SIGKILL if the server ended first, else None."""
        return self.ended.get(pid, -signal.SIGKILL if self.gone else None)

    def suits(self, env):
        keys = set(env) | set(self.env)
        return all(_per_child(k) or env.get(k) == self.env.get(k) for k in keys)

    def _send(self, request):
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()

    def usable(self):
        return not self.gone and self.proc.poll() is None

    def start(self, argv, env, cwd, stdout_path, stderr_path):
        """A forked rank, or None if the fork server has ended."""
        with self.lock:
            try:
                self._send({"argv": argv, "env": env, "cwd": cwd, "stdout": stdout_path, "stderr": stderr_path})
            except OSError:  # BrokenPipeError: the server has ended
                return None
            pid = self.pids.get()  # None once the server has ended
            return _ForkedRank(self, pid) if pid is not None else None

    def signal(self, pid, signum):
        with self.lock:
            try:
                self._send({"signal": int(signum), "pid": pid})
            except OSError:
                pass  # the server has ended, and its children with it

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # the server kills its children and ends
            except OSError:
                pass
            self.proc.wait()


class _ForkedRank:
    def __init__(self, zygote, pid):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self):
        with self.zygote.changed:
            self.returncode = self.zygote.returncode_locked(self.pid)
        return self.returncode

    def wait(self, timeout=None):
        with self.zygote.changed:
            ended = self.zygote.changed.wait_for(lambda: self.zygote.returncode_locked(self.pid) is not None, timeout)
            if not ended:
                raise subprocess.TimeoutExpired(["rank %d" % self.pid], timeout)
            self.returncode = self.zygote.returncode_locked(self.pid)
        return self.returncode

    def send_signal(self, signum):
        self.zygote.signal(self.pid, signum)

    def kill(self):
        self.send_signal(signal.SIGKILL)


_zygote = None
_zygote_failed = None


def _zygote_for(env):
    global _zygote, _zygote_failed
    if os.environ.get("TDIST_TEST_FRESH_RANKS") == "1" or _zygote_failed:
        return None
    if _zygote is not None and not _zygote.usable():
        print("torch_forks: the fork server ended; a new one starts", file=sys.stderr)
        _zygote.close()
        _zygote = None
    if _zygote is None:
        base = {k: v for k, v in env.items() if not _per_child(k)}
        try:
            _zygote = _Zygote(base)
        except (RuntimeError, OSError) as e:
            _zygote_failed = str(e)
            print("torch_forks: every rank starts fresh: %s" % e, file=sys.stderr)
            return None
    return _zygote if _zygote.suits(env) else None


def start(argv, env, cwd, stdout, stderr):
    zygote = _zygote_for(env) if argv[0] == PYTHON else None
    forked = zygote.start(argv, env, cwd, stdout.name, stderr.name) if zygote is not None else None
    if forked is None:
        return subprocess.Popen(argv, stdout=stdout, stderr=stderr, text=True, env=env, cwd=cwd)
    return forked
