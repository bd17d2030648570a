"""Replaces the CPU backend's compiler, and nothing else, through an override hook.

The CPU backend opens its device (``DeviceSpec.open``); then core asks the override hooks, and
the first ``fusegrad_compiler`` answer that is not None replaces the compiler it built
(``tryfirst=True`` puts this one before other overrides). ``fusegrad devices`` shows the CPU
compiler as supplied by this plugin, with a warning. The CPU device keeps its renderer,
allocator and program class; only the flags its kernels are built with change (``-O2``, no
``-march=native``: binaries that run on any CPU of the same architecture). The compiler's
``identity`` differs from the backend's, so the two never share cached binaries.

The flags can be set with ``FUSEGRAD_CPU_FLAGS`` (e.g. ``"-O1 -fPIC -shared"``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fusegrad.plugin import hookimpl

if TYPE_CHECKING:
    from fusegrad.device import Compiler

FUSEGRAD_BACKEND_API = 2
#: The parts of other plugins' devices this plugin replaces; an undeclared override is refused.
FUSEGRAD_OVERRIDES = {"CPU": ["compiler"]}
#: Portable, and still without contraction so that results round as numpy's do.
FLAGS = ("-O2", "-fPIC", "-shared", "-ffp-contract=off")


@hookimpl(tryfirst=True)
def fusegrad_compiler(device: str) -> Compiler | None:
    """The CPU backend's C compiler with this plugin's flags; None for every other device."""
    if device.partition(":")[0] != "CPU":
        return None
    from fusegrad_cpu_compiler_override.compiler import OverrideCompiler

    return OverrideCompiler(flags=os.environ.get("FUSEGRAD_CPU_FLAGS", "").split() or FLAGS)
