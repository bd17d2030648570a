"""CUDA C++: the core C-family renderer with CUDA's spellings, one thread per output element."""

from __future__ import annotations

from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import UNROLL_REGISTER_TILES, CStyleRenderer
from fusegrad.uop.ops import Ops, UOp

#: threads per block; the grid is as many blocks as it takes to cover the output
BLOCK_SIZE = 256


class CUDARenderer(CStyleRenderer):
    """Renders a kernel as an ``extern "C" __global__`` function for NVRTC or nvcc.

    The launch rounds the output up to whole blocks of ``BLOCK_SIZE`` threads, so each thread
    checks its index first. A grouped reduction (core's codegen/grid.py) is one block per output,
    sharing ``__shared__`` memory and waiting at ``__syncthreads()``.
    ``half`` comes from ``cuda_fp16.h`` (math in float32, like the CPU);
    bfloat16 is core's emulation (16-bit storage, float32 arithmetic), which every GPU runs.
    Constants avoid ``NAN``/``INFINITY``: NVRTC has no ``math.h``.
    """

    grid_dims = 1
    local_size = BLOCK_SIZE
    guard_grid = True
    has_local = True
    max_group_size = 1024
    local_memory_bytes = 48 * 1024  # without opting in to more, every architecture since sm_20
    stage_tiles = True  # a tiled matmul's operand tiles go through shared memory
    warp_size = 32
    special_spellings = {
        "gidx": "{wide}blockIdx.{x}*blockDim.{x}+threadIdx.{x}",
        "group": "blockIdx.{x}",
        "lidx": "threadIdx.{x}",
    }
    local_qualifier = "__shared__ "
    barrier = "__syncthreads();"
    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"
    type_names = {**CStyleRenderer.type_names, dtypes.float16: "half"}
    nan, infinity = "__int_as_float(0x7fc00000)", "__int_as_float(0x7f800000)"
    #: a register tile unrolled whole: its accumulators then live in registers, not local memory
    loop_pragmas = UNROLL_REGISTER_TILES

    def __init__(self, device: str = "", arch: str = "sm_80"):
        super().__init__(device)
        #: the GPU architecture kernels are compiled for, e.g. ``sm_80``
        self.arch = arch

    def render_bitcast(self, x: str, src: DType, dtype: DType) -> str:
        return f"__builtin_bit_cast({self.type_name(dtype)}, {x})"

    def prelude(self, program: list[UOp]) -> str:
        uses_half = any(u.dtype == dtypes.float16 for u in program if u.op is not Ops.SINK)
        return "#include <cuda_fp16.h>\n" if uses_half else ""
