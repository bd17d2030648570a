"""The renderer interface: linear UOps -> source text, plus the capabilities that steer codegen.

Capabilities are data, read by core: which dtypes a target holds, whether kernels loop over the
output (CPU) or are launched over a grid (GPUs), which ops it lacks and core must decompose.
No part of core asks for a device's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fusegrad.dtype import DType, dtypes
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:  # (codegen imports this module: only the type, for the annotation)
    from fusegrad.codegen.tensorcore import TensorCore


class Renderer:
    """Base class of every renderer. Subclasses set the capabilities and implement ``render``."""

    #: dtypes the target can store and compute with; using another raises ``UnsupportedOp``
    supported_dtypes: frozenset[DType] = frozenset(dtypes.all())
    #: None: the kernel loops over its output itself (CPU). N: launched over an N-dim grid of
    #: threads, the output index comes from SPECIAL ops (GPUs).
    grid_dims: int | None = None
    #: largest grid size per dimension (when ``grid_dims`` is set)
    global_max: tuple[int, ...] = (2**31 - 1, 65535, 65535)
    #: threads per group (work-group size) used when launching over a grid: elementwise kernels
    #: run in groups of this many threads, a grouped reduction (see ``has_local``) with as many
    #: or fewer. 1: the launch leaves the group size to the driver.
    local_size: int = 1
    #: the most threads one group may have (the device's limit); ``local_size`` stays below it
    max_group_size: int = 1
    #: the target has memory shared by the threads of a group (``DEFINE_LOCAL``) and a barrier
    #: between them (``BARRIER``). Core then computes a long reduction with one group per output
    #: element: each thread folds a strided share of the reduced elements into a register, the
    #: group combines the shares through shared memory (codegen/grid.py). The renderer must
    #: then render ``DEFINE_LOCAL``, ``BARRIER``, ``IF``/``ENDIF`` and the SPECIALs ``group0``
    #: (the group's index) and ``lidx0`` (the thread's index in its group).
    has_local: bool = False
    #: bytes of shared memory one group may use (when ``has_local``)
    local_memory_bytes: int = 0
    #: a matmul on a grid (``has_local``) runs tiled (codegen/tiled.py): each thread computes a
    #: block of ``(rows, columns)`` outputs in registers. Larger blocks load less per
    #: multiply-add but need more registers per thread.
    tile_upcast: tuple[int, int] = (4, 4)
    #: neighbouring threads of a group run in the lanes of one SIMD instruction (a GPU's warp,
    #: llvmpipe): a tiled matmul then gives a thread outputs a group's width apart, so that
    #: neighbours load neighbouring elements together. False (a CPU's OpenCL, whose threads are
    #: trips of a loop): a thread's outputs are next to each other, loaded as one vector.
    threads_in_lanes: bool = True
    #: a tiled matmul copies tiles of its operands into shared memory between barriers
    #: (codegen/staged.py) by default: each element is read from global memory once per group,
    #: not once per thread. Pays on GPUs; on a processor (PoCL, llvmpipe) it ran 3-40x slower.
    stage_tiles: bool = False
    #: threads that run one instruction together (a CUDA warp, a Metal SIMD-group); 1: unknown
    #: or none. A tiled launch gives a group at least this many threads.
    warp_size: int = 1
    #: tensor-core instructions (``codegen/tensorcore.py``'s ``TensorCore``): a float16/bfloat16
    #: matmul summed in float32 then runs as warp-wide ``WMMA`` ops, which the renderer must
    #: render. Empty: none, every matmul stays on the plain or tiled plans.
    tensor_cores: tuple[TensorCore, ...] = ()
    #: ALU ops rendered natively; core decomposes the others before rendering
    native_ops: frozenset[Ops] = GroupOp.ALU - {Ops.MULACC}
    #: math ops the target has only as scalar library calls, which keep its compiler from
    #: vectorising a loop (C's ``exp2f`` without ``-ffast-math``). Core computes these ops on
    #: float32 and narrower floats with plain arithmetic instead (codegen/transcendental.py,
    #: within 1.5 ulp); float64 keeps the target's own function, for its full precision.
    scalar_math_ops: frozenset[Ops] = frozenset()
    #: False: core stores bfloat16 as 16 bits and computes in float32 (see codegen/decompose.py)
    native_bfloat16: bool = False
    #: False: core stores float16 as 16 bits too and computes in float32, converting with integer
    #: ops that vectorise (a C compiler whose half conversions are scalar: gcc 12's ``_Float16``
    #: kept every loop holding one scalar)
    native_float16: bool = True
    #: the target keeps nan and infinities as IEEE 754 says; False: its compiler may assume there
    #: are none (WGSL), so results that hinge on them are not promised
    ieee_specials: bool = True
    #: loops over more elements than this may run on several threads (CPU)
    parallel_threshold: int = 1 << 15
    #: the target's SIMD registers: how many there are and how many bytes one holds. The optimiser
    #: sizes a reduction's register tile from them: accumulators that spill to memory are slow.
    vector_registers: int = 16
    vector_bytes: int = 16
    #: bytes of the largest cache the kernel's threads share (a CPU's last level); 0: unknown.
    #: The optimiser streams a matmul's whole right operand through it when it fits.
    cache_bytes: int = 0
    #: bytes of the cache each core has to itself (a CPU's level 2); 0: unknown. The optimiser
    #: sizes the group of matmul panels that stays in it from this.
    core_cache_bytes: int = 0
    #: bytes of a core's first-level data cache; 0: unknown. A matmul whose block of rows
    #: outgrows it walks wider groups of column panels (codegen/opt.py ``_panel_tile``)
    first_cache_bytes: int = 0
    #: threads that share ``cache_bytes`` while a kernel runs (the CPU's cores): a matmul's group
    #: of panels per thread takes a share of it
    cache_threads: int = 1
    #: ways of the first-level data cache (its associativity); 0: unknown. Rows of a multiple of
    #: 4 KB fall in one set: with 8 ways a register tile's rows and the vectors loaded beside them
    #: overfill it, with 12 they fit.
    cache_ways: int = 0
    #: how far ahead (bytes) a reduction asks for the inputs it streams through once
    #: (codegen/prefetch.py); 0: no prefetches, the program holds no PREFETCH op
    prefetch_bytes: int = 0
    #: bytes of the local array (``DEFINE_LOCAL``) a loop target's kernel may copy a matmul
    #: operand read across its rows into, once per block of columns (codegen/packed.py); 0: none,
    #: the layout pass copies such an operand in a kernel of its own
    pack_bytes: int = 0
    #: bytes of the local array a loop target's matmul kernel may copy a group of its right
    #: operand's column panels into, once per group, when it reads that operand in place along
    #: its rows (codegen/packed.py, chosen by codegen/opt.py): the layout pass then makes no
    #: panel copy of its own; 0: none
    group_pack_bytes: int = 0
    #: the edge of the square blocks of 4-byte elements the target transposes in registers
    #: (``Ops.TRANSPOSE_BLOCK``): a local array of ``pack_bytes`` is filled by such blocks where
    #: its sides are multiples of it, and a loop target's elementwise kernel reads an input
    #: stored transposed a block at a time (codegen/packed.py); 0: one element at a time
    transpose_block: int = 0
    #: bool and integer buffer elements narrower than this many bits are packed into 32-bit words
    #: by core (codegen/decompose.py): loads shift and mask, stores use ATOMIC_AND/ATOMIC_OR
    min_storage_bits: int = 8
    #: loop counters and integer values that only address memory are rendered 64 bits wide
    #: (``address_values``): a target whose addresses are 64-bit then adds a 32-bit offset to a
    #: pointer without widening it first, one instruction less per load (the CPU's)
    wide_addresses: bool = False

    #: a loop variable is named by its loop's kind and number (``LoopArg``): ``gidx0`` an output
    #: loop, ``pidx0`` one spread over the cores, ``ridx3`` a reduction's, ``uidx5`` an upcast
    #: loop over a register tile, ``vidx4`` a reduction's vector lanes (see uop/loops.py)
    loop_prefixes: dict[AxisKind, str] = {
        AxisKind.GLOBAL: "gidx",
        AxisKind.PARALLEL: "pidx",
        AxisKind.REDUCE: "ridx",
        AxisKind.UPCAST: "uidx",
        AxisKind.LANE: "vidx",
    }

    def __init__(self, device: str = ""):
        self.device = device

    def loop_name(self, loop: UOp) -> str:
        """The name of a RANGE's loop variable: its kind's prefix and its number (``ridx3``)."""
        return f"{self.loop_prefixes[loop.arg.kind]}{loop.arg.axis}"

    def dtype_advice(self, dtype: DType) -> str:
        """What to do about ``dtype`` when this target cannot hold it; ends the error message."""
        return "cast the tensor to a supported dtype or use another device"

    def render(self, name: str, program: list[UOp]) -> str:
        """Return the source of one kernel called ``name`` computing ``program``."""
        raise NotImplementedError

    def line_owners(self, name: str, program: list[UOp]) -> dict[int, UOp]:
        """For VIZ's links from source lines to UOps: the op of ``program`` that wrote each
        line (numbered from 1) of ``render(name, program)``. Called only while VIZ records; a
        renderer that does not say returns ``{}``."""
        return {}


def body_line_owners(source: str, body: list[str], owners: Sequence[UOp | None]) -> dict[int, UOp]:
    """``line_owners`` from a render walk: ``body`` the lines it wrote, ``owners`` the op that
    wrote each (None: none did). Numbered where the body sits in ``source``; ``{}`` when it is
    not there (the source was rendered differently)."""
    at = source.find("\n".join(body)) if body else -1
    if at < 0:
        return {}
    first = source.count("\n", 0, at) + 1
    return {first + i: u for i, u in enumerate(owners) if u is not None}
