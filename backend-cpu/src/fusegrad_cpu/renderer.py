"""C for the host CPU: the core C-family renderer plus OpenMP on the output loop."""

from __future__ import annotations

from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import CStyleRenderer
from fusegrad.uop.ops import UOp


class CPURenderer(CStyleRenderer):
    """Renders a kernel as a C function; its output loop runs on all cores when it is long."""

    type_names = {**CStyleRenderer.type_names, dtypes.float16: "_Float16"}

    def prelude(self, program: list[UOp]) -> str:
        return "#include <math.h>\n#include <stdbool.h>\n"

    def render_math(self, op, dtype: DType, x: str) -> str:
        if dtype == dtypes.float16:  # C has no half-precision libm: compute in float, round back
            return self.render_cast(super().render_math(op, dtypes.float32, f"(float)({x})"), dtype)
        return super().render_math(op, dtype, x)

    def render_loop(self, u: UOp, name: str, size: str) -> list[str]:
        lines = super().render_loop(u, name, size)
        if u.arg[1] == "parallel":
            return ["#pragma omp parallel for schedule(static)", *lines]
        return lines
