"""Metal Shading Language: the core C-family renderer with Metal's spellings."""

from __future__ import annotations

from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import SHORT_TYPE_NAMES, CStyleRenderer
from fusegrad.uop.ops import Ops, UOp

#: threads per threadgroup; a launch covers the output in whole threadgroups
THREADGROUP_SIZE = 256


class MetalRenderer(CStyleRenderer):
    """Renders a kernel as a Metal ``kernel void`` function; thread ``gid.x`` computes element ``gid.x``.

    Buffer ``i`` is bound at ``[[buffer(i)]]``. Metal has no float64; bfloat16 is core's
    emulation. Math functions are overloaded on float and half, as in OpenCL C.
    """

    grid_dims = 1
    local_size = THREADGROUP_SIZE
    guard_grid = True
    kernel_prefix = "kernel void"
    buffer_qualifier = "device "
    restrict = ""
    type_names = {d: name for d, name in SHORT_TYPE_NAMES.items() if d != dtypes.float64}
    supported_dtypes = frozenset(d for d in dtypes.all() if d != dtypes.float64)
    float32_math_suffix = ""
    int64_suffixes = ("l", "ul")

    def render_param(self, u: UOp) -> str:
        return f"{super().render_param(u)} [[buffer({u.arg[0]})]]"

    def extra_params(self, program: list[UOp]) -> list[str]:
        """The thread's position in the grid, when the kernel uses it."""
        if any(u.op is Ops.SPECIAL for u in program):
            return ["uint3 gid [[thread_position_in_grid]]"]
        return []

    def render_special(self, u: UOp) -> str:
        return "gid.x"

    def render_bitcast(self, x: str, src: DType, dtype: DType) -> str:
        return f"as_type<{self.type_name(dtype)}>({x})"

    def prelude(self, program: list[UOp]) -> str:
        return "#include <metal_stdlib>\nusing namespace metal;\n"
