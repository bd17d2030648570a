"""The TEMPLATE device's renderer: linear UOps to source text, and the device's capabilities.

A real backend renders C-family source by subclassing ``fusegrad.renderer.cstyle.CStyleRenderer``
(type names, a prelude, how to index the grid), or renders from scratch by implementing
``render``. The template reuses the PYTHON device's renderer, whose "source" is the program as
JSON, and declares its own capabilities: those are what core and the conformance suite read.
"""

from __future__ import annotations

from fusegrad.dtype import dtypes
from fusegrad.runtime.python import PythonRenderer


class TemplateRenderer(PythonRenderer):
    """Declares what the device can do; core decomposes or refuses the rest before rendering."""

    #: Every dtype but float64, as on many GPUs: core refuses float64 on TEMPLATE with an
    #: ``UnsupportedOp`` naming the device, and the conformance suite skips its float64 cases.
    supported_dtypes = frozenset(dtypes.all()) - {dtypes.float64}
    #: Launched over a one-dimensional grid of work items (None would mean: the kernel loops).
    grid_dims = 1
    #: The largest grid, and the work-group size used to launch it.
    global_max = (2**31 - 1,)
    local_size = 1
