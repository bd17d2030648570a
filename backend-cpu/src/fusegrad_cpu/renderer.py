"""C for the host CPU: the core C-family renderer plus OpenMP on the output loop."""

from __future__ import annotations

from fusegrad.dtype import dtypes
from fusegrad.renderer.cstyle import CStyleRenderer
from fusegrad.uop.ops import UOp


class CPURenderer(CStyleRenderer):
    """Renders a kernel as a C function; its output loop runs on all cores when it is long."""

    type_names = {**CStyleRenderer.type_names, dtypes.float16: "_Float16"}

    def prelude(self, program: list[UOp]) -> str:
        return "#include <math.h>\n#include <stdbool.h>\n"

    def render_loop(self, u: UOp, name: str, size: str) -> list[str]:
        lines = super().render_loop(u, name, size)
        if u.arg[1] == "parallel":
            return ["#pragma omp parallel for schedule(static)", *lines]
        return lines
