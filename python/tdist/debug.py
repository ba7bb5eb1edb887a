"""Debugging helpers of torch.distributed: the debug level (``DebugLevel``,
``get_debug_level``, ``set_debug_level``, ``set_debug_level_from_env``) and
``breakpoint(rank)``. monitored_barrier is in monitored.py, the DETAIL
checks in _detail.py.
"""

import os
import pdb
import stat
import sys
import warnings

from tdist import _C, _detail
from tdist._C import DebugLevel, get_debug_level, set_debug_level_from_env
from tdist.collectives import barrier
from tdist.distributed_c10d import get_rank


def set_debug_level(level):
    """Sets the debug level (a ``DebugLevel``) of this process; every rank
    must set the same. DETAIL checks the groups created while it is on:
    setting it after init_process_group checks nothing until the next
    init_process_group (as torch), and setting it back to OFF or INFO pauses
    the checks of the groups that have them."""
    _C.set_debug_level(level)
    if level == DebugLevel.DETAIL and _C.is_initialized() and not _detail.enabled():
        warnings.warn("set_debug_level(DETAIL) after init_process_group: the groups that exist are not "
                      "checked; set TDIST_DEBUG=DETAIL (or call set_debug_level) before init_process_group",
                      stacklevel=2)


def _debugger_terminal():
    """Where the stopping rank's debugger reads its commands, and whether
    that is the controlling terminal (where it then writes too).

    Standard input (descriptor 0) as torch reads it: multiprocessing gives
    its children /dev/null as ``sys.stdin`` but leaves descriptor 0 open, so
    /dev/stdin reaches the terminal or pipe the job was started with. Where
    descriptor 0 is /dev/null itself (tdistrun's ranks), the controlling
    terminal if this process is in its foreground (a background process
    reading it would be stopped by SIGTTIN); else None.
    """
    try:
        fd0, null = os.fstat(0), os.stat(os.devnull)
        if not (stat.S_ISCHR(fd0.st_mode) and fd0.st_rdev == null.st_rdev):
            return open("/dev/stdin"), False  # noqa: SIM115 - the debugger keeps it
    except OSError:
        pass
    try:
        tty = open("/dev/tty", "r+")  # noqa: SIM115
    except OSError:
        return None, False
    if os.tcgetpgrp(tty.fileno()) != os.getpgrp():
        tty.close()
        return None, False
    return tty, True


def breakpoint(rank=0):  # noqa: A001 - torch's name
    """Stops rank `rank` in the debugger; the other ranks of the default
    group wait in a barrier until it continues (torch.distributed.breakpoint).

    The debugger (pdb, reading the process's standard input, or the
    terminal when that is /dev/null) stops in this function just before
    that barrier: type ``up`` to get to the caller's frame and ``c`` to let
    every rank go on. PYTHONBREAKPOINT chooses another debugger, as for the
    built-in ``breakpoint()`` (``PYTHONBREAKPOINT=0``: no stop, only the
    barrier). The barrier has the group's timeout: a session longer than
    that makes the waiting ranks raise DistTimeoutError.
    """
    if get_rank() == rank:
        hook = os.environ.get("PYTHONBREAKPOINT", "")
        if hook not in ("", "pdb.set_trace"):
            sys.breakpointhook()  # a set_trace-style debugger stops at the next line, before the barrier
        else:
            terminal, is_tty = _debugger_terminal()
            if terminal is None:
                # pdb would read end of input and quit the program (BdbQuit).
                warnings.warn(f"tdist.breakpoint(rank={rank}): no terminal to read debugger commands from "
                              "(standard input is /dev/null, e.g. under tdistrun); not stopping", stacklevel=2)
            else:
                # A stdout makes pdb read `stdin` (without one it reads sys.stdin, /dev/null here).
                debugger = pdb.Pdb(stdin=terminal, stdout=terminal if is_tty else sys.stdout)
                debugger.message(f"\n!!! tdist.breakpoint(rank={rank}) !!!\nThe other ranks wait in the "
                                 "barrier below until you continue ('c'); type 'up' to get to the frame that "
                                 f"called tdist.breakpoint(rank={rank}).\n")
                debugger.set_trace(sys._getframe())
    barrier()


__all__ = ["DebugLevel", "breakpoint", "get_debug_level", "set_debug_level", "set_debug_level_from_env"]
