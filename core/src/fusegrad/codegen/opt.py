"""Kernel optimisation: choosing the loop structure of a kernel before it is lowered.

A kernel that reduces (a matmul, a convolution) is slow as one flat loop: each output element
re-reads its inputs from memory. ``heuristic_opts`` gives each output axis its own loop and
*upcasts* two of them: an axis along which an input read by the reduction moves by one element
(so loads and the accumulators become vectors the C compiler can keep in registers) and an axis
those vector reads do not depend on (so each loaded vector is reused for several outputs). The
upcast parts become short inner loops over an accumulator array; the remaining loops are ordered
so the reused axis is innermost. With no such output axis (a full sum) the innermost reduced
axis runs as lanes instead, merged with the one before it when that is one run in memory.
Elementwise kernels keep one flat loop unless their views need division, then a loop per axis.

The analysis lowers the kernel (a loop per axis, or a candidate's loops) and reads the
simplified index arithmetic: which loops an input's position moves with, and by how much.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fusegrad.codegen.lower import (  # (KernelOpts: what lowering follows)
    FEW_PARALLEL_TRIPS,
    INNERMOST,
    KernelOpts,
    lower_kernel,
    online_opts,
    row_reductions,
)
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import Context, prod
from fusegrad.renderer import Renderer
from fusegrad.uop.loops import AxisKind, trips_of
from fusegrad.uop.ops import Ops, UOp, sym_max, toposort
from fusegrad.uop.pattern import graph_rewrite
from fusegrad.uop.symbolic import SIMPLIFY, stride_along, terms

#: at most this many accumulators per kernel in any candidate (BEAM's limit; the heuristic
#: sizes its tiles from the target's registers, see ``RegisterBudget``)
MAX_ACCUMULATORS = 256


@dataclass(frozen=True)
class RegisterBudget:
    """How a reduction's register tile fits the target's SIMD registers (renderer capabilities
    ``vector_registers`` and ``vector_bytes``), for elements of ``itemsize`` bytes."""

    registers: int
    width: int  # elements per register

    @staticmethod
    def of(renderer: Renderer, itemsize: int) -> RegisterBudget:
        return RegisterBudget(renderer.vector_registers, max(1, renderer.vector_bytes // itemsize))

    def vector_amounts(self) -> tuple[int, ...]:
        """Upcasts of the vector axis, widest first: at most two registers' worth, so that several
        rows of accumulators fit beside the vectors loaded for them."""
        return tuple(a for a in VECTOR_AMOUNTS if a <= 2 * self.width) or (VECTOR_AMOUNTS[-1],)

    def accumulators(self, vector: int) -> int:
        """Accumulators that fit in registers beside ``vector`` elements of loaded input and a
        broadcast value or two: a tile of 16 floats on AVX2 leaves room for 6 rows of it."""
        loaded = -(-vector // self.width)
        return max(1, self.registers - loaded - 2) * self.width

    def rows(self, vector: int, per_row: int = 1) -> tuple[int, ...]:
        """Row counts (``REUSE_AMOUNTS``) of a tile that fit the accumulators beside ``vector``
        elements of loaded input, each row holding ``per_row`` vectors' worth."""
        return tuple(a for a in REUSE_AMOUNTS if a * per_row * vector <= self.accumulators(vector))

    def lane_amounts(self) -> tuple[int, ...]:
        """Lane counts for a reduction: at most half of the registers of them."""
        return tuple(a for a in LANE_AMOUNTS if a <= self.registers // 2 * self.width) or (1,)


def _reduce_of(value: UOp) -> UOp | None:
    reduces = [u for u in toposort([value]) if u.op is Ops.REDUCE_AXIS]
    return reduces[0] if len(reduces) == 1 else None


def _lowered(value: UOp, opts: KernelOpts | None) -> list[UOp]:
    """The nodes of ``value``'s kernel lowered with ``opts`` (None: one flat loop), simplified."""
    out = UOp(Ops.PARAM, value.dtype, (), (0, max(1, sym_max(value.size))))
    sink = UOp(Ops.SINK, src=(UOp(Ops.STORE, src=(out, value)),))
    lowered = lower_kernel(sink, grid=False, opts=opts, balance=False)
    return toposort([graph_rewrite(lowered, SIMPLIFY)])


def _plain_kernel(value: UOp) -> list[UOp]:
    """The nodes of ``value``'s kernel with a plain loop per output axis, simplified."""
    return _lowered(value, KernelOpts(tuple(range(len(value.shape)))))


def _index_divisions(value: UOp, opts: KernelOpts | None) -> int:
    """How many ``//`` and ``%`` of indices the kernel keeps after simplification."""
    return sum(
        1 for u in _lowered(value, opts) if u.op in (Ops.IDIV, Ops.MOD) and u.dtype == dtypes.index
    )


def _output_loops(nodes: list[UOp], shape: tuple[int, ...]) -> dict[int, UOp]:
    """Output axis -> its loop in the plain kernel (size-1 axes have none; the output loops are
    numbered first, loop number i is the i-th axis longer than 1)."""
    looped = [d for d, s in enumerate(shape) if isinstance(s, UOp) or s > 1]  # (a variable too)
    outputs = (AxisKind.GLOBAL, AxisKind.PARALLEL)
    return {looped[u.arg.axis]: u for u in nodes if u.op is Ops.RANGE and u.arg.kind in outputs}


def _load_axes(nodes: list[UOp], shape: tuple[int, ...]) -> list[set[int]]:
    """For each input read, the output axes its index changes along."""
    axis_of = {loop: d for d, loop in _output_loops(nodes, shape).items()}
    return [
        {axis_of[n] for n in toposort([u.src[0]]) if n in axis_of}
        for u in nodes
        if u.op is Ops.LOAD
    ]


def _reads_consecutively(nodes: list[UOp], loop: UOp) -> bool:
    """Whether some input read inside the reduction is read at consecutive addresses as
    ``loop`` counts up. (A read the reduction does not move, such as a per-channel bias, is
    loaded once per output and says nothing about how to vectorise.)"""
    reduce_loops = {u for u in nodes if u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE}
    for u in nodes:
        if u.op is Ops.LOAD and loop in terms(index := u.src[0].src[1]):
            if not reduce_loops or reduce_loops & set(toposort([index])):
                return True
    return False


def _innermost_reduce_is_contiguous(nodes: list[UOp]) -> bool:
    loops = sorted(
        (u for u in nodes if u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE),
        key=lambda u: u.arg.axis,
    )
    return bool(loops) and _reads_consecutively(nodes, loops[-1])


def _output_axis_is_contiguous(nodes: list[UOp], shape: tuple[int, ...], axis: int) -> bool:
    loop = _output_loops(nodes, shape).get(axis)
    return loop is not None and _reads_consecutively(nodes, loop)


#: the longest run (elements) of an output's reduced axes inside its axis for which the output
#: axis is upcast even though it is not contiguous (see _reduces_around)
SHORT_RUN = 1024
#: ... when the reduction would otherwise get this many lanes or fewer: a plain sum over runs
#: of 400 (rows of 20 merged, 16 lanes) ran 4.5x faster as lanes
FEW_LANES = 4


def _reduces_around(reduce: UOp, axis: int) -> bool:
    """Whether the reduction runs over axes on both sides of output ``axis``, with short runs
    inside it: a BatchNorm's sums over (batch, height, width) for each channel. One output then
    reads a short run of height x width per batch, scattered over memory; a register of
    neighbouring outputs reads, per batch, one block of them side by side. The sums of a
    gradient under a pooling (6x6 and 20x20 runs) ran 1.4-2.6x faster upcast by a register."""
    src, axes = reduce.src[0].shape, reduce.arg[1]
    outer = any(a < axis and src[a] > 1 for a in axes)
    inner = [src[a] for a in axes if a > axis]
    return outer and bool(inner) and prod(inner) <= SHORT_RUN


def _amount(size: int, choices: tuple[int, ...]) -> int:
    return next((c for c in choices if size % c == 0 and size > c), 1)


def _vector_amount(shape: tuple[int, ...], axis: int, choices: tuple[int, ...]) -> int:
    """The vector axis's upcast. It may take the whole axis when another output axis of 8 or more
    is left to split between the cores: the 32 channels of a 5x5 convolution as two registers,
    each loaded input then feeding two FMAs (8-12% faster than 16 channels with more rows)."""
    size = shape[axis]
    if size in choices and any(s >= 8 for d, s in enumerate(shape) if d != axis):
        return size
    return _amount(size, choices)


#: lane counts tried for a reduction, most first: 64 lanes are 4 AVX-512 registers (or 8 AVX2
#: ones) that add independently, so the adds' latency hides behind each other
LANE_AMOUNTS = (64, 32, 16, 8, 4)
#: upcast amounts tried for the vector axis, widest first
VECTOR_AMOUNTS = (32, 16, 8, 4)
#: upcast amounts tried for the reuse axis (unrolled, so any count works: 5 of a width of 20)
REUSE_AMOUNTS = (8, 7, 6, 5, 4, 3, 2)


#: a vector that does not divide its axis computes at least this fraction of its elements once
#: (``_ragged_vector``): 50 columns as two vectors of 32 compute 64 (78%), 5 as two of 4 (62%)
#: would do more work again than they save
RAGGED_USE = 2 / 3


def _ragged_vector(size: int, amounts: tuple[int, ...]) -> int:
    """The vector for an output axis of ``size`` that no register-wide amount divides (100
    columns, 50): of ``amounts`` shorter than the axis and wasting little (``RAGGED_USE``), the
    one that computes the most outputs per vector, its last block shifted back to end at the
    axis's end (``KernelOpts.shifted``); 1 if none. A (256, 784) @ (784, 100) ran in vectors of 4
    (the widest that divides 100) at 87 GFLOP/s, 220 in vectors of 32; a (32, 50, 50) @
    (32, 50, 50) without any at 34, 1.4x torch's speed so (AMD EPYC, AVX-512, 2 cores)."""
    fitting = [a for a in amounts if a < size and size >= RAGGED_USE * -(-size // a) * a]
    return max(fitting, key=lambda a: (size / -(-size // a), a), default=1)


#: the widest run of columns one row's product sums at a time (``_streamed_columns``), and the
#: narrowest worth it
STREAMED_COLUMNS = (1024, 512, 256)


def _streamed_columns(
    nodes: list[UOp], shape: tuple[int, ...], vec_axis: int | None, renderer: Renderer
) -> KernelOpts | None:
    """For a single row's product reading its right operand in place along its rows (``x @ w``
    with ``w`` stored (k, m): a decode step's layer as ONNX files store it), each core sums a
    run of up to 1024 columns at a time, its sums in a local array (4 KB, in L1), reading one
    run of each row of ``w`` per step of the sum; else None.

    The register tile walks a panel of 32 columns down all k rows of ``w``, a row (8 KB apart
    for m = 2048) a step: each step a page of its own, which the prefetcher does not follow.
    (1, 2048) @ (2048, 2048) on 2 cores (AMD EPYC), in C: 0.90 ms in panels of 32, 0.50 in
    runs of 512, 0.49 of 1024; torch 0.45-0.51."""
    if vec_axis is None or any(s != 1 for d, s in enumerate(shape) if d != vec_axis):
        return None
    m = shape[vec_axis]
    reduces = [u for u in nodes if u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE]
    loop = _output_loops(nodes, shape).get(vec_axis)
    if not isinstance(m, int) or loop is None or len(reduces) != 1:
        return None
    rows = columns = False  # (x, read along the sum alone; w, along its rows in runs)
    for u in nodes:
        if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX:
            index = u.src[0].src[1]
            along, across = stride_along(index, reduces[0]), stride_along(index, loop)
            rows |= across == 0 and along != 0
            columns |= across == 1 and along is not None and along >= m
    if not (rows and columns):  # (a sum over rows alone, not a product, keeps its tile)
        return None
    threads = max(1, renderer.cache_threads)
    width = next((w for w in STREAMED_COLUMNS if w * threads <= m), None)
    if width is None:
        return None
    order = tuple(range(len(shape)))
    return KernelOpts(order, ((vec_axis, width),), shifted=(vec_axis,) if m % width else ())


def _upcast_reads_consecutively(value: UOp, axis: int, amount: int) -> bool:
    """Whether some input is read consecutively along output ``axis`` upcast by ``amount`` (a
    panelled matmul operand moves by one only within its panel: ``j % 16``, visible once the
    axis is split into panel and lane)."""
    opts = KernelOpts(tuple(range(len(value.shape))), ((axis, amount),))
    nodes = _lowered(value, opts)
    lane = next(u for u in nodes if u.op is Ops.RANGE and u.arg.kind is AxisKind.UPCAST)
    return _reads_consecutively(nodes, lane)


def _contiguous_axes(
    value: UOp, nodes: list[UOp], axes: list[int], amounts: tuple[int, ...]
) -> list[int]:
    """The output axes along which some input is read consecutively, in the plain kernel or
    once the axis is upcast by the widest of ``amounts`` that divides it."""
    shape = value.shape
    return [
        d
        for d in axes
        if _output_axis_is_contiguous(nodes, shape, d)
        or (
            (amount := _amount(shape[d], amounts)) > 1
            and _upcast_reads_consecutively(value, d, amount)
        )
    ]


def _vector_axis(
    shape: tuple[int, ...], axes: list[int], contiguous: list[int], amounts: tuple[int, ...]
) -> int | None:
    """The output axis to run as vectors: a ``contiguous`` one, the one allowing the widest
    vectors, the last of equals (the output is written along it); else the last axis."""
    if not contiguous:
        return axes[-1] if axes else None
    return max(contiguous, key=lambda d: (_amount(shape[d], amounts), d))


def heuristic_opts(ast: UOp, renderer: Renderer) -> KernelOpts | None:
    """The loop structure for ``ast`` on ``renderer``'s target, or None to keep one flat loop
    (elementwise kernels, and every kernel of a target launched over a grid)."""
    value = ast.src[0].src[1]
    reduce = _reduce_of(value)
    if renderer.grid_dims is not None or Context.NOOPT:
        return None
    if (row := row_opts(value, RegisterBudget.of(renderer, value.dtype.itemsize))) is not None:
        return row
    if (online := online_opts(value)) is not None:
        return online
    if reduce is None:
        return _shared_lanes(value, renderer) or _elementwise_opts(value, renderer.transpose_block)
    shape = value.shape
    axes = [d for d, s in enumerate(shape) if s > 1]
    upcast: list[tuple[int, int]] = []
    nodes = _plain_kernel(value)
    regs = RegisterBudget.of(renderer, value.dtype.itemsize)
    if (packed := packed_opts(value, nodes, renderer, regs)) is not None:
        return packed
    amounts = regs.vector_amounts()
    contiguous = _contiguous_axes(value, nodes, axes, amounts)  # (lowers once per axis)
    vec_axis = _vector_axis(shape, axes, contiguous, amounts)
    reduce_contiguous = _innermost_reduce_is_contiguous(nodes)
    if (streamed := _streamed_columns(nodes, shape, vec_axis, renderer)) is not None:
        return streamed
    shifted: tuple[int, ...] = ()
    if vec_axis is not None and (vec_axis in contiguous or not reduce_contiguous):
        vec = _vector_amount(shape, vec_axis, amounts)
        if vec < regs.width and (ragged := _ragged_vector(shape[vec_axis], amounts)) > vec:
            vec, shifted = ragged, (vec_axis,)
        if vec > 1:
            upcast.append((vec_axis, vec))
    lanes = None if upcast or not reduce_contiguous else _lanes(reduce, regs)
    # an output axis too short to be the vector (the 4 rows of a word, summed in lanes) may be
    # the rows of the tile, all of it
    short = lanes is not None and vec_axis is not None and shape[vec_axis] < regs.width
    # with the sum in lanes no output axis is a vector: any may be the tile's rows (a matvec's
    # output: 8 rows share each load of x, 4.5x faster for a (512, 128) weight)
    placed = vec_axis if lanes is None else None
    others = [d for d in axes if d != placed]
    loads = _load_axes(nodes, shape) if others else []

    def reuse_score(d: int) -> tuple[int, int, int]:
        """Vector loads that need not be repeated along ``d`` first, then any loads; of equals the
        innermost axis, whose neighbouring elements share cache lines."""
        return (
            sum(1 for a in loads if placed in a and d not in a),
            sum(1 for a in loads if d not in a),
            d,
        )

    vector = upcast[0][1] if upcast else lanes[1] if lanes else 1
    candidates = sorted(others, key=reuse_score, reverse=True)
    if lanes is not None:  # rows only where they share a load (not a channel sum's runs)
        candidates = [d for d in candidates if any(d not in a for a in loads)]
    rows, vector = _tile_rows(shape, candidates, vector, regs, bool(upcast), short=short)
    if upcast and vec_axis is not None:
        upcast[0] = (vec_axis, vector)
    upcast[:0] = rows
    # a tile's last block of rows ends at the axis's end, as a ragged vector's does, instead of
    # repeating the last row: its rows then lie a fixed stride apart. With the clamped rows
    # of 1024 by 6 (AVX2) gcc knew four of them a fixed stride apart, loaded two as whole
    # vectors to broadcast their first element, and the kernel ran 2-3% slower (10.1 vs 9.8 ms)
    shifted += tuple(d for d, amount in rows if isinstance(shape[d], int) and shape[d] % amount)
    reuse = rows[-1][0] if rows else None
    second = rows[0][0] if len(rows) > 1 else None
    outer = [d for d in range(len(shape)) if d not in (placed, reuse, second)]
    group = _packed_group(nodes, shape, upcast, renderer)
    if group is not None:  # (the groups outermost, each packed once for all the rows)
        loops = [placed, *outer, second, reuse]
    elif _rows_outside(reduce, shape, upcast, renderer):
        loops = [*outer, reuse, placed]
    else:
        loops = [*outer, placed, second, reuse]
    order = tuple(d for d in loops if d is not None)
    tile = _panel_tile(reduce, shape, upcast, renderer) if group is None else group
    opts = KernelOpts(order, tuple(upcast), lanes, tile=tile, shifted=shifted)
    opts = _merged(value, opts, reduce, regs) if lanes else _merged_tile(value, opts, reduce)
    if (
        not upcast
        and (opts.lanes is None or opts.lanes[1] <= FEW_LANES)
        and vec_axis is not None
        and _reduces_around(reduce, vec_axis)
        and (vec := _amount(shape[vec_axis], (regs.width,))) > 1
    ):
        return KernelOpts(order, ((vec_axis, vec),))  # few lanes or none: a register of outputs
    return opts


def symbolic_opts(ast: UOp, renderer: Renderer) -> KernelOpts | None:
    """The loops of a kernel whose sizes hold variables (a KV cache's length), on a target that
    loops over its output: a loop per output axis, so that positions are sums of loop counters
    (one flat loop over ``context * 9`` scores divided and took the remainder of each position
    in every trip of the reduction: SmolLM2's attention scores took 0.2 ms a layer), and lanes
    over a reduction's innermost axis when its size is a number, or else a fixed output axis
    read consecutively as vectors (attention's weighted sum over the cache, 64 values of a
    head: 2.5 -> 0.3 ms a step). None on a grid target."""
    value = ast.src[0].src[1]
    if renderer.grid_dims is not None or Context.NOOPT:
        return None
    shape, order = value.shape, tuple(range(len(value.shape)))
    reduce = _reduce_of(value)
    if reduce is None:
        return KernelOpts(order)
    regs = RegisterBudget.of(renderer, value.dtype.itemsize)
    # a fixed output axis along which an input is read consecutively runs as vectors (the head
    # size of attention's weighted sum over a cache of variable length)
    nodes = _lowered(value, KernelOpts(order))
    for d in reversed(order):
        if isinstance(shape[d], int) and _output_axis_is_contiguous(nodes, shape, d):
            if (amount := _amount(shape[d], regs.vector_amounts())) > 1:
                return KernelOpts(order, ((d, amount),))
    if not isinstance(reduce.src[0].shape[max(reduce.arg[1])], int):
        return KernelOpts(order)
    lanes = _lanes(reduce, regs)
    # a fixed output axis that a load does not move along (the queries of a group, which share
    # each key): the rows of a tile, each such load used for all of them, and as many sums in
    # flight (one sum of a 64-value dot product waited on its own adds: SmolLM2's scores over
    # 160 positions took 26 us a layer)
    loads = _load_axes(nodes, shape)
    fixed = [
        d
        for d in order
        if isinstance(shape[d], int) and shape[d] > 1 and any(d not in a for a in loads)
    ]
    rows, _ = _tile_rows(shape, fixed, lanes[1] if lanes else 1, regs, False, short=True)
    tiled = [d for d, _ in rows]
    # the output axis of variable size outermost: the loop spread over the cores has many trips
    # (over SmolLM2's 3 KV heads, one of two cores did twice the other's share)
    outer = sorted((d for d in order if d not in tiled), key=lambda d: isinstance(shape[d], int))
    return KernelOpts(tuple(outer) + tuple(tiled), tuple(rows), lanes)


def _tile_rows(
    shape: tuple[int, ...],
    candidates: list[int],
    vector: int,
    regs: RegisterBudget,
    whole: bool,
    short: bool = False,
) -> tuple[list[tuple[int, int]], int]:
    """The upcasts whose rows reuse each loaded vector (outermost first), from the best of
    ``candidates`` that allows more than one row, and the vector's width (perhaps halved).
    ``whole``: the vector is an output axis, and the rows may span a whole short axis.
    ``short``: the vector is a reduction's lanes, and the rows too may span a whole short axis
    (the 4 rows a 4-bit weight packs into each 32-bit word: one load for the four)."""
    budget = regs.rows(vector)
    span = whole or short
    reuse = next((d for d in candidates if _reuse_amount(shape[d], budget, span) > 1), None)
    if reuse is None and whole and vector > regs.width:
        # no row count fits at this width (rows of 7 beside 16 floats on AVX2): half as wide,
        # where that finds rows
        halved, narrow = _tile_rows(shape, candidates, vector // 2, regs, whole, short)
        return (halved, narrow) if halved else ([], vector)
    if reuse is None:
        return [], vector
    rows = _reuse_amount(shape[reuse], budget, span)
    if (
        whole
        and rows < shape[reuse] <= REUSE_AMOUNTS[0]
        and vector > regs.width
        and shape[reuse] * (vector // 2) <= regs.accumulators(vector // 2)
    ):
        # a short axis the tile cannot span at this width (8 rows of 16 floats on AVX2):
        # half as wide, all of it. A 3x3 conv over rows of 8 ran 1.3x faster than 4 x 16.
        vector, rows = vector // 2, shape[reuse]
    # registers left over (3 window columns x 16 channels use half of AVX2's): rows along a
    # second axis too. A 3x3 conv's weight gradient, 2 x 3 x 16, ran 1.7x faster than 3 x 16.
    more = regs.rows(vector, rows) if whole else ()
    second = next((d for d in candidates if d != reuse and _amount(shape[d], more) > 1), None)
    if second is None:
        return [(reuse, rows)], vector
    return [(second, _amount(shape[second], more)), (reuse, rows)], vector


def _reuse_amount(size: int, budget: tuple[int, ...], whole: bool = False) -> int:
    """The reuse upcast for an axis of ``size``: the largest the registers allow, also when it
    does not divide a long axis (6 rows of 1024: the last block redoes two rows), else the
    largest that divides it; with ``whole``, a short axis that fits (a convolution window's 5
    or 3 columns) may be taken whole. Its rows read neighbouring input elements, so a 5 x 16
    tile of a 5x5 conv's weight gradient ran 1.3-3.5x faster than 4 x 16 over the channels."""
    if budget and size >= 16 * budget[0]:
        return budget[0]
    return size if whole and size in budget else _amount(size, budget)


#: bytes of the inputs read along the reduction that a tile of panels may keep in cache, when
#: the renderer does not say how much cache a core has (``core_cache_bytes``): half of a 512 KB L2
TILE_BYTES = 256 * 1024


def _tile_bytes(renderer: Renderer) -> int:
    """How much of a group of panels may stay in a core's own cache while rows stream past: half
    of it, the rest holds the rows and the output."""
    return renderer.core_cache_bytes // 2 or TILE_BYTES


#: a row's length in bytes that is a multiple of this puts a matmul's rows in the same cache sets
ALIASING_STRIDE = 4096
#: ... and evict each other in a first-level cache of this many ways or fewer (0: unknown, taken
#: as few); a 12-way one (Intel since Ice Lake) holds a tile's 8 rows and the panel beside them
ALIASING_WAYS = 8


def packed_opts(
    value: UOp, nodes: list[UOp], renderer: Renderer, regs: RegisterBudget
) -> KernelOpts | None:
    """The register tile of a matmul whose column operand is read across its rows and along
    the sum (attention's ``q @ k^T``: ``k[n, d]``), on a target that packs such an operand
    inside the kernel (``Renderer.pack_bytes``, codegen/packed.py): rows by a vector of columns,
    as for any matmul, with the blocks of rows looped inside the blocks of columns, so that
    each block of columns' packed copy serves every block of rows. ``nodes``: the plain kernel.
    None for any other kernel, or when the copy (sum length x vector) exceeds ``pack_bytes``."""
    reduces = [u for u in nodes if u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE]
    if not renderer.pack_bytes or len(reduces) != 1 or (length := trips_of(reduces[0])) is None:
        return None
    shape = value.shape
    loops = _output_loops(nodes, shape)
    reads = [u for u in nodes if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    moves = [{d: stride_along(u.src[0].src[1], loop) for d, loop in loops.items()} for u in reads]
    if any(step is None or step == 1 for strides in moves for step in strides.values()):
        return None  # a read along an output axis already (a @ b): the usual tile does
    tiles = []
    for read, strides in zip(reads, moves):
        if stride_along(read.src[0].src[1], reduces[0]) != 1:
            continue
        for n, step in strides.items():
            if step is None or step <= 1 or isinstance(shape[n], UOp):
                continue
            # the rows: an axis this operand stays on, which another read moves along
            rows = [
                m
                for m, own in strides.items()
                if own == 0
                and not isinstance(shape[m], UOp)
                and any(o.get(m) and o.get(n) == 0 for o in moves)
            ]
            vector = _vector_amount(shape, n, regs.vector_amounts())
            panel = length * vector * read.dtype.itemsize
            # (a vector narrower than a register: a dot product per output does better, as
            # silero-vad's STFT, 4 columns summed over 256: 57 -> 69 us a call tiled so)
            if not rows or vector < regs.width or panel > renderer.pack_bytes:
                continue
            m = max(rows, key=lambda d: shape[d])
            if fits := [a for a in regs.rows(vector) if shape[m] >= 2 * a]:
                amount = next((a for a in fits if shape[m] % a == 0), fits[0])
                tiles.append((n, m, amount, vector))
    if not tiles:
        return None
    # (both operands of q @ k^T qualify: the columns are the output's innermost axis of the two,
    # so that the tile stores vectors)
    n, m, amount, vector = max(tiles)
    order = (*(d for d in range(len(shape)) if d not in (n, m)), n, m)
    return KernelOpts(order, ((m, amount), (n, vector)))


def _matmul_tile(reduce: UOp, upcast: list[tuple[int, int]]) -> tuple[int, int, int] | None:
    """For a register tile over two axes (a matmul's rows and columns): the vector axis, its
    upcast and the reduction's length; None for other tiles."""
    if len(upcast) != 2:
        return None
    (_, _), (vec_axis, vec) = upcast
    return vec_axis, vec, reduce.src[0].size // max(1, reduce.size)


def _rows_outside(
    reduce: UOp, shape: tuple[int, ...], upcast: list[tuple[int, int]], renderer: Renderer
) -> bool:
    """Whether a matmul-like tile should loop over its blocks of rows outside its column panels.

    The columns go outside by default: a group of column panels stays in L2 while every block
    of rows streams past it. But rows a multiple of 4 KB long fall in the same cache sets and
    evict each other, so each block of rows comes from the last-level cache again and again.
    Then, when the whole right operand fits a quarter of that cache (renderer capability
    ``cache_bytes``), the rows go outside: each block stays in L1 while the operand streams.
    Measured on a 2-core AVX2 machine with 32 MB of L3, GFLOP/s columns-outside vs rows-outside:
    1024² 155 vs 181, 768² 125 vs 115 (no aliasing), 2048² 130 vs 109 (16 MB operand).

    A right operand that fits a core's share of cache (``_tile_bytes``) also puts the rows
    outside: it stays in cache either way, and the outermost (parallel) loop then shares out
    many blocks of rows instead of a few column panels (a 96-column operand has 3, for 2 cores).
    Measured on a 2-core AVX-512 machine, (512x512)@(512xm) with m = 96 / 160 / 192 / 256:
    128 / 153 / 145 / 192 GFLOP/s columns-outside vs 162 / 178 / 185 / 192; the same on AVX2."""
    if (tile := _matmul_tile(reduce, upcast)) is None:
        return False
    vec_axis, _, length = tile
    row_bytes = length * reduce.dtype.itemsize
    if row_bytes * shape[vec_axis] <= _tile_bytes(renderer):
        return True
    return (
        bool(renderer.cache_bytes)
        and renderer.cache_ways <= ALIASING_WAYS
        and row_bytes % ALIASING_STRIDE == 0
        and row_bytes * shape[vec_axis] <= renderer.cache_bytes // 4
    )


def _packed_group(
    nodes: list[UOp],
    shape: tuple[int, ...],
    upcast: list[tuple[int, int]],
    renderer: Renderer,
) -> tuple[tuple[int, int]] | None:
    """The group of column panels (``KernelOpts.tile``) a matmul walks with its columns outside
    (outermost: the groups are shared out between the cores), packing the group inside the
    kernel (codegen/packed.py), when it reads its right operand in place along its rows, the
    same for every row (a row-major ``w`` of a linear layer, over a batch of rows or not: the
    layout pass makes no panel copy of one that ``group_trips`` packs); else None. ``nodes``:
    the plain kernel.

    The copy into panels is a pass over ``w`` in a kernel of its own (its write and the
    product's read of 4 MB for a 1024² matmul, 2-3% of it); packed, each thread copies its
    groups of panels from ``w`` into its own array, which stays in L2 while every block of rows
    streams past. Measured in C on 2 cores (AMD EPYC, AVX2 code), 1024²: 9.80-10.04 ms with the
    copy kernel, 9.61-9.72 packed in groups of 4 or 8 panels (256 or 512 KB), 9.86-9.93 in
    groups of 2, 10.08-10.19 one panel at a time (each block of rows read again per panel);
    numpy's OpenBLAS 9.69-9.93."""
    if len(upcast) < 2 or not renderer.group_pack_bytes or any(isinstance(s, UOp) for s in shape):
        return None
    (vec_axis, vec), loops = upcast[-1], _output_loops(nodes, shape)
    reduces = [u for u in nodes if u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE]
    if vec_axis not in loops or len(reduces) != 1 or (length := trips_of(reduces[0])) is None:
        return None
    for u in nodes:  # the column operand, read along its rows: a row of w a step of the sum
        if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX:
            index = u.src[0].src[1]
            along = stride_along(index, reduces[0])
            if stride_along(index, loops[vec_axis]) != 1 or along is None or along <= vec:
                continue
            # (the same for every row: a batch of rows too, which w is broadcast along)
            if any(stride_along(index, loop) != 0 for d, loop in loops.items() if d != vec_axis):
                continue
            most = renderer.group_pack_bytes  # (the array holds w's own elements)
            trips = group_trips(length, shape[vec_axis], vec, u.dtype.itemsize, most)
            return None if trips is None else ((vec_axis, trips),)
    return None


#: panels a group packed inside a matmul kernel may hold: fewer read each block of rows again
#: too often (2 panels of 16 columns ran 1024² no faster than the copy kernel and the product;
#: with AVX-512's panels of 32 columns too, 9.63-9.68 vs 9.58-9.66 ms)
GROUP_PANELS = (8, 4)


def group_trips(length: int, columns: int, vector: int, itemsize: int, most: int) -> int | None:
    """How many panels of ``vector`` columns a group packed inside a matmul kernel holds (the
    most of ``GROUP_PANELS`` within ``most`` bytes, ``Renderer.group_pack_bytes``, leaving at least
    ``FEW_PARALLEL_TRIPS`` groups for the cores to share), for a sum of ``length``; None: no
    such group. The layout pass asks this too."""
    if columns % vector:
        return None
    blocks = columns // vector
    return next(
        (
            t
            for t in GROUP_PANELS
            if blocks % t == 0
            and blocks // t >= FEW_PARALLEL_TRIPS
            and t * length * vector * itemsize <= most
        ),
        None,
    )


#: the most column panels a group walks when its block of rows outgrows the first-level cache
WIDE_GROUP = 32


def _panel_tile(
    reduce: UOp, shape: tuple[int, ...], upcast: list[tuple[int, int]], renderer: Renderer
) -> tuple[tuple[int, int], ...]:
    """For a register tile over two axes (a matmul's rows and columns), walk a few column
    panels per block of rows: each row block is then read once per group of panels instead of
    once per panel, and the group (reduce length x panels x vector) stays in cache.

    When no group fits the cache, a tile whose rows divide their axis still walks 2 panels:
    without that loop gcc 12 packed such a tile in pieces (16 + 8 + 4 + 1 floats of a row of
    32), and it ran at half speed; rows that do not divide are clamped (``lower.output_index``)
    and packed whole either way. Measured, one group of 2 vs none: 4096² on AVX-512 (1 MB
    group) 107 -> 388 GFLOP/s, 3072² on AVX2 101 -> 206.

    A block of rows longer than the first-level cache (``first_cache_bytes``; 6 rows of 2048
    floats are 48 KB) is read again from L2 by each panel of the group, and from further out
    once per group: then the group widens to up to 32 panels, within a quarter of each thread's
    share of the last-level cache (``cache_bytes``, ``cache_threads``), its panels streaming from
    there. Measured on 2 cores (AMD EPYC, 32 MB L3), GFLOP/s: AVX2 2048² 201-208 -> 209-217
    (32 panels of 128 KB), 3072² 200-203 -> 214-217 (16); AVX-512 the same or better. Shorter
    rows keep the L2 group: a GPT's 512x256 @ 256x1024 with 32 panels ran at 132-198 instead
    of 217."""
    if (tile := _matmul_tile(reduce, upcast)) is None:
        return ()
    vec_axis, vec, length = tile
    blocks = shape[vec_axis] // vec
    (row_axis, rows), _ = upcast
    itemsize = reduce.dtype.itemsize
    budget, most = _tile_bytes(renderer), 8
    if renderer.first_cache_bytes and rows * length * itemsize > renderer.first_cache_bytes:
        share = renderer.cache_bytes // (4 * max(1, renderer.cache_threads))
        budget, most = max(budget, share), WIDE_GROUP
    trips = next(
        (
            t
            for t in (32, 16, 8, 4, 2)
            if t <= most
            and blocks % t == 0
            and blocks >= 2 * t
            and length * t * vec * itemsize <= budget
        ),
        None,
    )
    if trips is None and shape[row_axis] % rows == 0 and blocks % 2 == 0 and blocks >= 4:
        trips = 2
    return ((vec_axis, trips),) if trips and length >= 256 else ()


def _merged(value: UOp, opts: KernelOpts, reduce: UOp, regs: RegisterBudget) -> KernelOpts:
    """Lanes over a short innermost reduced axis (rows of 20: 4 lanes) do little; when the axis
    before it is next to it and the inputs are laid out so that the two are one run (the merged
    loop leaves no more divisions than the two loops), run them as one loop with wider lanes."""
    src, axes = reduce.src[0], sorted(a for a in reduce.arg[1] if reduce.src[0].shape[a] > 1)
    if len(axes) < 2 or axes[-2] != axes[-1] - 1 or src.shape[axes[-1]] >= 64:
        return opts
    size = src.shape[axes[-2]] * src.shape[axes[-1]]
    amount = next((c for c in regs.lane_amounts() if size % c == 0 and size >= 8 * c), 1)
    if amount <= (opts.lanes[1] if opts.lanes else 1):
        return opts
    merged = KernelOpts(opts.order, opts.upcast, (axes[-1], amount), merge=True)
    return merged if _index_divisions(value, merged) <= _index_divisions(value, opts) else opts


def _merged_tile(value: UOp, opts: KernelOpts, reduce: UOp) -> KernelOpts:
    """A matmul's register tile summed over two axes that are one run in memory (a weight's
    gradient over batch x time, ``x^T @ dy`` with ``x`` (4, 128, 1024)): one loop over both,
    when that leaves no more divisions. Inside two reduce loops the tile stays a loop of vectors
    whose accumulators gcc keeps in memory (codegen/hints.py); in one it is unrolled into
    registers (the GPT's weight gradients ran 90-120 instead of 200 GFLOP/s)."""
    src = reduce.src[0]
    axes = sorted(a for a in reduce.arg[1] if src.shape[a] > 1)
    if _matmul_tile(reduce, list(opts.upcast)) is None or len(axes) != 2 or axes[0] + 1 != axes[1]:
        return opts
    merged = dataclasses.replace(opts, merge=True)
    return merged if _index_divisions(value, merged) <= _index_divisions(value, opts) else opts


def _shared_lanes(value: UOp, renderer: Renderer) -> KernelOpts | None:
    """A kernel of several sums of one op and one length (an LSTM cell's eight matrix-vector
    products, one per gate and input, through views of different shapes): a loop per output
    axis and each sum's own innermost axis in lanes. As one flat loop, each sum ran scalar."""
    reduces = [u for u in toposort([value]) if u.op is Ops.REDUCE_AXIS]
    if len(reduces) < 2 or any(isinstance(s, UOp) for s in value.shape):
        return None
    inner = {(r.arg[0], r.src[0].shape[max(r.arg[1])], r.src[0].size // r.size) for r in reduces}
    if len(inner) != 1:
        return None  # (sums of different ops or lengths)
    lanes = _lanes(reduces[0], RegisterBudget.of(renderer, value.dtype.itemsize))
    order = tuple(range(len(value.shape)))
    return KernelOpts(order, lanes=(INNERMOST, lanes[1])) if lanes else None


def _elementwise_opts(value: UOp, block: int) -> KernelOpts | None:
    """One flat loop, unless finding the inputs' elements from the flat position takes division:
    then a loop per axis, so the positions are sums of loop counters (and the innermost loop
    can run as vectors). Views such as broadcasts, pads and windows need the division.
    ``block``: the renderer's ``transpose_block`` (``_transpose_tile``)."""
    if sum(1 for s in value.shape if s > 1) < 2 or _index_divisions(value, None) == 0:
        return None
    return KernelOpts(tuple(range(len(value.shape))), _transpose_tile(value, block))


#: rows of a transposed read taken together (``_transpose_tile``)
TRANSPOSE_ROWS = 8
#: ... when the innermost loop is this long or longer: MNIST's layout copies (innermost 24-64
#: channels or pixels) ran 1.2-1.8x slower so, a (1024, 256) optimizer update 6x faster
TRANSPOSE_MIN_RUN = 128


def _transpose_tile(value: UOp, block: int) -> tuple[tuple[int, int], ...]:
    """An upcast for an elementwise kernel that reads an input across its innermost loop (a
    transposed gradient, ``g.T``): each element would then come from a cache line of its own.
    Upcast by ``TRANSPOSE_ROWS``, the axis along which that input is consecutive runs as a
    short inner loop, so each line read serves that many outputs (an optimizer update reading
    a (256, 1024) gradient transposed: 1.29 -> 0.21 ms).

    A short innermost loop (a panel of 16 or 32 columns) reads its lines again at the next
    step while they are still in cache, unless its rows lie a multiple of 4 KB apart
    (``ALIASING_STRIDE``): then more of them than the cache has ways fall in one set and evict
    each other, and every element is read from further out. Such a read takes its rows 8 at a
    time too: the panel copy of a (256, 1024) weight read transposed (``dy @ w.T``, 32 columns a
    panel) took 261 us, 80 so (2 cores, AMD EPYC; the product after it 1160 us). 16 at a time
    (a whole cache line of each row) ran 46 -> 38 us in C, but 4x slower on a square transpose,
    whose output rows alias too.

    Where the target transposes square blocks in registers (``block``: the renderer's
    ``transpose_block``) and the input's elements are 4 bytes, both axes are upcast by it
    instead, the innermost last: codegen/packed.py's ``_packable_block`` then reads the input a
    block at a time into a small array, transposed, and the kernel's innermost loop runs along
    the output's rows, as vectors, for the input too (``_transposed_by_blocks``)."""
    if not any(u.op is Ops.PERMUTE for u in toposort([value])):
        return ()  # (no view reorders axes: the lowering below would find nothing)
    shape = value.shape
    nodes = _plain_kernel(value)
    loops = _output_loops(nodes, shape)
    if len(loops) < 2:
        return ()
    run = shape[max(loops)]
    inner = loops[max(loops)]
    for u in nodes:
        if u.op is not Ops.LOAD or u.src[0].src[0].op is Ops.DEFINE_REG:
            continue
        index = u.src[0].src[1]
        parts = terms(index)
        if inner in parts and (rows := _rows_of_runs(index, loops, shape, u.dtype)) is not None:
            return rows
        if inner in parts or inner not in toposort([index]):
            continue  # read along the innermost loop, or not moved by it
        if (blocked := _transposed_by_blocks(index, u.dtype, loops, shape, block)) is not None:
            return blocked
        step = (stride_along(index, inner) or 0) * u.dtype.itemsize
        aliasing = step > 0 and step % ALIASING_STRIDE == 0 and run > ALIASING_WAYS
        if run < TRANSPOSE_MIN_RUN and not aliasing:
            continue  # a short innermost loop's lines are read again while still in cache
        for d, loop in loops.items():
            if loop in parts and shape[d] % TRANSPOSE_ROWS == 0 and shape[d] > TRANSPOSE_ROWS:
                return ((d, TRANSPOSE_ROWS),)
    return ()


#: an elementwise kernel's innermost loop reading runs shorter than this many bytes of a row
#: reads several runs of the row together (``_rows_of_runs``)
RUN_BYTES = 256


def _rows_of_runs(
    index: UOp, loops: dict[int, UOp], shape: tuple[int, ...], dtype: DType
) -> tuple[tuple[int, int], ...] | None:
    """An upcast for a copy into panels: the innermost loop reads a short run of a row (16
    floats, a panel's width) and an outer axis the next runs of the same row, which go to other
    panels. Upcast so that a step reads ``RUN_BYTES`` of the row at once: a (2048, 2048)
    matrix's copy into panels of 16 columns read a 64-byte line every 8 KB, from memory, and
    took 1.23 ms in C on 2 cores (AMD EPYC), 0.77 with 4 panels' runs a step."""
    last = max(loops)
    run = shape[last]
    if not isinstance(run, int) or stride_along(index, loops[last]) != 1:
        return None
    if run * dtype.itemsize >= RUN_BYTES or RUN_BYTES % (run * dtype.itemsize):
        return None
    amount = RUN_BYTES // (run * dtype.itemsize)
    for d, loop in loops.items():
        between = any(d < e < last for e in loops)  # (else the output continues the run too)
        if between and stride_along(index, loop) == run and shape[d] % amount == 0:
            return ((d, amount), (last, run))
    return None


def _transposed_by_blocks(
    index: UOp, dtype: DType, loops: dict[int, UOp], shape: tuple[int, ...], block: int
) -> tuple[tuple[int, int], ...] | None:
    """Upcasts of ``block`` for the axis along which a read of ``dtype`` at ``index`` moves
    consecutively and for the innermost output axis (which it reads across), when the target
    transposes such blocks (``block`` > 1) of 4-byte elements and both axes are multiples of it;
    else None.

    A (1024, 256) AdamW update whose gradient is read transposed (GPT's tied embedding, the
    head's ``x.T @ dy`` read as ``wte``'s gradient), timed in C on 2 cores (AMD EPYC, AVX-512):
    987 us with 8 rows a step (``TRANSPOSE_ROWS``), 414 with an 8 x 8 tile reading the
    gradient element by element, 139 by transposed blocks; a (1024, 256) weight's panel copy
    for ``dy @ w.T`` 41 -> 12 us."""
    if block <= 1 or dtype.itemsize != 4:
        return None
    last = max(loops)
    across = stride_along(index, loops[last])
    if across is None or across <= 1 or shape[last] % block:
        return None
    for d, loop in loops.items():
        if d != last and stride_along(index, loop) == 1 and shape[d] % block == 0:
            return ((d, block), (last, block))
    return None


def row_opts(value: UOp, regs: RegisterBudget) -> KernelOpts | None:
    """The loops of a row kernel (schedule/kernelize.py ``_row_reads``: its reductions sum over
    the last axis of arrays of its own shape), else None: a loop over the rows, in which each
    reduction runs once, in vector lanes, then one loop over the row's elements (an upcast of
    the whole last axis; the linearizer places it after the reductions, and it runs as SIMD).
    """
    if not (reduces := row_reductions(value)):
        return None
    shape = value.shape
    last = len(shape) - 1
    lanes = _lanes(reduces[0], regs)
    return KernelOpts(tuple(range(last)), ((last, shape[last]),), lanes)


#: trips each lane makes along a reduction, at least: at the end each output adds its lanes
#: up one by one, so a sum of 256 taps in 32 lanes spent more on that than on its 8 steps of
#: multiply-adds (silero-vad's STFT, 258 filters x 5 frames: 88 -> 74 us a call on one thread
#: with 16 lanes). A register's width of lanes stays from 8 trips on
LANE_TRIPS = 16


def _lanes(reduce: UOp, regs: RegisterBudget) -> tuple[int, int] | None:
    """Split the innermost reduced axis into vector lanes when the output offers no vector axis."""
    src = reduce.src[0]
    axis = max(reduce.arg[1])
    size = src.shape[axis]
    # several trips per lane: combining the lanes at the end is a chain of adds
    amount = next(
        (c for c in regs.lane_amounts() if size % c == 0 and size >= LANE_TRIPS * c), None
    )
    outer = prod(src.shape[a] for a in reduce.arg[1] if a != axis)
    # a register's width of lanes, at least, from 8 trips on; and for a short innermost axis
    # inside a long reduction (the 16 bytes of a 4-bit block or the 32 of an 8-bit one, 18
    # blocks a row), whose lanes add up over all of it (an 8-bit block's 32 took 4 lanes,
    # SmolLM2's Q8_0 head ran at half speed)
    long_outside = isinstance(outer, int) and outer >= 8
    if size % regs.width == 0 and (size >= 8 * regs.width or long_outside):
        amount = max(amount or 0, regs.width)
    amount = amount or next((c for c in regs.lane_amounts() if size % c == 0 and size > c), None)
    if amount is None and isinstance(size, int):
        # no power of two divides it (PP-OCR's 6,625 characters): any count from two registers
        # down to 5 that does, for independent sums (else one chain of dependent adds: its
        # softmax's max and sum ran 0.5 and 0.9 ms for 40 rows)
        top = min(2 * regs.width, size // 8)
        amount = next((c for c in range(top, 4, -1) if size % c == 0), 1)
    return (axis, amount) if amount and amount > 1 else None
