"""Tiled matmuls that stage their operands in shared memory (``DEFINE_LOCAL``) between barriers.

The plain tiled plan (codegen/tiled.py) reads every operand element a thread needs from global
memory. A GPU's threads of a group need the same rows of ``A`` and columns of ``B``: here the
group first copies a ``BM x TK`` tile of ``A`` and a ``TK x BN`` tile of ``B`` into shared
arrays (each thread a few elements, neighbouring threads neighbouring elements), waits at a
barrier, and then every thread runs its register block over the tiles::

    acc[um][un] = 0
    for kt < K / TK:                                  (ridx, REDUCE)
      for s: sharedA[kk][r] = A'[row0 + r, kt*TK + kk]    (A' with the prologue; 0 past K)
      for s: sharedB[kk][c] = B'[kt*TK + kk, col0 + c]
      barrier
      for kk < TK:                                    (ridx, REDUCE)
        for i < um: a = sharedA[kk][row(i)]; for j < un: acc[i][j] += a * sharedB[kk][col(j)]
      barrier
    for i, j: out[...] = epilogue(acc[i][j])

Each global element is read once per group instead of once per thread that needs it. Rows and
columns past the end are clamped (as in the plain plan) and ``k`` past the end stages zeros, so
any shape works. The operands are found as in ``matmul_axes``: the value is lowered with a
placeholder for the position in the block along rows and along columns; the product's side
that depends on the row placeholder is ``A``. Only sums over one axis are staged (a convolution's
sum over three keeps the plain plan).

On PoCL and llvmpipe (processors) staging ran 3-40x slower than the plain plan
(docs/gpu-codegen.md), so renderers opt in with ``Renderer.stage_tiles``.
"""

from __future__ import annotations

from fusegrad.codegen.hints import hint_loops
from fusegrad.codegen.linearize import Linearizer, _index
from fusegrad.codegen.lower import Lowerer, clamp, flatten, idx_const
from fusegrad.codegen.tiled import Tiles, group_index
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod
from fusegrad.uop.loops import AxisCounter, AxisKind
from fusegrad.uop.ops import Ops, UOp, substitute, toposort


def _product(reduce: UOp) -> UOp:
    """The MUL under the sum (below any casts)."""
    product = reduce.src[0]
    while product.op is Ops.CAST:
        product = product.src[0]
    if product.op is not Ops.MUL:
        raise ValueError("a staged matmul sums a product: this kernel was wrongly planned")
    return product


def lower_staged(ast: UOp, tiles: Tiles) -> UOp:
    """Lower ``SINK(STORE(PARAM, value))`` as a staged tiled matmul: the output's STORE and the
    two STOREs that fill the shared tiles (linearised by ``StagedLinearizer``)."""
    out, value = ast.src[0].src
    shape = value.shape
    lowerer = Lowerer(axes=AxisCounter())
    threads = prod(tiles.threads)
    thread = UOp(Ops.SPECIAL, dtypes.index, (), ("lidx0", threads))
    count = tiles.groups(shape)
    group = UOp(Ops.SPECIAL, dtypes.index, (), ("group0", count)) if count > 1 else idx_const(0)
    spots = tuple(
        UOp(Ops.SPECIAL, dtypes.index, (), (f"spot{i}", b)) for i, b in enumerate(tiles.block)
    )
    index = group_index(
        tiles, shape, group, lambda i, block, size: _spot(tiles, i, block, spots[i], size)
    )
    result = lowerer.lower(value, index, UOp.const(dtypes.bool, True))
    reduce = next(u for u in toposort([result]) if u.op is Ops.REDUCE)
    (k_loop,), product = reduce.src[1:], _product(reduce)
    left = spots[0] in toposort([product.src[0]])
    a_side, b_side = product.src if left else product.src[::-1]
    ups = tuple(lowerer.new_range(u, AxisKind.UPCAST) for u in tiles.upcast)
    kt = lowerer.new_range(-(-k_loop.src[0].arg // tiles.stage), AxisKind.REDUCE)
    kk = lowerer.new_range(tiles.stage, AxisKind.REDUCE)
    shared = [
        UOp(Ops.DEFINE_LOCAL, s.dtype, (), (i, b * tiles.stage))
        for i, (s, b) in enumerate(zip((a_side, b_side), tiles.block))
    ]
    fills = [
        _fill(lowerer, side, spots[i], shared[i], tiles, i, thread, k_loop, kt)
        for i, side in enumerate((a_side, b_side))
    ]
    loc = tuple(_in_block(tiles, i, thread, ups[i]) for i in range(2))
    reads = [
        UOp(Ops.LOAD, s.dtype, (UOp(Ops.INDEX, s.dtype, (s, kk * b + loc[i])),))
        for i, (s, b) in enumerate(zip(shared, tiles.block))
    ]
    new_product = product.replace(src=tuple(reads) if left else tuple(reads[::-1]))
    summed = substitute(reduce.src[0], {product: new_product})
    new_reduce = UOp(Ops.REDUCE, reduce.dtype, (summed, kt, kk), reduce.arg)
    final = substitute(result, {reduce: new_reduce, spots[0]: loc[0], spots[1]: loc[1]})
    flat = substitute(flatten(index, shape), {spots[0]: loc[0], spots[1]: loc[1]})
    write = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, flat)), final))
    return UOp(Ops.SINK, dtypes.void, (write, *fills))


def _spot(tiles: Tiles, i: int, block: UOp, spot: UOp, size: int) -> UOp:
    """Output index along rows (``i`` 0) or columns (1) of position ``spot`` in the block."""
    position = block * tiles.block[i] + spot
    return clamp(position, 0, size - 1) if size % tiles.block[i] else position


def _in_block(tiles: Tiles, i: int, thread: UOp, up: UOp) -> UOp:
    """Position in the group's block along rows (``i`` 0) or columns (1) of a thread's
    ``up``-th output (strided: ``threads`` apart; else next to each other)."""
    count, upcast = tiles.threads[i], tiles.upcast[i]
    in_group = thread // tiles.threads[1] if i == 0 else thread % tiles.threads[1]
    return up * count + in_group if tiles.strided else in_group * upcast + up


def _fill(lowerer, side, spot, shared, tiles, i, thread, k_loop, kt) -> UOp:
    """The STORE that copies this thread's share of one operand's tile into ``shared``: element
    ``s * threads + thread`` of the tile, ``k``-major for ``A`` rows along... the tile is
    stored as ``[kk][position in block]``; consecutive threads take consecutive ``k`` of ``A``
    (its rows are usually contiguous in ``k``) and consecutive columns of ``B``."""
    threads, block, depth = prod(tiles.threads), tiles.block[i], tiles.stage
    trips = block * depth // threads
    step = lowerer.new_range(trips, AxisKind.UPCAST)
    element = step * threads + thread
    kk, pos = (element % depth, element // depth) if i == 0 else (element // block, element % block)
    k, size = kt * depth + kk, k_loop.src[0].arg
    value = substitute(side, {spot: pos, k_loop: clamp(k, 0, size - 1) if size % depth else k})
    if size % depth:  # past the sum's end the tile holds zeros
        value = k.lt(size).where(value, UOp.const(value.dtype, 0))
    return UOp(
        Ops.STORE, dtypes.void, (UOp(Ops.INDEX, shared.dtype, (shared, kk * block + pos)), value)
    )


class StagedLinearizer(Linearizer):
    """Places a staged matmul (from ``lower_staged``): the accumulators, the outer loop over
    ``k`` tiles with the fills, a barrier, the inner loop with the register block, a barrier;
    then the epilogue as the plain plan's."""

    def linearize(self) -> list[UOp]:
        write, *fills = self.sink.src
        red = self.reduces[0]
        kt, kk = red.src[1:]
        fill_loops = {f: next(r for r in self.used[f] if r is not kt) for f in fills}
        self.upcast = [u for u in self.upcast if u not in fill_loops.values()]
        ups = self.upcast
        free = [u for u in self.order if not self.used[u] and u not in self.after]
        self.place([u for u in free if u.op not in (Ops.STORE, Ops.SINK)])
        sizes = [u.src[0].arg for u in ups]
        acc = UOp(Ops.DEFINE_REG, red.dtype, (), (0, prod(sizes)))
        start = UOp.const(red.dtype, 0)
        init = [self.copy_loop(u, ("start", 0)) for u in ups]
        self.place([start, acc])
        self.place_nested(init, set(), [], self.used)
        self.place_tree(
            UOp(Ops.STORE, src=(UOp(Ops.INDEX, red.dtype, (acc, _index(init, sizes))), start))
        )
        self.close(init)
        self.place([kt.src[0], kt])
        for fill, loop in fill_loops.items():
            nodes = toposort([fill])
            self.place([u for u in nodes if self.used[u] <= {kt} and u.op not in (Ops.STORE,)])
            self.place([loop.src[0], loop])
            self.place_tree(fill)
            self.close([loop])
        self.place([UOp(Ops.BARRIER, src=tuple(fills))])
        body = [u for u in toposort([red.src[0]]) if u not in self.placed]
        self.place_nested([kk, *ups], {kt}, body, self.used)
        slot = UOp(Ops.INDEX, red.dtype, (acc, _index(list(ups), sizes)))
        current = UOp(Ops.LOAD, red.dtype, (slot, kk))
        update = UOp(Ops.STORE, src=(slot, current.alu(red.arg, red.src[0])))
        self.place_tree(update)
        self.close([kk, *ups])
        self.place([UOp(Ops.BARRIER, src=(update,))])
        end = UOp(Ops.END, src=(kt,))
        self.place([end])

        def result(copies: dict[UOp, UOp]) -> UOp:
            index = UOp(Ops.INDEX, red.dtype, (acc, _index([copies[u] for u in ups], sizes)))
            return UOp(Ops.LOAD, red.dtype, (index, end))

        self.place_rest({red: result})
        return self.program


def linearize_staged(sink: UOp) -> list[UOp]:
    """Order a staged matmul graph (from ``lower_staged``) into a program."""
    return hint_loops(StagedLinearizer(sink).linearize())
