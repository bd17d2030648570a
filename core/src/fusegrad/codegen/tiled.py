"""Tiled matmuls on grid devices: a block of outputs per group, a register block per thread.

A matmul-shaped kernel (a sum over products of two operands, where one operand's index moves
with an output axis ``m`` that the other ignores, and the other's with an axis ``n`` the first
ignores: ``C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]`` in any layout, transposed or batched,
with elementwise work before the product and after the sum) runs as a grid of groups. A group
of ``tm x tn`` threads computes a block of ``(tm*um) x (tn*un)`` outputs; each thread keeps
``um x un`` accumulators in registers (two ``UPCAST`` loops, unrolled), so each element it
loads from ``A`` feeds ``un`` multiply-adds and each from ``B`` feeds ``um``::

    for k: for i < um: a = A[row(i), k]; for j < un: acc[i][j] += a * B[k, col(j)]

instead of two loads per multiply-add when a thread computes one output. The launch is one
grid dimension (``group0`` the group, ``lidx0`` the thread in it), so every grid renderer runs
it as it runs a grouped reduction. Rows and columns past the output's end (sizes that the
block does not divide) are clamped to the last one: such a thread computes the last output
again and stores the same value at the same place.

A thread's outputs are either ``tn`` columns apart (``strided``: neighbouring threads read
neighbouring elements, as a GPU's warp wants to) or next to each other (each thread reads a
short run, which a CPU's compiler turns into vector loads: PoCL's threads are loop trips).
``Renderer.threads_in_lanes`` says which the target prefers.

Operands are read from global memory, or with ``Tiles.stage`` first copied a tile at a time
into shared memory (``DEFINE_LOCAL``) between barriers (codegen/staged.py): what a GPU wants,
and the default where the renderer says so (``Renderer.stage_tiles``: CUDA, Metal). On PoCL and
llvmpipe (processors) staging ran 3-40x slower (docs/gpu-codegen.md); BEAM may still pick it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from fusegrad.codegen.lower import Lowerer, clamp, flatten, idx_const
from fusegrad.codegen.rules import CORE_RULES
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context, prod
from fusegrad.renderer import Renderer
from fusegrad.uop.loops import AxisCounter, AxisKind
from fusegrad.uop.ops import Ops, UOp, toposort
from fusegrad.uop.pattern import graph_rewrite

#: fewer outputs than this do not fill the groups of a tiled launch: one thread per output
MIN_OUTPUTS = 4096
#: a tiled launch with fewer threads per group leaves most of a GPU's lanes idle
MIN_THREADS = 16
#: the most outputs a group's block has along one axis: larger blocks left too few groups for
#: the cores of PoCL (16 x 16 work-items of 4 x 16 outputs ran 1.5x slower than 16 x 8)
MAX_BLOCK = 128


@dataclass(frozen=True)
class Tiles:
    """A tiled matmul's launch: output axes ``rows`` (m) and ``cols`` (n); ``threads`` per group
    and ``upcast`` outputs per thread, each as ``(along rows, along cols)``; ``strided``: a
    thread's outputs lie ``threads`` apart (else next to each other); ``stage``: the depth
    (along the sum) of the operand tiles staged in shared memory, 0 for none (codegen/staged.py)."""

    rows: int
    cols: int
    threads: tuple[int, int] = (16, 16)
    upcast: tuple[int, int] = (4, 4)
    strided: bool = True
    stage: int = 0

    @property
    def block(self) -> tuple[int, int]:
        """Outputs per group along rows and columns."""
        return self.threads[0] * self.upcast[0], self.threads[1] * self.upcast[1]

    def groups(self, shape: tuple[int, ...]) -> int:
        """Groups in the launch: blocks of rows x blocks of columns x the other axes."""
        rows, cols = (-(-shape[a] // b) for a, b in zip((self.rows, self.cols), self.block))
        others = prod(s for d, s in enumerate(shape) if d not in (self.rows, self.cols))
        return rows * cols * others


# ---- is it a matmul? --------------------------------------------------------------------------


def matmul_axes(ast: UOp) -> tuple[int, int] | None:
    """``(m, n)``: the output axes of a matmul-shaped kernel (``n`` the innermost of the two), or
    None. Found by lowering once with a symbol per output axis and asking which axes each
    operand's loads depend on: rows are the axes only the left operand follows, columns the
    axes only the right one follows (whichever operand that is)."""
    value = ast.src[0].src[1]
    reduces = [u for u in toposort([value]) if u.op is Ops.REDUCE_AXIS]
    # float sums only: an integer block of 32 x 16 took llvmpipe's compiler 35 s (it reorders
    # integer sums), and integer matmuls are rare enough to stay one thread per output
    if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD or not reduces[0].dtype.is_float:
        return None
    shape = value.shape
    if not all(isinstance(s, int) for s in shape):
        return None
    symbols = tuple(
        UOp(Ops.SPECIAL, dtypes.index, (), (f"axis{d}", s)) if s > 1 else idx_const(0)
        for d, s in enumerate(shape)
    )
    lowered = Lowerer().lower(value, symbols, UOp.const(dtypes.bool, True))
    graph = graph_rewrite(UOp(Ops.SINK, dtypes.void, (lowered,)), CORE_RULES.kernel)
    reduce = next((u for u in toposort([graph]) if u.op is Ops.REDUCE), None)
    if reduce is None:
        return None
    product = reduce.src[0]
    while product.op is Ops.CAST:
        product = product.src[0]
    if product.op is not Ops.MUL:
        return None
    left, right = (_axes_read(s, symbols) for s in product.src)
    only_left, only_right = sorted(left - right), sorted(right - left)
    if not only_left or not only_right:
        return None
    if only_left[-1] > only_right[-1]:  # the columns are the innermost of the two
        only_left, only_right = only_right, only_left
    return only_left[-1], only_right[-1]


def _axes_read(operand: UOp, symbols: tuple[UOp, ...]) -> set[int]:
    """The output axes the addresses of ``operand``'s loads depend on."""
    nodes = set(toposort([u.src[0] for u in toposort([operand]) if u.op is Ops.LOAD]))
    return {d for d, s in enumerate(symbols) if s.op is Ops.SPECIAL and s in nodes}


# ---- the plan ---------------------------------------------------------------------------------


def plan_tiles(ast: UOp, renderer: Renderer) -> Tiles | None:
    """The tiled launch of ``ast`` on ``renderer``'s grid, or None to leave it to the flat or
    grouped plans (not matmul-shaped, too few outputs, or ``NOOPT``)."""
    if renderer.grid_dims is None or not renderer.has_local or Context.NOOPT:
        return None
    shape = ast.src[0].src[1].shape
    if not all(isinstance(s, int) for s in shape) or prod(shape) < MIN_OUTPUTS:
        return None
    if (axes := matmul_axes(ast)) is None:
        return None
    threads, upcast, strided = default_sizes(renderer)
    tiles = fit(Tiles(axes[0], axes[1], threads, upcast, strided), shape, renderer)
    if tiles is not None and renderer.stage_tiles:
        return with_stage(tiles, ast, renderer) or tiles
    return tiles


def reduced_axes(ast: UOp) -> int:
    """How many axes of size > 1 the kernel's one sum runs over (staging needs exactly 1)."""
    value = ast.src[0].src[1]
    reduce = next(u for u in toposort([value]) if u.op is Ops.REDUCE_AXIS)
    return sum(1 for a in reduce.arg[1] if reduce.src[0].shape[a] != 1)


def stage_bytes(tiles: Tiles, itemsize: int = 4) -> int:
    """Bytes of shared memory the staged ``tiles`` use (both operand tiles)."""
    return (tiles.block[0] + tiles.block[1]) * tiles.stage * max(itemsize, 4)


#: how deep (along the sum) the staged tiles of each operand are, tried in this order
STAGE_DEPTHS = (16, 8)


def with_stage(tiles: Tiles, ast: UOp, renderer: Renderer, depth: int = 0) -> Tiles | None:
    """``tiles`` with its operands staged in shared memory ``depth`` (else the first of
    ``STAGE_DEPTHS`` that fits) deep, or None where that cannot be: a sum over more than one
    axis, tiles the group's threads do not fill evenly, more shared memory than the renderer
    has."""
    if not renderer.has_local or reduced_axes(ast) != 1:
        return None
    for stage in (depth,) if depth else STAGE_DEPTHS:
        staged = replace(tiles, stage=stage)
        even = all(b * stage % prod(tiles.threads) == 0 for b in staged.block)
        if even and stage_bytes(staged) <= renderer.local_memory_bytes:
            return staged
    return None


def default_sizes(renderer: Renderer) -> tuple[tuple[int, int], tuple[int, int], bool]:
    """Threads per group and outputs per thread from the renderer's capabilities:
    ``tile_upcast`` outputs per thread, strided where neighbouring threads run in SIMD lanes,
    and along each axis the most threads of a square group that ``local_size`` allows (at most
    16 x 16) with a block of at most ``MAX_BLOCK`` outputs."""
    side = 1
    while (2 * side) ** 2 <= min(renderer.local_size, renderer.max_group_size, 256):
        side *= 2
    rows, cols = renderer.tile_upcast
    threads = tuple(max(1, min(side, MAX_BLOCK // up)) for up in (rows, cols))
    return (threads[0], threads[1]), (rows, cols), renderer.threads_in_lanes


def fit(tiles: Tiles, shape: tuple[int, ...], renderer: Renderer) -> Tiles | None:
    """``tiles`` shrunk to the output, outputs per thread first (no block twice its axis or
    more: half its threads would only repeat the last output), or None when the launch would
    not fit the grid or the groups would be too small (many tiny matmuls: one thread per
    output does better)."""
    threads, upcast = list(tiles.threads), list(tiles.upcast)
    for i, axis in enumerate((tiles.rows, tiles.cols)):
        while upcast[i] > 1 and threads[i] * upcast[i] >= 2 * shape[axis]:
            upcast[i] //= 2
        while threads[i] > 1 and threads[i] * upcast[i] >= 2 * shape[axis]:
            threads[i] //= 2
    fitted = replace(tiles, threads=(threads[0], threads[1]), upcast=(upcast[0], upcast[1]))
    if not max(MIN_THREADS, renderer.warp_size) <= prod(fitted.threads) <= renderer.max_group_size:
        return None
    if fitted.groups(shape) > renderer.global_max[0]:
        return None
    return fitted


#: the group shapes and register blocks BEAM search times (each in both layouts)
BEAM_THREADS = ((8, 8), (16, 16), (16, 8), (4, 8), (4, 16))
BEAM_UPCASTS = ((4, 4), (4, 8), (4, 16), (8, 8), (16, 8), (16, 16), (32, 16))


def tile_options(ast: UOp, renderer: Renderer) -> list[Tiles]:
    """The tile sizes BEAM search times (codegen/search.py): the default plan's first, then
    ``BEAM_THREADS`` x ``BEAM_UPCASTS`` in both layouts, fitted to the output, then each strided
    one staged in shared memory where it can be; [] when the kernel does not run tiled."""
    base = plan_tiles(ast, renderer)
    if base is None:
        return []
    shape, out = ast.src[0].src[1].shape, []
    for threads in BEAM_THREADS:
        for upcast in BEAM_UPCASTS:
            for strided in (True, False):
                tiles = Tiles(base.rows, base.cols, threads, upcast, strided)
                if prod(threads) <= renderer.max_group_size:
                    out.append(fit(tiles, shape, renderer))
    unstaged = [t for t in dict.fromkeys([replace(base, stage=0), *out]) if t is not None]
    staged = [with_stage(t, ast, renderer) for t in unstaged if t.strided]
    return [t for t in dict.fromkeys([base, *unstaged, *staged]) if t is not None]


# ---- lowering ---------------------------------------------------------------------------------


def lower_tiled(ast: UOp, tiles: Tiles) -> UOp:
    """Lower ``SINK(STORE(PARAM, value))`` as a tiled matmul: thread ``lidx0`` of group
    ``group0`` computes its register block, a loop of kind ``UPCAST`` along rows and one along
    columns."""
    out, value = ast.src[0].src
    shape = value.shape
    lowerer = Lowerer(axes=AxisCounter())
    ups = tuple(lowerer.new_range(u, AxisKind.UPCAST) for u in tiles.upcast)
    thread = UOp(Ops.SPECIAL, dtypes.index, (), ("lidx0", prod(tiles.threads)))
    count = tiles.groups(shape)
    group = UOp(Ops.SPECIAL, dtypes.index, (), ("group0", count)) if count > 1 else idx_const(0)
    in_group = (thread // tiles.threads[1], thread % tiles.threads[1])
    index = group_index(
        tiles,
        shape,
        group,
        lambda i, block, size: _position(tiles, i, block, in_group[i], ups[i], size),
    )
    result = lowerer.lower(value, index, UOp.const(dtypes.bool, True))
    flat = flatten(index, shape)
    write = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, flat)), result))
    return UOp(Ops.SINK, dtypes.void, (write,))


def group_index(
    tiles: Tiles, shape: tuple[int, ...], group: UOp, position: Callable[[int, UOp, int], UOp]
) -> tuple[UOp, ...]:
    """The output index a thread of group ``group`` works at: ``position(i, block, size)`` along
    the rows (``i`` 0) and columns (1) of its block, the other axes from the group number
    (``group0 = ((others * row blocks) + row block) * column blocks + column block``)."""
    blocks = tuple(-(-shape[a] // b) for a, b in zip((tiles.rows, tiles.cols), tiles.block))
    block_of = {tiles.cols: group % blocks[1], tiles.rows: (group // blocks[1]) % blocks[0]}
    rest = group // (blocks[0] * blocks[1])
    idx: list[UOp] = []
    for d, size in reversed(list(enumerate(shape))):
        if d in block_of:
            i = 0 if d == tiles.rows else 1
            idx.append(position(i, block_of[d], size))
        elif size > 1:
            idx.append(rest % size)
            rest = rest // size
        else:
            idx.append(idx_const(0))
    return tuple(reversed(idx))


def _position(tiles: Tiles, i: int, block: UOp, thread: UOp, up: UOp, size: int) -> UOp:
    """Output index along rows (``i`` 0) or columns (1) of a thread's ``up``-th output."""
    threads, upcast = tiles.threads[i], tiles.upcast[i]
    inner = up * threads + thread if tiles.strided else thread * upcast + up
    position = block * (threads * upcast) + inner
    return clamp(position, 0, size - 1) if size % (threads * upcast) else position
