"""torch's backend autoloading: the "torch.backends" entry point of an
installed tdist (pip install, cmake --install, or the build tree's
build/python). ``import torch`` calls load(), which registers the "tdist"
backend, so that ``init_process_group("tdist")`` works without
``import tdist.torch``. TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off, as for
every torch extension.

A module of its own beside the tdist package, not inside it: torch imports
the entry point's module outside any try, and importing a module of the
package runs tdist/__init__.py first, so a tdist that cannot import (its
extension built for another Python, a source tree shadowing the install)
would make ``import torch`` itself fail. Here nothing of tdist is imported
until load() runs, inside its try."""


def load():
    # Never raise: a failure here would make `import torch` itself fail.
    try:
        import tdist.torch  # noqa: F401  registers "tdist" with torch.distributed
    except ImportError as error:
        _register_explanation(str(error))
    except Exception as error:  # noqa: BLE001  (a broken install must not break torch)
        _register_explanation("tdist.torch failed to import: %s: %s" % (type(error).__name__, error))


def _register_explanation(why):
    """Registers "tdist" as a backend whose creation raises `why`, so that
    init_process_group("tdist") says what is wrong instead of torch's bare
    "Invalid backend"."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or "tdist" in dist.Backend.backend_list:
            return

        def refuse(*args, **kwargs):
            raise RuntimeError(why)

        dist.Backend.register_backend("tdist", refuse, devices=["cpu"])
    except Exception:  # noqa: BLE001  as above
        pass
