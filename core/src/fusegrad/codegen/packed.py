"""Operands packed inside the kernel (loop targets): a matmul operand read across its rows is
copied, once per block of columns, into a small array that every block of rows then reads as
one run.

Attention's scores ``q @ k^T`` read ``k`` (..., n, d) along the columns n, ``d`` elements apart,
and along the summed axis d one element apart. A register tile (rows x a vector of columns)
needs a vector of columns per step of d. The layout pass (schedule/layout.py) can copy ``k``
into panels first, a kernel of its own; where the summed axis is short (a head of 64), that
copy and its launch cost a fifth of the product. Here the kernel does it itself: the loop over
blocks of rows runs inside the loop over blocks of columns (``KernelOpts`` from
``opt.packed_opts``), and ``pack_operands`` puts before it::

    float shared[d * vec];                                 (DEFINE_LOCAL: a local array)
    for c < vec: for r < d: shared[r * vec + c] = k[..., col0 + c, r]
    for each block of rows: ... acc += q[row, r] * shared[r * vec + c] ...

The copy is read in runs of ``d`` and written once per column block; every block of rows
reuses it from the first-level cache. Attention's (4, 4, 128, 64) scores, timed in C on 2 cores
(AMD EPYC, AVX-512): 163 us of product + 36 us of copy kernel in two launches -> 182 us in one,
165 with the tile's set-up and epilogue unrolled (codegen/hints.py ``SHORT_SUM``). The filling
is a transpose: with ``Renderer.transpose_block`` (the CPU's 8) it is one ``TRANSPOSE_BLOCK`` per
square block, which the target shuffles in registers (173 -> 158 us, the product alone ~145).

``pack_operands`` rewrites a linear program: a load inside a reduction loop and an upcast
(vector) loop, whose index moves one element per step of the reduction and more than one per
step of the vector loop, and that no loop between the block loop it skips and the reduction
moves, is read from the array instead; the array is at most ``pack_bytes`` (a renderer
capability, ``Renderer.pack_bytes``; 0: never). Anything else is left as it is.

A large matmul's right operand read in place along its rows (a row-major ``w`` (k, m), whose
panels the layout pass then does not copy) is packed a group of panels at a time
(``_packable_group``, ``KernelOpts`` from ``opt._packed_group``): the loop over the groups runs
outermost, and before its loop over the blocks of rows::

    float shared[panels * k * vec];                        (up to ``group_pack_bytes``)
    for r < k: for t < panels: for c < vec: shared[(t * k + r) * vec + c] = w[r, col0 + t * vec + c]
    for each block of rows: for t < panels: ... acc += x[row, r] * shared[(t * k + r) * vec + c]

Each thread reads its groups of ``w`` once, in runs along its rows, and keeps each group in its
second-level cache while the rows stream past (a 1024² matmul on AVX2: 2-3% faster than the copy
kernel and the product, see ``opt._packed_group``).
"""

from __future__ import annotations

from fusegrad.codegen.hints import hint_loops, open_loops
from fusegrad.dtype import DType
from fusegrad.helpers import prod
from fusegrad.uop.loops import AxisCounter, AxisKind, trips_of
from fusegrad.uop.ops import Ops, UOp, substitute, toposort
from fusegrad.uop.symbolic import add_all, stride_along, terms

#: the block loop skipped must run this many trips, each reusing the packed array
MIN_REUSE = 2


def pack_operands(
    program: list[UOp], pack_bytes: int, transpose_block: int = 0, group_bytes: int = 0
) -> list[UOp]:
    """``program`` with each packable load read from a local array filled before the loop it
    does not move along (see the module's note); unchanged without ``pack_bytes``. With
    ``transpose_block`` (``Renderer.transpose_block``), an array of 4-byte elements whose sides
    are multiples of it is filled by TRANSPOSE_BLOCK ops, one per square block."""
    if pack_bytes <= 0 and group_bytes <= 0 and transpose_block <= 1:
        return program
    scopes = open_loops(program)
    for at, u in enumerate(program):
        if u.op is not Ops.LOAD:
            continue
        if (across := _packable_block(u, scopes[at], transpose_block)) is not None:
            rows, columns, stride = across
            packed = _packed(program, at, scopes, rows, (rows, columns), stride, transpose_block)
            # (the columns' loop now reads consecutively: hinted again, it runs as vectors)
            packed = None if packed is None else hint_loops(packed)
        elif (plan := _packable(u, scopes[at], pack_bytes)) is not None:
            block, reduce, vector, stride = plan
            packed = _packed(program, at, scopes, block, (reduce, vector), stride, transpose_block)
        elif (group := _packable_group(u, scopes[at], group_bytes)) is not None:
            block, axes = group
            packed = _packed(program, at, scopes, block, axes, 1)
        else:
            continue
        if packed is not None:
            return pack_operands(packed, pack_bytes, transpose_block, group_bytes)
    return program


def _parameter_index(load: UOp) -> UOp | None:
    """The index of ``load`` when it reads a kernel parameter at an index of loops and integer
    arithmetic only (no gate); else None."""
    if len(load.src) != 1 or (index_op := load.src[0]).op is not Ops.INDEX:
        return None
    if index_op.src[0].op is not Ops.PARAM:
        return None
    index = index_op.src[1]
    if any(u.op not in (Ops.RANGE, Ops.CONST) and not u.dtype.is_int for u in toposort([index])):
        return None
    return index


def _tile_read(load: UOp, around: tuple[UOp, ...]) -> tuple[UOp, UOp, UOp] | None:
    """(its index, the reduction, the vector loop) for a load of a register tile's vector
    operand, inside the loops ``around`` (outermost first): from a kernel parameter, at an index
    of loops and integer arithmetic only, in the tile's vector loop (innermost) and its rows'
    loop, which the read does not move along (each vector loaded serves every row of the tile),
    inside one reduction; else None."""
    if (index := _parameter_index(load)) is None:
        return None
    if len(around) < 2 or any(loop.arg.kind is not AxisKind.UPCAST for loop in around[-2:]):
        return None
    if around[-2] in toposort([index]):
        return None
    reduces = [loop for loop in around if loop.arg.kind is AxisKind.REDUCE]
    return (index, reduces[0], around[-1]) if len(reduces) == 1 else None


def _packable(
    load: UOp, around: tuple[UOp, ...], pack_bytes: int
) -> tuple[UOp, UOp, UOp, int] | None:
    """(the block loop to fill the array before, the reduction, the vector loop, the read's
    stride along it) for ``load``, inside the loops ``around`` (outermost first), or None."""
    if (read := _tile_read(load, around)) is None:
        return None
    index, reduce, vector = read
    if stride_along(index, reduce) != 1:
        return None
    if (step := stride_along(index, vector)) is None or step <= 1:
        return None
    moved = {u for u in toposort([index]) if u.op is Ops.RANGE}
    # the block loop: the outermost loop the read does not move along, with every loop it does
    # move along (but the reduction's and the vector's) outside it
    block = next((loop for loop in around if loop not in moved), None)
    if block is None or block.arg.kind is not AxisKind.GLOBAL:
        return None
    inside = around[around.index(block) :]
    if any(loop in moved for loop in inside if loop not in (reduce, vector)):
        return None
    if reduce not in inside or (trips := trips_of(block)) is None or trips < MIN_REUSE:
        return None
    rows, columns = trips_of(reduce), trips_of(vector)
    if rows is None or columns is None or rows * columns * load.dtype.itemsize > pack_bytes:
        return None
    return block, reduce, vector, step


def _packable_block(load: UOp, around: tuple[UOp, ...], block: int) -> tuple[UOp, UOp, int] | None:
    """(the rows' loop, the columns' loop, the read's stride along the columns) for a load of
    an elementwise kernel read across its innermost loop, a ``block`` x ``block`` square at a
    time (``opt._transposed_by_blocks``): the two innermost loops upcast by ``block``, the
    read one element a step of the outer (the rows) and more a step of the inner (the
    columns); None for any other load. The array is filled by one TRANSPOSE_BLOCK before the
    rows' loop, and the inner loop reads it as a run."""
    if block <= 1 or load.dtype.itemsize != 4 or (index := _parameter_index(load)) is None:
        return None
    if len(around) < 2 or any(loop.arg.kind is AxisKind.REDUCE for loop in around):
        return None
    rows, columns = around[-2:]
    if any(loop.arg.kind is not AxisKind.UPCAST or trips_of(loop) != block for loop in around[-2:]):
        return None
    if stride_along(index, rows) != 1 or (stride := stride_along(index, columns)) is None:
        return None
    return (rows, columns, stride) if stride > 1 else None


def _packable_group(
    load: UOp, around: tuple[UOp, ...], group_bytes: int
) -> tuple[UOp, tuple[UOp, UOp, UOp]] | None:
    """(the block loop to fill the array before, (the panels' loop, the reduction, the vector
    loop)) for a load of a matmul's right operand read in place, along its rows (a row-major
    ``w``), by a register tile inside a loop over a group of panels that the blocks of rows
    walk (``KernelOpts.tile``); None for any other load, or a group over ``group_bytes``."""
    if group_bytes <= 0 or (read := _tile_read(load, around)) is None:
        return None
    index, reduce, vector = read
    if stride_along(index, vector) != 1:
        return None
    columns, steps = trips_of(vector), trips_of(reduce)
    stride = stride_along(index, reduce)
    if columns is None or steps is None or stride is None or stride <= columns:
        return None  # (a panel already: one run along the sum)
    # the loops outside the tile: ... the blocks of rows (not moved) ... the panels (moved)
    nodes = toposort([index])
    outside = [u for u in around[: around.index(reduce)] if u.arg.kind is not AxisKind.UPCAST]
    block = next((loop for loop in outside if loop not in nodes), None)
    if block is None or block.arg.kind is not AxisKind.GLOBAL:
        return None
    panels = [loop for loop in outside[outside.index(block) + 1 :] if loop in nodes]
    if len(panels) != 1 or panels[0].arg.kind is not AxisKind.GLOBAL:
        return None
    if stride_along(index, panels[0]) != columns:
        return None
    trips, count = trips_of(block), trips_of(panels[0])
    if trips is None or trips < MIN_REUSE or count is None:
        return None
    if count * steps * columns * load.dtype.itemsize > group_bytes:
        return None
    return block, (panels[0], reduce, vector)


def _visible(defined: int, used: int, scopes: list[tuple[UOp, ...]]) -> bool:
    """Whether a value computed at position ``defined`` may be read at ``used``: before it, in
    a loop that is still open there."""
    inner = scopes[defined]
    return defined < used and scopes[used][: len(inner)] == inner


def _packed(
    program: list[UOp],
    at: int,
    scopes: list[tuple[UOp, ...]],
    block: UOp,
    axes: tuple[UOp, ...],
    stride: int,
    transpose_block: int = 0,
) -> list[UOp] | None:
    """``program`` with the load at ``at`` read from a local array filled before ``block``;
    None when a value the filling needs is not visible there (``scopes``: the loops open at
    each position). ``axes``: the loops the array spans, outermost first in its layout: (the
    reduction, the vector loop) for a panel, with a block loop first for a group of panels."""
    load = program[at]
    param, index = load.src[0].src
    sizes = [t for t in map(trips_of, axes) if t is not None]
    assert len(sizes) == len(axes)  # (the callers checked each loop's trips)
    rows, columns = sizes[-2:]
    # a panel read across its rows fills its array by square blocks where the target transposes
    # them (a row of the source is a column of the array): one element at a time, the filling
    # was a tenth of attention's scores kernel
    n = transpose_block
    blocked = (
        len(axes) == 2
        and stride > 1
        and n > 1
        and load.dtype.itemsize == 4
        and rows % n == 0
        and columns % n == 0
    )
    step = n if blocked else 1
    # the filling's loops, outermost first: a panel read across its rows by columns, then rows
    # (each a run of the source); a group read along its rows by rows, then panels, then columns
    fill_order = (1, 0) if len(axes) == 2 else (1, 0, 2)
    counter = AxisCounter.after(program)
    loops: dict[int, UOp] = {}
    for d in fill_order:  # (no loop for one trip: one block, at 0)
        if (trips := sizes[d] // (step if d >= len(axes) - 2 else 1)) > 1:
            loops[d] = counter.range(trips, AxisKind.UPCAST)
    number = sum(1 for u in program if u.op is Ops.DEFINE_LOCAL)
    shared = UOp(Ops.DEFINE_LOCAL, load.dtype, (), (number, prod(sizes)))
    strides = [prod(sizes[d + 1 :]) for d in range(len(axes))]
    filled = [d for d in range(len(axes)) if d in loops]
    firsts = {d: loops[d] * step if blocked else loops[d] for d in filled}
    # an axis filled as one block, without a loop, is at 0: its terms leave the index
    unlooped = [axes[d] for d in range(len(axes)) if d not in loops]
    kept = [t for t in terms(index) if not set(unlooped) & set(t.toposort())]
    first = add_all(kept, index.dtype) if unlooped else index
    source = substitute(first, {axes[d]: firsts[d] for d in filled})
    offset = _affine([firsts[d] for d in filled], [strides[d] for d in filled], axes[0].dtype)
    place = UOp(Ops.INDEX, load.dtype, (shared, offset))
    if blocked:
        fill = UOp(
            Ops.TRANSPOSE_BLOCK,
            src=(place, UOp(Ops.INDEX, load.dtype, (param, source))),
            arg=(n, stride, columns),
        )
    else:
        value = UOp(Ops.LOAD, load.dtype, (UOp(Ops.INDEX, load.dtype, (param, source)),))
        fill = UOp(Ops.STORE, src=(place, value))
    # the values the filling needs: those of the program must be visible before the block loop
    where = {u: i for i, u in enumerate(program)}
    start = where[block]
    for u in toposort([source]):
        if u in where and u.op is not Ops.CONST and not _visible(where[u], start, scopes):
            return None
    # the new values: the constants first, then each inside the innermost loop it depends on
    # (one that depends on none of them, before them)
    nested = [loops[d] for d in fill_order if d in loops]
    skipped = {shared, fill, *nested}
    new = [u for u in toposort([fill]) if u not in where and u not in skipped]
    depth = {loop: k + 1 for k, loop in enumerate(nested)}
    for u in new:
        depth[u] = max((depth.get(src, 0) for src in u.src), default=0)
    constants = [u for u in new if u.op is Ops.CONST]
    filling = [*constants, shared, *(u for u in new if u.op is not Ops.CONST and depth[u] == 0)]
    for k, loop in enumerate(nested, start=1):
        filling += [loop, *(u for u in new if u.op is not Ops.CONST and depth[u] == k)]
    filling += [fill, *(UOp(Ops.END, src=(loop,)) for loop in reversed(nested))]
    # the read of the array, inside the reduction and the vector loop
    spot = _affine(list(axes), strides, axes[0].dtype)
    packed = UOp(Ops.LOAD, load.dtype, (UOp(Ops.INDEX, load.dtype, (shared, spot)),))
    reading = [u for u in toposort([packed]) if u not in where and u not in filling]
    for u in toposort([packed]):  # (what the program computes already must be visible there)
        if u in where and u.op is not Ops.CONST and not _visible(where[u], at, scopes):
            return None
    out = [*program[:start], *filling, *program[start:at], *reading, *program[at + 1 :]]
    return _unused_dropped(_replaced(out, load, packed), toposort([load.src[0]]))


def _affine(values: list[UOp], strides: list[int], dtype: DType) -> UOp:
    """``sum(values[i] * strides[i])``, without the multiplications by 1 (the program is past
    simplification: ``lower.flatten`` would leave them in)."""
    parts = [v if st == 1 else v * UOp.const(dtype, st) for v, st in zip(values, strides)]
    return add_all(parts, dtype)


def _unused_dropped(program: list[UOp], candidates: list[UOp]) -> list[UOp]:
    """``program`` without those of ``candidates`` (the old read's index arithmetic, in
    toposort order) that nothing uses any more."""
    users: dict[UOp, int] = {}
    for u in program:
        for src in u.src:
            users[src] = users.get(src, 0) + 1
    dead = set()
    for u in reversed(candidates):  # users before their sources
        if u.op not in (Ops.RANGE, Ops.CONST, Ops.PARAM) and not users.get(u):
            dead.add(u)
            for src in u.src:
                users[src] -= 1
    return [u for u in program if u not in dead]


def _replaced(program: list[UOp], old: UOp, new: UOp) -> list[UOp]:
    """``program`` with ``old`` replaced by ``new`` in every op that uses it (rebuilt on it)."""
    done: dict[UOp, UOp] = {old: new}
    out = []
    for u in program:
        src = tuple(done.get(s, s) for s in u.src)
        if src != u.src:
            done[u] = u.replace(src=src)
        out.append(done.get(u, u))
    return out
