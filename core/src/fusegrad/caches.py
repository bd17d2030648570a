"""Every in-memory cache of fusegrad, and one way to empty them all: ``reset()``.

A module that memoises something at module level registers how to forget it, at import::

    _plans: dict[tuple, Plan] = {}
    caches.register("plans", _plans.clear)

``fusegrad.reset_caches()`` (this module's ``reset``) then empties every registered cache: the
next realize opens its devices, plans its graphs and compiles its kernels again. Tests use it to
start clean and to check that cached and fresh paths agree; a program rarely needs it (after
installing a plugin, ``plugin.manager.reset`` forgets the plugins as well).

The registered caches (see ``names()``): the engine's plans and compiled kernel runners
(``engine/realize.py``), the placements of sharded graphs (``engine/placement_cache.py``), the
open devices and the default device chosen among them
(``device.py``), the broadcast scalar constants (``uop/ops.py``), pooling's movement chains and
attention's causal masks (``tensor/nn_ops.py``) and the dtypes each device holds
(``testing/oracle.py``, once that module is imported).

Not here, on purpose: the kernel cache on disk (compiled binaries, and BEAM's choices, under
``helpers.cache_dir()``; delete that folder, or set ``FUSEGRAD_CACHE``, to forget it); the table
that hash-conses UOps (``uop/ops.py _NODES``: a node's identity, not a cache; entries leave with
their nodes); environment flags (``helpers.getenv``, read once per process by design); a
device's pool of freed memory (it goes with the device).

This module imports nothing of fusegrad, so any module may register with it.
"""

from __future__ import annotations

from collections.abc import Callable

_CLEARS: dict[str, Callable[[], None]] = {}


def register(name: str, clear: Callable[[], None]) -> None:
    """Have ``reset()`` call ``clear`` to empty the cache called ``name``.

    Registering a name again replaces its function (a module reloaded by a test).
    """
    _CLEARS[name] = clear


def names() -> list[str]:
    """The names of the registered caches."""
    return list(_CLEARS)


def reset() -> None:
    """Empty every registered cache (not the disk cache of compiled kernels)."""
    for clear in _CLEARS.values():
        clear()
