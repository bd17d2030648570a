"""CUDA C++: the core C-family renderer with CUDA's spellings, one thread per output element,
and tensor cores (``mma.sync`` as inline PTX) for half-precision matmuls on sm_80 and later."""

from __future__ import annotations

from fusegrad.codegen.tensorcore import MMA_M16N8K16, TensorCore
from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import (
    OP_RENDERERS,
    UNROLL_REGISTER_TILES,
    CStyleRenderer,
    RenderContext,
)
from fusegrad.uop.ops import Ops, UOp

#: threads per block; the grid is as many blocks as it takes to cover the output
BLOCK_SIZE = 256


def arch_number(arch: str) -> int:
    """80 for ``sm_80``, 90 for ``sm_90a``: the compute capability in an architecture's name."""
    digits = "".join(c for c in arch.split("_")[-1] if c.isdigit())
    return int(digits) if digits else 0


#: PTX type names of the tensor cores' dtypes
PTX_TYPES = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "f32"}


def render_mma(ctx: RenderContext, u: UOp, src: list[str]) -> None:
    """An in-place ``WMMA`` (codegen/tensorcore.py) as one ``mma.sync`` of the warp: the lane's
    four accumulators ``acc[base..base+3]`` read and written (``+f``), its fragment registers
    (two 16-bit elements each, packed by core) passed as they are, ``A`` row-major and ``B``
    column-major as the fragment layout has them."""
    core: TensorCore = u.arg[0]
    if core.dims != (16, 8, 16):
        raise NotImplementedError(f"CUDARenderer has no tensor core of shape {core.dims}")
    acc, base = (ctx.names[s] for s in u.src[0].src)
    (n_a, n_b), n_c = core.registers, core.elements[2]
    acc_type, in_type = PTX_TYPES[core.dtype_acc], PTX_TYPES[core.dtype_in]
    c = ",".join(f"%{i}" for i in range(n_c))
    a = ",".join(f"%{n_c + i}" for i in range(n_a))
    b = ",".join(f"%{n_c + n_a + i}" for i in range(n_b))
    instruction = f"mma.sync.aligned.m16n8k16.row.col.{acc_type}.{in_type}.{in_type}.{acc_type}"
    ctx.emit(
        f'asm volatile("{instruction} {{{c}}}, {{{a}}}, {{{b}}}, {{{c}}};"',
        "    : " + ", ".join(f'"+f"({acc}[{base}+{i}])' for i in range(n_c)),
        "    : " + ", ".join(f'"r"({r})' for r in src[1:]) + ");",
    )


class CUDARenderer(CStyleRenderer):
    """Renders a kernel as an ``extern "C" __global__`` function for NVRTC or nvcc.

    The launch rounds the output up to whole blocks of ``BLOCK_SIZE`` threads, so each thread
    checks its index first. A grouped reduction (core's codegen/grid.py) is one block per output,
    sharing ``__shared__`` memory and waiting at ``__syncthreads()``.
    ``half`` comes from ``cuda_fp16.h`` (math in float32, like the CPU);
    bfloat16 is core's emulation (16-bit storage, float32 arithmetic), which every GPU runs.
    Constants avoid ``NAN``/``INFINITY``: NVRTC has no ``math.h``. From sm_80 on, a float16 or
    bfloat16 matmul may run on tensor cores (core's codegen/tensorcore.py): each ``WMMA`` is one
    ``mma.sync`` in inline PTX (``render_mma``).
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
    op_renderers = {**OP_RENDERERS, Ops.WMMA: render_mma}

    def __init__(self, device: str = "", arch: str = "sm_80"):
        super().__init__(device)
        #: the GPU architecture kernels are compiled for, e.g. ``sm_80``
        self.arch = arch
        #: ``mma.sync.aligned.m16n8k16`` with float16 or bfloat16 operands exists from sm_80 on
        self.tensor_cores: tuple[TensorCore, ...] = MMA_M16N8K16 if arch_number(arch) >= 80 else ()

    def render_bitcast(self, x: str, src: DType, dtype: DType) -> str:
        return f"__builtin_bit_cast({self.type_name(dtype)}, {x})"

    def prelude(self, program: list[UOp]) -> str:
        uses_half = any(u.dtype == dtypes.float16 for u in program if u.op is not Ops.SINK)
        return "#include <cuda_fp16.h>\n" if uses_half else ""
