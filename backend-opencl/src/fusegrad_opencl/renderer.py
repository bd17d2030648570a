"""OpenCL C: the core C-family renderer with OpenCL's spellings, work-groups and local memory."""

from __future__ import annotations

from collections.abc import Iterable

from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import SHORT_TYPE_NAMES, UNROLL_REGISTER_TILES, CStyleRenderer
from fusegrad.uop.ops import GroupOp, Ops, UOp

#: the extension a device must report before a kernel may use a dtype
EXTENSION_FOR = {dtypes.float16: "cl_khr_fp16", dtypes.float64: "cl_khr_fp64"}
#: work-items per work-group, where the device allows that many
WORK_GROUP_SIZE = 256
#: a tiled matmul's outputs per work-item (rows, columns): on a GPU, and on a CPU device, whose
#: work-item loads its 16 neighbouring columns as vectors (measured on PoCL: 4 x 16 in groups of
#: 8 x 8 ran 1.6x faster than 4 x 8, 4x faster than 4 x 4 strided as for a GPU; with ``fma``,
#: 8 x 16 rows ran 1.2x faster than 4 x 16 at 512² and 1024², as fast at 256²)
GPU_TILE, CPU_TILE = (4, 4), (8, 16)


class OpenCLRenderer(CStyleRenderer):
    """Renders a kernel as an OpenCL C ``__kernel``; work-item ``i`` computes output element ``i``,
    or a work-group computes one output of a grouped reduction (core's codegen/grid.py).

    ``extensions`` are the device's (``CL_DEVICE_EXTENSIONS``): float16 needs ``cl_khr_fp16`` and
    float64 ``cl_khr_fp64``; without them the dtype is not supported and core refuses it, naming
    the device. ``max_group_size`` and ``local_memory_bytes`` are the device's
    ``CL_DEVICE_MAX_WORK_GROUP_SIZE`` and ``CL_DEVICE_LOCAL_MEM_SIZE``. The launch rounds the
    output up to whole work-groups, so a flat grid index is guarded. ``threads_in_lanes`` is
    False on a CPU device (``CL_DEVICE_TYPE_CPU``): a tiled matmul then gives each work-item a
    row of neighbouring outputs (see ``Renderer.threads_in_lanes``).
    """

    grid_dims = 1
    guard_grid = True
    has_local = True
    special_spellings = {
        "gidx": "get_global_id({d})",
        "group": "get_group_id({d})",
        "lidx": "get_local_id({d})",
    }
    local_qualifier = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    kernel_prefix = "__kernel void"
    buffer_qualifier = "__global "
    type_names = SHORT_TYPE_NAMES
    float32_math_suffix = ""  # OpenCL's math functions are overloaded on every float type
    math_in_float32: frozenset[DType] = frozenset()  # with cl_khr_fp16 they take half too
    int64_suffixes = ("l", "ul")
    #: a register tile unrolled whole (clang left a 4 x 16 tile's nest rolled: 2x slower)
    loop_pragmas = UNROLL_REGISTER_TILES
    #: MULACC is OpenCL's ``fma`` (one rounding, as the CPU backend's): PoCL kept a matmul's
    #: separate multiply and add apart, half the tile's arithmetic (1024²: 41 -> 58 GFLOP/s,
    #: 70 with ``CPU_TILE``)
    native_ops = GroupOp.ALU

    def render_alu(self, u: UOp, src: list[str]) -> str:
        if u.op is Ops.MULACC and u.dtype.is_float:
            return f"fma({src[0]}, {src[1]}, {src[2]})"
        return super().render_alu(u, src)

    def __init__(
        self,
        device: str = "",
        extensions: Iterable[str] = (),
        max_group_size: int = WORK_GROUP_SIZE,
        local_memory_bytes: int = 32768,
        threads_in_lanes: bool = True,
    ):
        super().__init__(device)
        self.max_group_size, self.local_memory_bytes = max_group_size, local_memory_bytes
        self.local_size = min(WORK_GROUP_SIZE, max_group_size)
        self.threads_in_lanes = threads_in_lanes
        self.tile_upcast = GPU_TILE if threads_in_lanes else CPU_TILE
        have = set(extensions)
        self.supported_dtypes = frozenset(
            d for d in dtypes.all() if d not in EXTENSION_FOR or EXTENSION_FOR[d] in have
        )

    def param_type(self, dtype: DType) -> str:
        """OpenCL forbids ``bool`` kernel arguments: a bool buffer is bytes, 0 or 1."""
        return "uchar" if dtype == dtypes.bool else self.type_name(dtype)

    def render_bitcast(self, x: str, src: DType, dtype: DType) -> str:
        return f"as_{self.param_type(dtype)}({x})"

    def prelude(self, program: list[UOp]) -> str:
        used = {u.dtype for u in program} | {s.dtype for u in program for s in u.src}
        pragmas = [
            f"#pragma OPENCL EXTENSION {EXTENSION_FOR[d]} : enable\n"
            for d in (dtypes.float16, dtypes.float64)
            if d in used
        ]
        return "".join(pragmas)
