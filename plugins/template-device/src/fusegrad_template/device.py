"""The TEMPLATE device's memory and kernels: an ``Allocator`` and a program class.

A real backend allocates device memory here (``cl.Buffer``, ``cuMemAlloc``...) and launches
compiled binaries. The template keeps memory in host byte arrays and runs kernels with the
PYTHON device's interpreter, so it works anywhere and shows where each piece goes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegrad.device import Allocator
from fusegrad.runtime.python import PythonProgram


class TemplateAllocator(Allocator):
    """Device memory. Handles are opaque to fusegrad: return whatever your runtime gives you."""

    def alloc(self, nbytes: int) -> np.ndarray:
        """Return a handle to ``nbytes`` of memory (fusegrad never asks for 0 bytes)."""
        return np.zeros(nbytes, dtype=np.uint8)

    def free(self, handle: Any, nbytes: int) -> None:
        """Release the memory; host arrays need nothing, the garbage collector frees them."""

    def copyin(self, handle: np.ndarray, src: memoryview) -> None:
        """Copy the bytes of ``src`` (as long as the allocation) from the host to the device."""
        handle[:] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, handle: np.ndarray) -> None:
        """Copy the allocation's bytes to the host memory ``dest``; return once they are there."""
        np.frombuffer(dest, dtype=np.uint8)[:] = handle


class TemplateProgram(PythonProgram):
    """A compiled kernel: ``TemplateProgram(name, binary)``, then called with buffer handles.

    The call is ``program(*handles, global_size=, local_size=, vals=, wait=)``: launch the kernel
    over ``global_size`` (set when the renderer declares ``grid_dims``) and, when ``wait`` is
    true, wait for it and return the seconds it took. The template inherits the interpreter's
    ``__call__``; a real backend loads ``binary`` in ``__init__`` and launches it here.
    """
