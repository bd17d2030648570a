"""The layout pass: memory-layout choices for the target, made on the graph before it is cut.

The Tensor layer builds only the math; this pass, run by ``make_plan`` with the capabilities of
each device the graph runs on, rewrites these shapes of reduction so that kernels read memory
the way the target likes it:

- a long full reduction (a sum of 2**18 elements or more) is cut in two, so that every core or
  thread group takes a part of it (``split_reduction``);
- a matmul's right operand ``w`` (k, m) is copied into panels of ``p`` columns, one run each,
  on targets that loop over their output (``panel_right_operand``), and so is any other
  matmul's right operand not stored with its columns innermost (``panel_columns_operand``);
- a matmul's right operand whose columns no panel width divides is padded with zero columns
  into panels, and the product's extra columns cut off (``panel_right_operand``);
- a convolution's weight is copied with its output channels innermost, in panels of ``p``
  filters where they fill them, so the kernel loads a vector of filters at once; a pointwise
  convolution (1x1, stride 1) reads its input from panels of positions instead, as the matmul
  it is (``channels_innermost``).

The copies are CONTIGUOUS nodes: the scheduler makes each a kernel of its own. The pass runs
after autograd, on the abstracted graph, so a plan (cached by graph structure and devices)
holds its result: its choices depend only on the graph and on the devices' capabilities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fusegrad.codegen.lower import FEW_PARALLEL_TRIPS
from fusegrad.codegen.opt import group_trips
from fusegrad.helpers import prod
from fusegrad.uop.ops import Ops, UOp, is_symbolic, toposort


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the layout pass needs to know of a target (read from its renderer)."""

    #: bytes one SIMD register holds: a matmul panel is two registers wide
    vector_bytes: int = 16
    #: None: the kernel loops over its output itself (CPU); N: launched over an N-dim grid
    grid_dims: int | None = None
    #: loops over more elements than this run on several threads (CPU)
    parallel_threshold: int = 1 << 15
    #: bytes of an operand's panel a kernel packs itself (``Renderer.pack_bytes``); 0: none
    pack_bytes: int = 0
    #: bytes of a group of panels a matmul kernel packs itself (``Renderer.group_pack_bytes``)
    group_pack_bytes: int = 0

    @staticmethod
    def of(renderer: Any) -> Capabilities:
        """The capabilities of ``renderer`` (a ``Renderer``)."""
        return Capabilities(
            renderer.vector_bytes,
            renderer.grid_dims,
            renderer.parallel_threshold,
            renderer.pack_bytes,
            renderer.group_pack_bytes,
        )


#: a full reduction of this many elements or more is cut in two (``split_reduction``)
SPLIT_ELEMENTS = 1 << 18
#: a matmul's right operand is copied into panels when it has more elements than this (one of
#: 256 x 256 floats, a quarter of a 1 MB L2, is read from there whatever its layout: without the
#: copy, (512, 256) @ (256, 256) ran 360 -> 328 us on 2 cores, AVX-512 and AVX2 code alike; a
#: (256, 512) or (512, 512) one ran up to 20% slower without it on AVX2). Twice as many where a
#: tile's row of the operand is two cache lines (64-byte vectors, ``WIDE_VECTOR_BYTES``): AVX-512
#: code read (512, 256) and (256, 512) operands in place 4-10% faster with 512 rows (the GPT's
#: weight gradient ``x.T @ dy``: 328 -> 296 us of kernels), as fast with 2048
PANEL_ELEMENTS = 1 << 16
#: vectors this wide (two 64-byte registers: a tile row is 128 bytes) read twice as large a right
#: operand in place
WIDE_VECTOR_BYTES = 64


def lay_out(
    roots: tuple[UOp, ...], devices: list[str], capabilities: Callable[[str], Capabilities]
) -> tuple[UOp, ...]:
    """``roots`` with the layout rules applied to each reduction, for the device it runs on
    (``devices[i]`` is where root ``i`` lives; a COPY reads its source on the source's device)."""
    order = toposort(list(roots))
    if not any(u.op is Ops.REDUCE_AXIS for u in order):
        return roots
    if (reordered := reduce_in_reading_order(roots, order)) != roots:
        roots, order = reordered, toposort(list(reordered))
    device_of = _devices(roots, devices)
    done: dict[UOp, UOp] = {}
    added: set[UOp] = set()  # reshapes the rules put over a reduction's result
    for u in order:
        new = _rebuilt(u, done, added)
        if new.op is Ops.REDUCE_AXIS:
            new = _lay_out_reduce(new, capabilities(device_of[u]))
            if new.op is Ops.RESHAPE:
                added.add(new)
        done[u] = new
    return tuple(done[r] for r in roots)


def reduce_in_reading_order(roots: tuple[UOp, ...], order: list[UOp]) -> tuple[UOp, ...]:
    """``roots`` with each reduction that is read only through a permute (``r.T``) computed in
    the permuted order instead, so that its buffer is written the way it is read.

    Autograd makes a weight's gradient so: ``w.T``'s gradient is a sum over the batch, and ``w``'s
    is its transpose. The optimizer's updates then read the gradient across rows, one cache
    line per element (1.3 GFLOP/s for the (256, 768) weight of a GPT layer); the sum itself
    costs the same in either order, so its output axes are permuted instead (the permute is
    moved onto the sum's source, where the kernel's loops absorb it).
    """
    users: dict[UOp, int] = {}
    for u in order:
        for src in u.src:
            users[src] = users.get(src, 0) + 1
    done: dict[UOp, UOp] = {}
    for u in order:
        new = _rebuilt(u, done, set())
        if new.op is Ops.PERMUTE and (moved := _permute_into_reduce(u, new, users)) is not None:
            new = moved
        elif (
            new.op is Ops.PERMUTE and (moved := _permute_into_sum(u, new, users, done)) is not None
        ):
            new = moved
        done[u] = new
    return tuple(done[r] for r in roots)


def _permute_into_reduce(old: UOp, new: UOp, users: dict[UOp, int]) -> UOp | None:
    """``new`` (a PERMUTE over reshapes that only add or drop size-1 axes, over a reduction;
    ``old`` is the same in the original graph, whose nodes ``users`` counts) as a reshape of
    the reduction of a permuted source; None where the reduction has other readers."""
    chain = [old.src[0]]
    while chain[-1].op is Ops.RESHAPE:
        chain.append(chain[-1].src[0])
    red = chain[-1]
    if red.op is not Ops.REDUCE_AXIS or any(users.get(u, 0) != 1 for u in chain):
        return None
    if is_symbolic(red.src[0].shape) or is_symbolic(old.shape):
        return None
    below = new.src[0]
    while below.op is Ops.RESHAPE:
        below = below.src[0]
    kept = [d for d, n in enumerate(red.shape) if n != 1]  # the reduction's non-1 axes
    viewed = old.src[0].shape
    if [red.shape[d] for d in kept] != [n for n in viewed if n != 1]:
        return None  # a reshape that merges or splits axes: no permutation of the sum's axes
    rank = {d: i for i, d in enumerate(a for a, n in enumerate(viewed) if n != 1)}
    wanted = [kept[rank[a]] for a in old.arg if viewed[a] != 1]
    if wanted == kept:
        return None
    source = below.src[0]
    order = list(range(len(source.shape)))
    for position, axis in zip(kept, wanted):
        order[position] = axis
    summed = UOp(Ops.REDUCE_AXIS, below.dtype, (_permute(source, tuple(order)),), below.arg)
    return _reshape(summed, old.shape)


def _permute_into_sum(
    old: UOp, new: UOp, users: dict[UOp, int], done: dict[UOp, UOp]
) -> UOp | None:
    """A permute of an ADD of reductions (a weight used twice, as a tied embedding and the
    output head: autograd adds its two gradients, then transposes the sum) as the ADD of the
    permuted reductions, each moved into its reduction (``_permute_into_reduce``); None unless
    both move."""
    add = old.src[0]
    if add.op is not Ops.ADD or users.get(add, 0) != 1 or new.src[0].op is not Ops.ADD:
        return None
    moved = []
    for old_term, new_term in zip(add.src, new.src[0].src):
        order = old.arg
        if old_term.op is Ops.PERMUTE:  # a permute of a permute: one permute of what is below
            order = tuple(old_term.arg[a] for a in order)
            old_term = old_term.src[0]
            new_term = done[old_term]
        if order == tuple(range(len(order))):
            moved.append(new_term)  # (the two permutes undo each other)
            continue
        outer_old = UOp(Ops.PERMUTE, old.dtype, (old_term,), order)
        outer_new = UOp(Ops.PERMUTE, new.dtype, (new_term,), order)
        if (term := _permute_into_reduce(outer_old, outer_new, users)) is None:
            return None
        moved.append(term)
    return UOp(Ops.ADD, new.dtype, tuple(moved))


def _rebuilt(u: UOp, done: dict[UOp, UOp], added: set[UOp]) -> UOp:
    """``u`` over its rewritten sources. A reshape of a reshape the pass added is one reshape,
    as Tensor would have built it."""
    src = tuple(done[s] for s in u.src)
    if src == u.src:
        return u
    if u.op is Ops.RESHAPE and src[0] in added:
        return _reshape(src[0].src[0], u.arg)
    return u.replace(src=src)


def _lay_out_reduce(red: UOp, caps: Capabilities) -> UOp:
    """``red`` with its row operand copied along the sum where ``rows_along_sum`` says so, then
    the first of the other layout rules that applies to it."""
    red = rows_along_sum(red, caps) or red
    for rule in (split_reduction, panel_right_operand, panel_columns_operand, channels_innermost):
        if (new := rule(red, caps)) is not None:
            return new
    return red


def _devices(roots: tuple[UOp, ...], devices: list[str]) -> dict[UOp, str]:
    """Where each node runs: its root's device, or a COPY's source device below the COPY."""
    device_of: dict[UOp, str] = {}
    stack = list(zip(roots, devices))
    while stack:
        node, dev = stack.pop()
        if node in device_of:
            continue
        device_of[node] = dev
        stack.extend((s, node.arg[0] if node.op is Ops.COPY else dev) for s in node.src)
    return device_of


# ---- rules: each takes a REDUCE_AXIS and returns its replacement, or None -------------------


def split_reduction(red: UOp, caps: Capabilities) -> UOp | None:
    """A long full reduction in two steps, so that every core (or thread group) takes a part:
    reduce(x) -> reduce(reduce(x as (parts, n / parts), axis 1), axis 0)."""
    x = red.src[0]
    n = prod(x.shape)
    if red.arg[1] != tuple(range(len(x.shape))) or is_symbolic(x.shape) or n < SPLIT_ELEMENTS:
        return None
    if caps.grid_dims is None and n <= caps.parallel_threshold:  # one thread would do it all
        return None
    parts = next((p for p in (64, 32, 16, 8, 4, 2) if n % p == 0), None)
    if parts is None:
        return None
    op, dtype = red.arg[0], red.dtype
    rows = _reshape(x, (parts, n // parts))
    partial = _reshape(UOp(Ops.REDUCE_AXIS, dtype, (rows,), (op, (1,))), (parts,))
    total = UOp(Ops.REDUCE_AXIS, dtype, (partial,), (op, (0,)))
    return _reshape(total, red.shape)


def rows_along_sum(red: UOp, caps: Capabilities) -> UOp | None:
    """A matmul without batch axes whose row operand is read across its rows (``x.T @ dy``, and
    autograd's weight gradients ``sum(x * dy)`` over batch and time) reads it from a copy with
    the summed axes innermost, on targets whose vectors are narrower than ``WIDE_VECTOR_BYTES``.

    A register tile of rows by a vector of columns broadcasts one value of each of its rows per
    step of the sum. Read across the rows, those values lie a row of ``x`` apart at each step:
    a line of memory each, in a few cache sets when the rows are a kilobyte or more long, read
    again from the second-level cache (or beyond) for every block of columns. A tile of 6 rows
    by 16 columns (AVX2) reuses each such line for 96 products, one of 8 by 32 (AVX-512) for
    256: the narrow tile pays for it. AVX2 code on 2 cores (AMD EPYC), us of kernels, in place
    -> copied: (1024, 512) @ (512, 256) 1594 -> 1309, (256, 512) @ (512, 768) 1010 -> 961,
    (1024, 512) @ (512, 1024) 6279 -> 5180, 1024^3 14531 -> 10427; AVX-512 code ran 296 -> 315
    and 4976 -> 5141 copied (and the GPT's weight gradients as fast in place as forward).
    """
    if caps.grid_dims is not None or caps.vector_bytes >= WIDE_VECTOR_BYTES:
        return None
    if (found := _product(red, permuted=True)) is None:
        return None
    chain, a, b = found
    shape = chain[-1].shape
    permuted = chain[1].arg if chain[1].op is Ops.PERMUTE else tuple(range(len(shape)))
    ks = tuple(permuted[k] for k in red.arg[1])
    kept = [d for d in range(len(red.shape)) if d not in red.arg[1] and red.shape[d] != 1]
    if not kept or is_symbolic(shape):
        return None
    m = permuted[kept[-1]]  # the columns: the output's last axis, a vector of them per tile
    sides = [_views_down(x, (Ops.EXPAND,)) for x in (a, b)]
    if sum(src.shape[m] == 1 for _, src in sides) != 1:
        return None
    side = 0 if sides[0][1].shape[m] == 1 else 1
    if chain[1].op is Ops.PERMUTE and _aliasing_rows((a, b)[side], ks):
        return None  # (``panel_columns_operand`` copies it into panels, read as one run)
    views, rows = sides[side]
    other = sides[1 - side][1]
    summed = prod(shape[k] for k in ks)
    if not views or any(rows.shape[k] != shape[k] for k in ks) or summed < ROWS_COPIED_SUM:
        return None
    axes = [d for d in range(len(shape)) if d != m and d not in ks and shape[d] > 1]
    if any(rows.shape[d] == other.shape[d] for d in axes):
        return None  # (batch axes, which both operands vary along: attention's heads)
    n = prod(shape[d] for d in axes)
    if n < PANEL_ROWS or shape[m] < ROWS_COPIED_COLUMNS or _step_in_source(rows, ks[-1]) == 1:
        return None
    order = (*(d for d in range(len(shape)) if d not in ks), *ks)
    copy = UOp(Ops.CONTIGUOUS, rows.dtype, (_permute(rows, order),))
    back = tuple(order.index(d) for d in range(len(order)))
    return _rebuild_chain(chain + views, _permute(copy, back), side)


#: a row operand is copied along the sum (``rows_along_sum``) for products of this many
#: columns or more (each block of 16 of them read it again), summing this many elements or more
#: (a tile's lines of a shorter sum stay in the first-level cache, aliasing or not)
ROWS_COPIED_COLUMNS = 64
ROWS_COPIED_SUM = 64


def panel_right_operand(red: UOp, caps: Capabilities) -> UOp | None:
    """A matmul reading its right operand ``w`` (k, m) from panels of ``p`` columns, each one run
    of ``k * p`` elements (``(m/p, k, p)`` in memory).

    A matmul kernel on a target that loops over its output computes a tile of rows by ``p``
    columns (two SIMD registers wide), reading one row of the panel per step of k. In row-major
    ``w`` those rows are m elements apart; with m a power of two they all land in the same few
    cache sets and evict each other, so the panel is read from memory again for every tile. The
    copy costs one pass over ``w``; the kernel then reads each panel as one run (a 1024 matmul:
    2x faster). A matmul is ``sum(x[..., n, 1, k] * w.T[1, m, k], axis=-1)``, as Tensor builds it.
    """
    if caps.grid_dims is not None or (found := _matmul_operand(red)) is None:
        return None
    chain, w = found
    k, m = w.shape
    p = 2 * caps.vector_bytes // w.dtype.itemsize
    in_place = PANEL_ELEMENTS * (2 if caps.vector_bytes >= WIDE_VECTOR_BYTES else 1)
    if is_symbolic(w.shape) or prod(w.shape) <= in_place or m <= p:
        return None
    rows = [s for s in red.src[0].shape[:-2] if s != 1]
    if _innermost_in_source(w, 1) and _group_packed(rows, k, m, p, w.dtype.itemsize, caps):
        return None
    # a few rows (a language model's decode step) read w about once anyway: the copy would cost
    # as much as it saves (and for a quantized weight it would be a float copy of it)
    if prod(red.src[0].shape[:-2]) < PANEL_ROWS:
        return None
    wide = -(-m // p) * p
    if wide - m > m * PANEL_PADDING:
        return None
    panels = _permute(UOp(Ops.CONTIGUOUS, w.dtype, (_panels_of(w, p, wide),)), (1, 0, 2))
    if wide == m:
        return _rebuild_chain(chain, _reshape(panels, (k, m)))
    product = _rebuild_widened(chain, _reshape(panels, (k, wide)), wide)
    # stored whole: a kernel storing only the columns kept would loop over those, no vector
    product = UOp(Ops.CONTIGUOUS, product.dtype, (product,))
    kept = tuple((0, m) if d == len(red.shape) - 2 else (0, s) for d, s in enumerate(red.shape))
    return UOp(Ops.SHRINK, red.dtype, (product,), kept)


def _panels_of(w: UOp, p: int, wide: int) -> UOp:
    """``w`` (k, m) as (``wide`` / p, k, p): panels of ``p`` columns, the last padded with zero
    columns up to ``wide``, the product's extra ones cut off after it.

    The padded panel is a piece of its own, joined to the whole ones as a concatenation is:
    padded as one, every element's column was tested and clamped against m, so gcc read ``w``
    one element at a time (a 1000² matmul's copy: 1.9-3.7 ms beside a 10-14 ms product). Apart,
    the whole panels read runs, and the last panel's test is on the innermost loop alone, which
    ``codegen/split.py`` cuts away."""
    k, m = w.shape
    whole = m // p * p
    if wide == m:
        return _permute(_reshape(w, (k, m // p, p)), (1, 0, 2))
    head = UOp(Ops.SHRINK, w.dtype, (w,), ((0, k), (0, whole)))
    head = _permute(_reshape(head, (k, whole // p, p)), (1, 0, 2))
    tail = UOp(Ops.SHRINK, w.dtype, (w,), ((0, k), (whole, m)))
    tail = UOp(Ops.PAD, w.dtype, (tail,), ((0, 0), (0, p - (m - whole))))
    tail = _permute(_reshape(tail, (k, 1, p)), (1, 0, 2))
    panels = wide // p
    head = UOp(Ops.PAD, w.dtype, (head,), ((0, panels - whole // p), (0, 0), (0, 0)))
    tail = UOp(Ops.PAD, w.dtype, (tail,), ((panels - 1, 0), (0, 0), (0, 0)))
    return head.alu(Ops.ADD, tail)


def _group_packed(
    rows: list[int], k: int, m: int, p: int, itemsize: int, caps: Capabilities
) -> bool:
    """Whether a matmul of ``rows`` (the sizes of its row axes longer than 1: a batch of rows
    and the rows), summing ``k`` elements into ``m`` columns, packs groups of its right
    operand's panels itself, reading it in place along its rows (codegen/opt.py
    ``_packed_group``, which asks ``group_trips`` the same): rows enough for two blocks of the
    register tile."""
    if not rows or max(rows) < PACKED_ROWS:
        return False
    return group_trips(k, m, p, itemsize, caps.group_pack_bytes) is not None


#: a right operand whose columns no panel width divides is padded with zero columns up to a
#: multiple of it, when that adds at most this fraction of the product's work. Without panels
#: the kernel cannot keep a vector of columns in registers: PP-OCR recognition's last product,
#: (40, 120) @ (120, 6625 characters), ran at 7-30 GFLOP/s, 150 from panels of 6,656 columns
PANEL_PADDING = 0.25


def _rebuild_widened(chain: list[UOp], bottom: UOp, wide: int) -> UOp:
    """``_rebuild_chain`` for a matmul chain over a right operand of ``wide`` columns instead
    of its own: every shape in it (the broadcasts of both operands, the reshapes of ``w.T``)
    has the columns second to last, and takes ``wide`` there."""

    def widened(shape: tuple) -> tuple:
        return (*shape[:-2], wide, shape[-1])

    cur = bottom
    for node in reversed(chain):
        if node.op is Ops.MUL:
            a = node.src[0]  # x broadcast along the columns (``_matmul_operand`` checked it)
            cur = node.replace(src=(a.replace(arg=widened(a.arg)), cur))
        elif node.op in (Ops.RESHAPE, Ops.EXPAND):
            cur = node.replace(src=(cur,), arg=widened(node.arg))
        else:
            cur = node.replace(src=(cur,))
    return cur


def panel_columns_operand(red: UOp, caps: Capabilities) -> UOp | None:
    """Any other matmul-shaped reduction, batched or not, whose right operand is not stored
    with its columns innermost, reads that operand from a copy in panels of ``p`` columns,
    ``(..., m/p, k, p)`` in memory.

    Attention's ``q @ k.T`` (``k`` is (..., m, k)) and the backward's ``dy @ w.T`` (summed over
    the second-last axis, as autograd builds it) are such: without the copy the kernel can only
    read both operands along k, each output a dot product of its own, and no loaded value is
    reused for a neighbouring output (5 GFLOP/s for attention scores (16, 128, 64) @
    (16, 64, 128), 6 for (512, 256) @ (256, 1024) from a transposed weight). From panels it
    computes a register tile of rows by ``p`` columns as for any matmul: 100+ GFLOP/s on one
    core, the copy a pass over the operand. An operand whose columns are innermost already
    (``p @ v``) is read as it is.

    A matmul here is ``sum(a * b)`` over one axis k, where ``a`` is broadcast along exactly one
    output axis (the columns m, which ``b`` varies along) and ``b`` along one or more (the rows).
    """
    if caps.grid_dims is not None or (found := _product(red, permuted=True)) is None:
        return None
    chain, a, b = found
    ks = red.arg[1]
    if len(chain) < 2 or chain[1].op is not Ops.PERMUTE:
        return _panelled(chain, a, b, ks, caps)
    # summed through a permute, as autograd sums a weight's gradient ``x^T @ dy``: the columns
    # may be either operand's. The one whose rows alias (4 KB long) is copied first: read in
    # place, each step along k takes a new page whether its values are the tile's vectors or
    # its broadcast rows (the GPT's (1024, 256) gradients: 81 -> 237 GFLOP/s with dy copied)
    ks = tuple(chain[1].arg[k] for k in ks)
    mul = chain[-1]
    swapped = [*chain[:-1], mul.replace(src=(mul.src[1], mul.src[0]))]
    # (only those: a softmax's probabilities, read through the permute of attention's heads,
    # copied into panels would cut the one-kernel attention apart)
    orders = [(chain, a, b), (swapped, b, a)]
    for c, x, y in (order for order in orders if _aliasing_rows(order[2], ks)):
        if (new := _panelled(c, x, y, ks, caps)) is not None:
            return new
    return None


def _aliasing_rows(b: UOp, ks: tuple[int, ...]) -> bool:
    """Whether ``b`` (below its broadcasts) has rows of a multiple of ``ALIASING_BYTES`` along
    the summed axes ``ks``: the elements it varies along, other than those, that long in bytes."""
    src = _below(b, (Ops.EXPAND,))
    width = prod(s for d, s in enumerate(src.shape) if d not in ks)
    return prod(src.shape[k] for k in ks) > 1 and (width * src.dtype.itemsize) % ALIASING_BYTES == 0


def _panelled(
    chain: list[UOp], a: UOp, b: UOp, ks: tuple[int, ...], caps: Capabilities
) -> UOp | None:
    """``panel_columns_operand`` for the product ``a * b`` summed over the MUL's axes ``ks``
    (several: a weight's gradient over batch and time): panels ``(..., m/p, k, p)`` with ``k``
    all the summed axes' elements."""
    shape = chain[-1].shape
    a_views, a_src = _views_down(a, (Ops.EXPAND,))
    views, b_src = _views_down(b, (Ops.EXPAND,))
    if not a_views or not views or is_symbolic(shape):
        return None
    columns = [d for d, s in enumerate(shape) if a_src.shape[d] == 1 < s and b_src.shape[d] == s]
    rows = prod(s for d, s in enumerate(shape) if b_src.shape[d] == 1 < s)
    if len(columns) != 1 or columns[0] in ks or rows < PANEL_ROWS:
        return None
    if any(b_src.shape[k] != shape[k] for k in ks) or prod(shape[k] for k in ks) == 1:
        return None
    (m,) = columns
    p = 2 * caps.vector_bytes // b_src.dtype.itemsize
    size = shape[m]
    if size % p or size == p or prod(b_src.shape) < PANEL_ELEMENTS // 16:
        return None
    if len(ks) == 1 and _innermost_in_source(b_src, m):
        if (size * b_src.dtype.itemsize) % ALIASING_BYTES:
            return None
        row_sizes = [s for d, s in enumerate(shape) if b_src.shape[d] == 1 < s]
        if _group_packed(row_sizes, shape[ks[0]], size, p, b_src.dtype.itemsize, caps):
            return None  # (aliasing rows, but read once per group of panels)
    # Packed inside the kernel, a product without batch axes of its own loops over its column
    # blocks outermost; fewer than the cores can share alone (``FEW_PARALLEL_TRIPS``), and that
    # loop runs together with the rows' (codegen/lower.py), so each block of rows fills its panel
    # again. Such an operand is copied into panels by a kernel of its own instead. On 2 cores
    # (AMD EPYC), us: (512, 128) @ (64, 128).T 128 -> 80 (AVX2 code 163 -> 79), (512, 128) @
    # (128, 128).T 225 -> 122, (512, 256) @ (64, 256).T on AVX2 295 -> 123; attention's scores
    # (4 x 4 heads: their loop merges with the blocks', the rows stay inside) and (512, 256) @
    # (256, 256).T (8 blocks) stay packed.
    batch = prod(s for d, s in enumerate(shape) if d != m and d not in ks and b_src.shape[d] == s)
    few = batch == 1 and size // p < FEW_PARALLEL_TRIPS
    if not few and _packed_in_kernel(b_src, ks, rows, p, caps):
        return None
    if len(ks) > 1 and not _aliasing_rows(b, ks):
        return None  # (several summed axes: copied only for the aliasing rows)
    order = (*(d for d in range(len(shape)) if d != m and d not in ks), m, *ks)
    lead = tuple(b_src.shape[d] for d in order[: -1 - len(ks)])
    summed = prod(shape[k] for k in ks)
    split = _reshape(_permute(b_src, order), (*lead, size // p, p, summed))
    swap = (*range(len(lead) + 1), len(lead) + 2, len(lead) + 1)  # (..., m/p, k, p) and back
    panels = _permute(UOp(Ops.CONTIGUOUS, b_src.dtype, (_permute(split, swap),)), swap)
    back = tuple(order.index(d) for d in range(len(order)))
    copy = _reshape(panels, (*lead, size, *(shape[k] for k in ks)))
    return _rebuild_chain(chain + views, _permute(copy, back))


def _packed_in_kernel(
    b_src: UOp, ks: tuple[int, ...], rows: int, p: int, caps: Capabilities
) -> bool:
    """Whether the kernel copies the operand's panels itself (codegen/packed.py, chosen by
    codegen/opt.py's ``packed_opts``): one summed axis, along which the operand is one run, at
    most ``caps.pack_bytes`` per panel, and rows enough for two blocks of the register tile."""
    if not caps.pack_bytes or len(ks) != 1 or rows < PACKED_ROWS:
        return False
    (k,) = ks
    panel = b_src.shape[k] * p * b_src.dtype.itemsize
    return panel <= caps.pack_bytes and _innermost_in_source(b_src, k)


#: rows a matmul computes for its operand to be packed inside the kernel: two blocks of 8
PACKED_ROWS = 16
#: a matmul computes this many rows or more for its right operand to be worth a copy
PANEL_ROWS = 8
#: an operand with its columns innermost is copied into panels all the same when its rows are a
#: multiple of this many bytes long: read in place, each step along k lands in the same cache
#: sets (and a page of its own), as ``panel_right_operand`` explains; a GPT's weight gradients
#: ``x^T @ dy`` over rows of 1024 floats ran at 90 GFLOP/s so
ALIASING_BYTES = 4096


def _innermost_in_source(view: UOp, axis: int) -> bool:
    """Whether ``axis`` of ``view`` runs along the innermost axis of the node its views start
    from: followed down through permutes, reshapes that add or drop size-1 axes, and a
    reshape that splits the innermost axis."""
    u = view
    while u.op in (Ops.PERMUTE, Ops.RESHAPE, Ops.CAST):
        below = u.src[0]
        if u.op is Ops.PERMUTE:
            axis = u.arg[axis]
        elif u.op is Ops.RESHAPE:
            kept = [d for d, s in enumerate(u.shape) if s != 1]
            under = [d for d, s in enumerate(below.shape) if s != 1]
            if [u.shape[d] for d in kept] == [below.shape[d] for d in under] and axis in kept:
                axis = under[kept.index(axis)]
            elif axis == len(u.shape) - 1 and below.shape and below.shape[-1] % u.shape[-1] == 0:
                axis = len(below.shape) - 1
            else:
                return False
        u = below
    return axis == len(u.shape) - 1


def _step_in_source(view: UOp, axis: int) -> int | None:
    """Elements one step along ``axis`` of ``view`` moves in the memory of the node its views
    start from (followed down through permutes, reshapes and casts); None where that step is
    not a step along one axis of a node (a reshape splitting it unevenly)."""
    u, step = view, prod(view.shape[axis + 1 :])
    while u.op in (Ops.PERMUTE, Ops.RESHAPE, Ops.CAST):
        if u.op is Ops.PERMUTE:  # (a reshape or cast keeps the elements' order: the same step)
            inner = [prod(u.shape[d + 1 :]) for d in range(len(u.shape))]
            along = [d for d, n in enumerate(inner) if step % n == 0 and step // n < u.shape[d]]
            if not along:
                return None
            d = along[0]
            below = u.src[0].shape
            step = step // inner[d] * prod(below[u.arg[d] + 1 :])
        u = u.src[0]
    return step


def channels_innermost(red: UOp, caps: Capabilities) -> UOp | None:
    """A convolution reading its weight with the output channels innermost (a small copy), so
    that the kernel loads a vector of filters at once and reuses each input element for all
    of them. A convolution is, as Tensor builds it, ``sum(windows * weight, axes)`` over
    (N, groups, C_out, C_in, *out, *kernel), with the weight viewed as
    (1, groups, C_out, C_in, 1..., *kernel) and the sum over C_in and the kernel axes."""
    if (found := _conv_weight(red)) is None:
        return None
    chain, weight = found  # weight: (groups, C_out, C_in, *kernel)
    ndim = len(weight.shape)
    conv = red
    groups, filters, *rest = weight.shape
    p = 2 * caps.vector_bytes // weight.dtype.itemsize
    pointwise = caps.grid_dims is None and groups == 1 and all(k == 1 for k in rest[1:])
    if pointwise and (panelled := _input_in_panels(red, filters, caps)) is not None:
        return panelled
    if caps.grid_dims is None and filters % p == 0 and filters > p:
        # in panels of p filters, (groups, C_out / p, C_in, *kernel, p): each step along C_in
        # reads the tile's filters as one run, as ``panel_right_operand`` explains
        # copied as (groups, C_out / p, taps, p), C_in and the kernel one axis of taps: a
        # transpose of two axes, which the optimiser copies in blocks (codegen/opt.py
        # ``_transposed_by_blocks``); kept apart, the filters' rows (4 KB apart for 256 channels
        # of 2x2) were read one element a line: a (512, 256, 2, 2) weight's copy 0.8 -> 0.14 ms
        taps = prod(rest)
        split = _reshape(weight, (groups, filters // p, p, taps))
        copy = UOp(Ops.CONTIGUOUS, weight.dtype, (_permute(split, (0, 1, 3, 2)),))
        order = (0, 1, *range(3, ndim + 1), 2)
        copy = _reshape(copy, (groups, filters // p, *rest, p))
        back = _permute(copy, tuple(order.index(a) for a in range(ndim + 1)))
        conv = _rebuild_chain(chain, _reshape(back, weight.shape))
    elif filters % FILTER_VECTOR == 0:
        order = (0, *range(2, ndim), 1)
        copy = UOp(Ops.CONTIGUOUS, weight.dtype, (_permute(weight, order),))
        conv = _rebuild_chain(chain, _permute(copy, tuple(order.index(a) for a in range(ndim))))
    if caps.grid_dims is None and any(k > 1 for k in weight.shape[3:]):
        conv = _padded_input_copied(conv)
    return None if conv is red else conv


#: a pointwise convolution reads its input from panels from this many filters and this many
#: input channels on: below, the copy costs about what it saves (PP-OCR detection, one thread:
#: 79-80 ms a call with these, 80-82 from 32 filters and 16 channels, 81 from 128 and 64)
POINTWISE_FILTERS = 64
POINTWISE_CHANNELS = 32


def _input_in_panels(red: UOp, filters: int, caps: Capabilities) -> UOp | None:
    """A pointwise convolution (1x1 kernel, stride 1, no pad, one group) is the matmul
    ``weight (C_out, C_in) @ x (C_in, positions)`` for each image: it reads its input from a
    copy in panels of ``p`` positions, ``(N, P / p, C_in, p)``, as ``panel_right_operand`` reads
    a matmul's right operand, and its weight as it is (rows of C_in, read a tile of filters at
    a time). PP-OCR recognition's (480, 480) over 6x80 positions: the kernel reading a vector
    of filters from panels of the weight and the image in place, a row of it apart at each step
    of C_in, took 1.4 ms; this one 1.1, and 0.04 for the copy."""
    mul = _conv_product(red)
    views, x = _views_down(mul.src[0], (Ops.RESHAPE, Ops.EXPAND))
    shape = mul.shape
    n = (len(shape) - 4) // 2
    images, channels, positions = shape[0], shape[3], prod(shape[4 : 4 + n])
    if is_symbolic(shape) or sum(v.op is Ops.EXPAND for v in views) != 1:
        return None
    if mul.src[1].op is not Ops.EXPAND:
        return None  # (a weight cast after its broadcast: left to the weight's copy)
    if filters < POINTWISE_FILTERS or channels < POINTWISE_CHANNELS:
        return None  # (the copies, a pass over the input each, would cost more than they save)
    if prod(x.shape) != images * channels * positions:
        return None  # (strided or padded windows, or an input broadcast below them)
    p = 2 * caps.vector_bytes // x.dtype.itemsize
    if positions % p or positions == p or images * channels * positions < PANEL_ELEMENTS:
        return None
    # what computes x stays a kernel of its own, storing it in its order: a depthwise
    # convolution before it, computed in the panels' order, took 8x as long
    if _below(x, (Ops.RESHAPE,)).op not in (Ops.PARAM, Ops.BUFFER):
        x = UOp(Ops.CONTIGUOUS, x.dtype, (x,))
    # the positions as one axis (P, 1, ...): a kernel splitting them into panels then finds
    # whole panels along it, where rows of 40 split into panels of 32 computed a division per
    # load (PP-OCR detection's 40x40 images: 1.7x slower)
    merged = (*shape[:4], positions, *(1,) * (n - 1), *shape[4 + n :])
    rows = _reshape(x, (images, channels, positions // p, p))
    copy = UOp(Ops.CONTIGUOUS, x.dtype, (_permute(rows, (0, 2, 1, 3)),))
    windows = _reshape(_permute(copy, (0, 2, 1, 3)), (images, 1, 1, channels, *merged[4:]))
    weight = _below(mul.src[1], (Ops.EXPAND,))
    broadcasts = tuple(UOp(Ops.EXPAND, u.dtype, (u,), merged) for u in (windows, weight))
    return _reshape(_over_product(red, mul.replace(src=broadcasts)), red.shape)


#: output channels come innermost only in multiples of this many (the narrowest vector the
#: optimiser upcasts): 258 filters of 256 taps (silero-vad's STFT) could run as no vector of
#: filters, and read transposed each tap came from a line of its own (0.15 ms instead of 0.02)
FILTER_VECTOR = 4


#: the views between a convolution's windows and the input they read
_WINDOW_VIEWS = (Ops.EXPAND, Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK)


def _padded_input_copied(red: UOp) -> UOp:
    """The convolution ``red`` reading its padded input from a copy: on loop devices a kernel
    reading through the pad computes a clamped index and a bounds test for every input element
    of every window (a dozen integer operations per multiply-add); read from the padded copy,
    the index is affine in the loops and the window's loads share it. A reflect or replicate
    pad (a concatenation of flipped or repeated pieces) is copied for the same reason."""
    mul = _conv_product(red)
    views, pad = _views_down(mul.src[0], _WINDOW_VIEWS)
    if pad.op is not Ops.PAD and not _concatenation(pad):
        return red
    copy = UOp(Ops.CONTIGUOUS, pad.dtype, (pad,))
    windows = copy
    for view in reversed(views):
        windows = view.replace(src=(windows,))
    return _over_product(red, mul.replace(src=(windows, mul.src[1])))


def _conv_product(red: UOp) -> UOp:
    """The MUL a convolution ``red`` sums (below its CAST, if any)."""
    return red.src[0].src[0] if red.src[0].op is Ops.CAST else red.src[0]


def _over_product(red: UOp, mul: UOp) -> UOp:
    """``red`` summing ``mul`` instead of its own product (through its CAST, if any)."""
    if red.src[0].op is Ops.CAST:
        mul = red.src[0].replace(src=(mul,))
    return red.replace(src=(mul,))


def _concatenation(u: UOp) -> bool:
    """Whether ``u`` is ``Tensor.cat``'s sum of padded pieces (viewed, flipped)."""
    if u.op is not Ops.ADD:
        return False
    pieces = [_below(s, (*_WINDOW_VIEWS, Ops.FLIP)) for s in u.src]
    return all(p.op is Ops.PAD or _concatenation(p) for p in pieces)


# ---- matching --------------------------------------------------------------------------------


def _product(red: UOp, permuted: bool = False) -> tuple[list[UOp], UOp, UOp] | None:
    """For ``sum(a * b)`` (maybe ``sum(cast(a * b))``): the nodes from ``red`` down to the MUL,
    and ``a`` and ``b``. With ``permuted`` also ``sum(permute(a * b))``, as autograd sums a
    weight's gradient (the PERMUTE second in the chain)."""
    if red.arg[0] is not Ops.ADD:
        return None
    chain, mul = [red], red.src[0]
    if permuted and mul.op is Ops.PERMUTE:
        chain.append(mul)
        mul = mul.src[0]
    if mul.op is Ops.CAST:
        chain.append(mul)
        mul = mul.src[0]
    if mul.op is not Ops.MUL:
        return None
    return chain + [mul], mul.src[0], mul.src[1]


def _views_down(u: UOp, ops: tuple[Ops, ...]) -> tuple[list[UOp], UOp]:
    """The single-source nodes of ``ops`` from ``u`` down, and the first node of another op."""
    chain = []
    while u.op in ops:
        chain.append(u)
        u = u.src[0]
    return chain, u


def _matmul_operand(red: UOp) -> tuple[list[UOp], UOp] | None:
    """For a matmul ``sum(x[..., n, 1, k] * w.T[1, m, k], -1)`` with ``w`` 2-d: the nodes from
    ``red`` down to ``w`` (``w``'s PERMUTE last), and ``w``."""
    if (found := _product(red)) is None:
        return None
    chain, a, b = found
    ndim = len(chain[-1].shape)
    if red.arg[1] != (ndim - 1,) or ndim < 3 or _below(a, (Ops.EXPAND,)).shape[-2] != 1:
        return None
    views, t = _views_down(b, (Ops.EXPAND, Ops.CAST, Ops.RESHAPE))
    if t.op is not Ops.PERMUTE or t.arg != (1, 0) or not views or views[-1].op is not Ops.RESHAPE:
        return None
    # the reshapes only add leading size-1 axes to w.T (m, k)
    if any(v.op is Ops.RESHAPE and v.shape[-2:] != t.shape for v in views):
        return None
    return chain + views + [t], t.src[0]


def _conv_weight(red: UOp) -> tuple[list[UOp], UOp] | None:
    """For a convolution (see ``channels_innermost``): the nodes from ``red`` down to the
    weight's view, and the weight (groups, C_out, C_in, *kernel) under it."""
    if (found := _product(red)) is None:
        return None
    chain, a, b = found
    d = len(chain[-1].shape)
    n = (d - 4) // 2
    if n < 1 or d != 4 + 2 * n or red.arg[1] != (3, *range(4 + n, 4 + 2 * n)):
        return None
    if _below(a, (Ops.EXPAND,)).shape[2] != 1:
        return None
    views, view = _views_down(b, (Ops.EXPAND, Ops.CAST))
    if view.op is not Ops.RESHAPE or view.src[0].op is not Ops.RESHAPE:
        return None
    shape, weight = view.shape, view.src[0]
    if shape[0] != 1 or any(s != 1 for s in shape[4 : 4 + n]):
        return None
    if weight.shape != shape[1:4] + shape[4 + n :]:
        return None
    return chain + views + [view], weight


def _below(u: UOp, ops: tuple[Ops, ...]) -> UOp:
    return _views_down(u, ops)[1]


def _rebuild_chain(chain: list[UOp], bottom: UOp, side: int = 1) -> UOp:
    """``chain`` (each node reading the next, the MUL reading its source ``side``: the second
    by default) rebuilt over ``bottom`` in place of the last node's source."""
    cur = bottom
    for node in reversed(chain):
        if node.op is Ops.MUL:
            cur = node.replace(src=(cur, node.src[1]) if side == 0 else (node.src[0], cur))
        else:
            cur = node.replace(src=(cur,))
    return cur


# ---- movement ops, as the Tensor methods build them (no node for a no-op) ---------------------


def _reshape(u: UOp, shape: tuple) -> UOp:
    return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), shape)


def _permute(u: UOp, order: tuple[int, ...]) -> UOp:
    return u if order == tuple(range(len(order))) else UOp(Ops.PERMUTE, u.dtype, (u,), order)
