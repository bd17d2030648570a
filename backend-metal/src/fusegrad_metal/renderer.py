"""Metal Shading Language: the core C-family renderer with Metal's spellings."""

from __future__ import annotations

from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import SHORT_TYPE_NAMES, CStyleRenderer, grid_index_kind
from fusegrad.uop.ops import Ops, UOp

#: threads per threadgroup; a launch covers the output in whole threadgroups
THREADGROUP_SIZE = 256
#: the kernel argument that gives each kind of grid index (SPECIAL name without its dimension)
THREAD_POSITIONS = {
    "gidx": "uint3 gid [[thread_position_in_grid]]",
    "group": "uint3 tgid [[threadgroup_position_in_grid]]",
    "lidx": "uint3 lid [[thread_position_in_threadgroup]]",
}


class MetalRenderer(CStyleRenderer):
    """Renders a kernel as a Metal ``kernel void`` function; thread ``gid.x`` computes element
    ``gid.x``.

    Buffer ``i`` is bound at ``[[buffer(i)]]``. A grouped reduction (core's codegen/grid.py) is
    one threadgroup per output, sharing ``threadgroup`` memory. Metal has no float64; bfloat16
    is core's emulation. Math functions are overloaded on float and half, as in OpenCL C.
    """

    grid_dims = 1
    local_size = THREADGROUP_SIZE
    guard_grid = True
    has_local = True
    max_group_size = 1024
    local_memory_bytes = 32 * 1024  # every Apple GPU family
    stage_tiles = True  # a tiled matmul's operand tiles go through threadgroup memory
    warp_size = 32  # a SIMD-group
    special_spellings = {"gidx": "gid.{x}", "group": "tgid.{x}", "lidx": "lid.{x}"}
    local_qualifier = "threadgroup "
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    kernel_prefix = "kernel void"
    buffer_qualifier = "device "
    restrict = ""
    type_names = {d: name for d, name in SHORT_TYPE_NAMES.items() if d != dtypes.float64}
    supported_dtypes = frozenset(d for d in dtypes.all() if d != dtypes.float64)
    float32_math_suffix = ""
    int64_suffixes = ("l", "ul")

    def render_param(self, u: UOp) -> str:
        return f"{super().render_param(u)} [[buffer({u.arg[0]})]]"

    def render_variable(self, u: UOp, position: int) -> str:
        """A variable's value: a constant the device sets with ``setBytes`` after the buffers."""
        return f"constant int& {u.arg[0]} [[buffer({position})]]"

    def extra_params(self, program: list[UOp]) -> list[str]:
        """The thread's positions the kernel uses: in the grid, its group's, in its group."""
        used = {grid_index_kind(u.arg[0]) for u in program if u.op is Ops.SPECIAL}
        return [param for kind, param in THREAD_POSITIONS.items() if kind in used]

    def render_bitcast(self, x: str, src: DType, dtype: DType) -> str:
        return f"as_type<{self.type_name(dtype)}>({x})"

    def prelude(self, program: list[UOp]) -> str:
        return "#include <metal_stdlib>\nusing namespace metal;\n"
