"""``python3 -m tdist.run [OPTIONS] PROGRAM [ARGS...]``: tdist's launcher
(torchrun's options: --nproc-per-node, --nnodes, --node-rank, --master-addr,
--master-port, --standalone, --max-restarts, ...; and tdist's own, such as
--restart-policy=failed, which restarts only a failed rank; see
docs/launcher.md).

This is a thin entry point to the tdistrun binary shipped inside the package
(tdist/bin/tdistrun, copied there at build and install time; the ``tdistrun``
console script of a pip install calls it too). It makes sure the ranks it
starts can ``import tdist`` (the package's directory is put in front of
PYTHONPATH) and run under this interpreter (TDIST_PYTHON, unless set: a
PROGRAM ending in .py, or ``python``/``python3``, runs under it), then
replaces this process with the launcher.
"""

import os
import shutil
import sys


def launcher_path():
    """The tdistrun binary: $TDIST_RUN_BINARY, tdist/bin/tdistrun, or tdistrun on PATH."""
    explicit = os.environ.get("TDIST_RUN_BINARY")
    if explicit:
        return explicit
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tdistrun")
    if os.access(bundled, os.X_OK):
        return bundled
    found = shutil.which("tdistrun")
    if found:
        return found
    raise FileNotFoundError(f"tdist.run: the launcher binary is missing ({bundled}); rebuild the tdist_python "
                            "target or reinstall the python component, or set TDIST_RUN_BINARY")


def launcher_env(base=None):
    """`base` (default os.environ) with the directory holding the tdist package
    first on PYTHONPATH, so every rank imports this same tdist."""
    env = dict(os.environ if base is None else base)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if package_parent not in paths:
        env["PYTHONPATH"] = os.pathsep.join([package_parent] + paths)
    if not env.get("TDIST_PYTHON") and sys.executable:
        env["TDIST_PYTHON"] = sys.executable
    return env


def main(argv=None):
    """Replaces this process with tdistrun (argv: the launcher's arguments)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        binary = launcher_path()
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(binary, [binary] + args, launcher_env())
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
