"""tdist's own store for torch's env:// and tcp:// rendezvous.

torch's TCPStore server listens on every interface, whatever MASTER_ADDR
says (both its libuv server and the older one bind ``::``; only a
``master_listen_fd`` the caller bound itself changes that), and its
protocol has no authentication: anyone who reaches the port reads and writes
the job's keys. ``tdist.torch.TCPStore`` is a torch Store over tdist's own
TCPStore, which listens only where MASTER_ADDR resolves and, with the job's
token (TDIST_AUTH_TOKEN / TDIST_AUTH_TOKEN_FILE), authenticates every
connection.

With ``TDIST_TORCH_STORE=tdist`` in every rank's environment (tdistrun sets
it), torch's env:// and tcp:// rendezvous make that store instead of torch's,
for every backend (gloo too): rank 0 hosts it, or, with
``TORCHELASTIC_USE_AGENT_STORE=True``, every rank connects to the launcher's
(tdistrun's ``--agent-store``). Unset, or ``torch``, torch's own store is
made, as before: torchrun's agent store is torch's, which tdist's clients
cannot reach. docs/security.md, "torch programs".
"""

import importlib
import os

# The module, not the function torch.distributed exports under its name
# (`import torch.distributed.rendezvous as m` would bind the function).
_rendezvous = importlib.import_module("torch.distributed.rendezvous")

from tdist.torch._plugin import TCPStore

VARIABLE = "TDIST_TORCH_STORE"


def tdist_store_requested():
    """True when TDIST_TORCH_STORE asks for tdist's store (``tdist``);
    False when unset, empty or ``torch``; anything else is an error naming
    the variable."""
    value = os.environ.get(VARIABLE, "").strip().lower()
    if value in ("", "torch"):
        return False
    if value == "tdist":
        return True
    raise ValueError(f"{VARIABLE} must be 'tdist' or 'torch', got {os.environ[VARIABLE]!r}")


def create_store(hostname, port, rank, world_size, timeout):
    """The store of an env:// or tcp:// rendezvous, as torch's
    ``_create_c10d_store`` makes it, but tdist's: rank 0 is the master
    (several groups of one process share its server, as torch's
    multi-tenant store), unless the launcher hosts it
    (TORCHELASTIC_USE_AGENT_STORE=True), when every rank is a client."""
    if not 0 <= port < 2**16:
        raise ValueError(f"port must have value from 0 to 65535 but was {port}.")
    if _rendezvous._torchelastic_use_agent_store():
        return TCPStore(hostname, port, world_size=world_size, is_master=False, timeout=timeout)
    return TCPStore(hostname, port, world_size=world_size, is_master=rank == 0, timeout=timeout,
                    multi_tenant=True)


_torch_create_c10d_store = None


def _create_c10d_store(hostname, port, rank, world_size, timeout, *args, **kwargs):
    # *args: torch 2.3 added use_libuv; older torch 2 passes none.
    if tdist_store_requested():
        return create_store(hostname, port, rank, world_size, timeout)
    return _torch_create_c10d_store(hostname, port, rank, world_size, timeout, *args, **kwargs)


def install():
    """Routes torch's env:// and tcp:// handlers (which both call the
    module's ``_create_c10d_store``) through the function above. Their URL
    parsing and errors stay torch's. A torch without that function is left
    alone (and warned about when TDIST_TORCH_STORE asks for tdist's store),
    so that importing tdist.torch never fails for it."""
    global _torch_create_c10d_store
    if _torch_create_c10d_store is not None:
        return
    original = getattr(_rendezvous, "_create_c10d_store", None)
    if original is None:
        if os.environ.get(VARIABLE, "").strip().lower() == "tdist":
            import warnings
            warnings.warn(f"{VARIABLE}=tdist: this torch's rendezvous has no _create_c10d_store to route through "
                          "tdist's store, so env:// and tcp:// make torch's own TCPStore (listening on every "
                          "interface, without authentication); pass store=tdist.torch.TCPStore(...) instead")
        return
    _torch_create_c10d_store = original
    _rendezvous._create_c10d_store = _create_c10d_store


def uninstall():
    """Puts torch's own ``_create_c10d_store`` back."""
    global _torch_create_c10d_store
    if _torch_create_c10d_store is not None:
        _rendezvous._create_c10d_store = _torch_create_c10d_store
        _torch_create_c10d_store = None
