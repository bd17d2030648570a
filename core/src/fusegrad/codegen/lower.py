"""Lowering: a kernel AST (tensor-graph ops over PARAM buffers) -> a kernel graph of index math.

The kernel computes each element of its output. The output index is one flat loop variable
(a RANGE on a CPU, a SPECIAL grid index on a GPU); ``lower`` walks the AST from the output down,
carrying the index of the element it needs, and turns every movement op into arithmetic on that
index. A reshape becomes ``//`` and ``%``, a permute reorders, an expand drops an index, a pad
becomes a bounds check that gates the load, a shrink adds an offset and a flip mirrors. Nothing
is copied. A reduce opens a loop of its own (a RANGE of kind ``AxisKind.REDUCE``) and becomes
``REDUCE``. The loops are numbered in the order they are opened (``AxisCounter``): the output
loops first, then the upcast loops, then the reductions' loops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusegrad.codegen.online_softmax import has_online_softmax, online_softmax
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import prod, strides_for
from fusegrad.uop.loops import AxisCounter, AxisKind
from fusegrad.uop.ops import GroupOp, Ops, UOp, sym_max, toposort

Index = tuple[UOp, ...]
#: kernels doing more element operations than this run their outermost loop on all cores
PARALLEL_WORK = 1 << 16
#: an element computed with more ALU operations than this counts as that many elements' work
#: over this (a depthwise 5x5 convolution's 38,400 outputs of 50 operations each: 63 us on one
#: core, a copy of as many elements 3 us)
ELEMENT_OPS = 8


@dataclass(frozen=True)
class KernelOpts:
    """The loop structure of a kernel, chosen by the optimiser (codegen/opt.py) and followed by
    lowering: output axes as loops in ``order`` (outermost first), ``upcast`` pairs
    ``(axis, amount)`` that become inner loops of ``amount`` trips, and ``lanes``."""

    order: tuple[int, ...]
    upcast: tuple[tuple[int, int], ...] = ()
    #: ``(reduced axis, amount)``: that axis of the reduction runs as vector lanes, each with an
    #: accumulator of its own, combined after the loop; axis ``INNERMOST``: each reduction's own
    #: innermost reduced axis (a kernel of several sums)
    lanes: tuple[int, int] | None = None
    #: the two innermost reduced axes, when next to each other, run as one loop (rows of 20
    #: become one run of 400: room for wide lanes); ``lanes`` then names the inner one
    merge: bool = False
    #: ``(axis, trips)``: that axis's loop is split in two, the inner part of ``trips`` placed
    #: innermost of the output loops (a matmul walks ``trips`` column panels for each block of
    #: rows, so the rows are read once per panel group, the panels stay in cache for all rows)
    tile: tuple[tuple[int, int], ...] = ()
    #: upcast axes their amounts do not divide whose last block starts early enough to end at
    #: the axis's end, overlapping the block before it (a vector of 16 of 100 columns: blocks at
    #: 0, 16, ..., 80 and 84), so that every block is one run; else the last block's spare
    #: elements repeat the last position, which no vector load or store can read. A tile's
    #: rows are shifted too: its rows then lie a fixed stride apart (see ``opt.heuristic_opts``)
    shifted: tuple[int, ...] = ()


#: ``KernelOpts.lanes``' axis meaning each reduction's innermost reduced axis
INNERMOST = -1


def idx_const(v: int | UOp, index: DType = dtypes.index) -> UOp:
    """An index constant; a size that is already an expression (of variables) stays itself."""
    return v if isinstance(v, UOp) else UOp.const(index, v)


#: a kernel whose buffers, views or reductions hold this many elements or more indexes them with
#: 64-bit integers (``index_type``): 32-bit positions would wrap around past ``2**31 - 1``
INDEX32_LIMIT = 2**31


def index_type(ast: UOp) -> DType:
    """The integer type of a kernel's index arithmetic (loop counters, grid indices, positions).

    32 bits (``dtypes.index``) where every index value the kernel computes stays below
    ``INDEX32_LIMIT``, else 64 bits. Flat positions are computed over a buffer, a reshape's view
    and the axes one reduction sums (a grouped reduction shares them out flat); every other
    index (an axis index, a pad's or shrink's offset) stays inside one axis of a view. The
    broadcast view of a matmul (M x N x K elements) is never flattened, so it needs no 64 bits.
    Loops over 32-bit counters are faster (and all that WGSL has), so only kernels that need 64
    get them.
    """
    counts = []
    for u in toposort([ast]):
        if u.op in (Ops.PARAM, Ops.BUFFER, Ops.RESHAPE):
            counts.append(sym_max(prod(u.shape)))
        elif u.op is Ops.REDUCE_AXIS:
            counts.append(sym_max(prod(u.src[0].shape[a] for a in u.arg[1])))
        if u.op in GroupOp.Movement:
            counts.extend(sym_max(s) for s in u.shape)
    return dtypes.int64 if max(counts, default=0) >= INDEX32_LIMIT else dtypes.index


def unflatten(flat: UOp, shape: tuple[int, ...]) -> Index:
    """The per-axis indices of element ``flat`` of a contiguous array of ``shape``.

    The outermost axis takes no ``% size``: wherever a load is allowed ``flat`` is in range, and
    where it is not (outside a pad) the index is never used, so the modulo only costs time.
    """
    outer = next((a for a, s in enumerate(shape) if s != 1 and s != 0), None)
    return tuple(
        idx_const(0, flat.dtype) if s == 1 else flat // st if a == outer else (flat // st) % s
        for a, (st, s) in enumerate(zip(strides_for(shape), shape))
    )


def flatten(idx: Index, shape: tuple[int, ...], index: DType = dtypes.index) -> UOp:
    """The flat position of per-axis indices ``idx`` (of type ``index``) in a contiguous array
    of ``shape``."""
    out = idx_const(0, index)
    for i, st, s in zip(idx, strides_for(shape), shape):
        if s != 1 and s != 0:
            out = out + i * st
    return out


def clamp(i: UOp, lo: int, hi: int | UOp) -> UOp:
    """``i`` limited to ``[lo, hi]``. Inside a pad, where a load happens, this changes nothing;
    but it gives the index bounds, so the ``//`` and ``%`` of reshapes below the pad simplify
    away (``i - before`` alone may be negative, and a chain of views then keeps them all).
    A symbolic ``hi`` (a size that is a variable) always clamps."""
    if i.vmin < lo:
        i = i.alu(Ops.MAX, idx_const(lo, i.dtype))
    if isinstance(hi, UOp) or i.vmax > hi:
        i = -((-i).alu(Ops.MAX, -idx_const(hi, i.dtype)))
    return i


def in_range(i: UOp, lo: int | UOp, hi: int | UOp) -> UOp:
    """``lo <= i < hi`` as a bool UOp."""
    return i.lt(lo).ne(True) & i.lt(hi)


def guard_division(op: Ops, a: UOp, b: UOp) -> UOp:
    """Integer ``a // b`` or ``a % b`` (IDIV, MOD) that cannot trap where ``b`` may be 0 or -1.

    C leaves ``x / 0`` and ``INT_MIN / -1`` undefined and x86 stops the process (SIGFPE; with a
    constant 0, gcc may emit a trap instruction instead). A divisor that may be 0 or -1 is
    replaced there by 1, and the quotient fixed up: ``x // 0 = x % 0 = 0`` (as constant folding
    and the PYTHON device define them), ``x // -1 = -x`` (wrapping) and ``x % -1 = 0``, as C
    means them. Any other divisor is kept as it is, and constant cases fold away.
    """
    lo, hi = b.bounds
    zero, minus_one = lo <= 0 <= hi, not a.dtype.is_unsigned and lo <= -1 <= hi
    if not (zero or minus_one):
        return a.alu(op, b)
    ok = b.ne(0) & b.ne(-1) if minus_one else b.ne(0)
    out = a.alu(op, ok.where(b, UOp.const(b.dtype, 1)))  # a % 1 = 0: MOD needs no more
    if op is Ops.IDIV and zero:
        out = b.ne(0).where(out, UOp.const(a.dtype, 0))
    if op is Ops.IDIV and minus_one:
        out = b.ne(-1).where(out, -a)
    return out


def reduce_identity(op: Ops, dtype: DType) -> UOp:
    """What a reduction of nothing is: 0 for a sum, the dtype's smallest value for a max."""
    return UOp.const(dtype, 0 if op is Ops.ADD else dtype.min)


@dataclass
class Lowerer:
    """Walks one kernel AST; ``axes`` numbers the loops it opens (after the output loops) and
    holds the kernel's index type."""

    opts: KernelOpts | None = None
    axes: AxisCounter = field(default_factory=AxisCounter)
    memo: dict = field(default_factory=dict)

    def zero(self) -> UOp:
        return idx_const(0, self.axes.index)

    def new_range(self, size: int | UOp, kind: AxisKind) -> UOp:
        return self.axes.range(size, kind)

    def lower(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        """The value of element ``idx`` of ``u``; loads happen only where ``gate`` holds."""
        key = (u, idx, gate)
        if (hit := self.memo.get(key)) is None:
            hit = self.memo[key] = self._lower(u, idx, gate)
        return hit

    def _lower(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        op = u.op
        if op is Ops.PARAM:
            address = UOp(Ops.INDEX, u.dtype, (u, idx[0]))
            if gate.op is Ops.CONST and gate.arg is True:
                return UOp(Ops.LOAD, u.dtype, (address,))
            return UOp(Ops.LOAD, u.dtype, (address, gate, UOp.const(u.dtype, 0)))
        if op in (Ops.CONST, Ops.DEFINE_VAR):
            return u
        if op in GroupOp.Movement:
            return self._lower_movement(u, idx, gate)
        if op is Ops.REDUCE_AXIS:
            return self._lower_reduce(u, idx, gate)
        if op in (Ops.CONTIGUOUS, Ops.DETACH):
            return self.lower(u.src[0], idx, gate)
        if op is Ops.GATHER:
            return self._lower_gather(u, idx, gate)
        if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
            src = tuple(self.lower(s, idx, gate) for s in u.src)
            if op in (Ops.IDIV, Ops.MOD) and not u.dtype.is_float:
                return guard_division(op, *src)
            return u.replace(src=src)
        raise NotImplementedError(f"cannot lower {op} inside a kernel")

    def _lower_movement(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        op, arg, src = u.op, u.arg, u.src[0]
        if op is Ops.RESHAPE:
            while src.op is Ops.RESHAPE:  # reshapes compose: the shapes between them don't matter
                src = src.src[0]
            flat = flatten(idx, u.shape, self.axes.index)
            return self.lower(src, unflatten(flat, src.shape), gate)
        if op is Ops.PERMUTE:
            permuted = [self.zero()] * len(idx)
            for out_axis, src_axis in enumerate(arg):
                permuted[src_axis] = idx[out_axis]
            return self.lower(src, tuple(permuted), gate)
        if op is Ops.EXPAND:
            inner = tuple(self.zero() if s == 1 else i for i, s in zip(idx, src.shape))
            return self.lower(src, inner, gate)
        if op is Ops.SHRINK:
            return self.lower(src, tuple(i + b for i, (b, _) in zip(idx, arg)), gate)
        if op is Ops.FLIP:
            inner = tuple((s - 1) - i if f else i for i, s, f in zip(idx, src.shape, arg))
            return self.lower(src, inner, gate)
        # PAD: outside the source the value is 0. The loads below need no gate of their own:
        # the clamped index keeps them inside the source, and the `where` drops what they read
        # outside it. Ungated, they vectorise, and loads of one element hoist out of the loops.
        valid = UOp.const(dtypes.bool, True)
        for i, s, (before, after) in zip(idx, src.shape, arg):
            if before or after:
                valid = valid & in_range(i, before, before + s)
        inner = tuple(
            clamp(i - b, 0, s - 1) if b or a else i for i, s, (b, a) in zip(idx, src.shape, arg)
        )
        value = self.lower(src, inner, gate)
        return valid.where(value, UOp.const(u.dtype, 0))

    def _lower_gather(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        """The table read where the index says along the gathered axis: the index's element is
        loaded first and becomes part of the table's address. It is clamped into the axis, so
        a bad index reads a wrong element rather than outside the buffer (``Tensor.gather``
        reports bad indices after the run: tensor/bounds.py)."""
        table, index = u.src
        n = table.shape[u.arg]
        at = self.lower(index, idx, gate)
        at = clamp(at if at.dtype == self.axes.index else at.cast(self.axes.index), 0, n - 1)
        inner = tuple(
            at if a == u.arg else self.zero() if s == 1 else i
            for a, (i, s) in enumerate(zip(idx, table.shape))
        )
        return self.lower(table, inner, gate)

    def _lower_reduce(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        """A loop per reduced axis (size-1 axes need none) around the value of the source."""
        reduce_op, axes = u.arg
        src = u.src[0]
        if any(src.shape[a] == 0 for a in axes):  # nothing to reduce: the identity
            return reduce_identity(reduce_op, u.dtype)
        lane_axis, lanes = self.opts.lanes if self.opts and self.opts.lanes else (None, 1)
        looped = sorted(a for a in axes if src.shape[a] != 1)
        if lane_axis == INNERMOST and looped:  # (each sum's own innermost axis: opt._shared_lanes)
            lane_axis = looped[-1]
        # the two innermost reduced axes as one loop (KernelOpts.merge): its counter m gives
        # m // width and m % width, which simplify back into the inputs' flat positions
        pair = looped[-2:] if self.opts and self.opts.merge and len(looped) >= 2 else []
        sizes = {a: src.shape[a] for a in looped if a != (pair[0] if pair else None)}
        if pair:
            sizes[pair[1]] = src.shape[pair[0]] * src.shape[pair[1]]
        loops = {
            a: self.new_range(n // (lanes if a == lane_axis else 1), AxisKind.REDUCE)
            for a, n in sizes.items()
        }
        lane = [self.new_range(lanes, AxisKind.LANE)] if lane_axis in loops else []
        position = {
            a: loop * lanes + lane[0] if lane and a == lane_axis else loop
            for a, loop in loops.items()
        }
        if pair:
            width = src.shape[pair[1]]
            position[pair[0]], position[pair[1]] = (
                position[pair[1]] // width,
                position[pair[1]] % width,
            )
        inner = tuple(position.get(a, self.zero()) if a in axes else i for a, i in enumerate(idx))
        value = self.lower(src, inner, gate)
        if not loops:  # only size-1 axes: each output is the one element
            return value
        return UOp(Ops.REDUCE, u.dtype, (value, *loops.values(), *lane), reduce_op)


def output_index(
    shape: tuple[int, ...],
    grid: bool,
    opts: KernelOpts | None,
    parallel: bool,
    axes: AxisCounter,
    balance: bool = True,
) -> tuple[Index, UOp]:
    """Per-axis output indices and the flat store position; ``axes`` numbers the loops.

    Without ``opts`` the output is one flat loop (or grid index). With them, each axis of the
    output has its own loop, in ``opts.order``; an upcast axis of ``U`` is split into an outer
    loop and an inner loop of ``U`` trips (kind ``UPCAST``) that the compiler can vectorise.
    With ``parallel`` the outermost output loop is of kind ``PARALLEL`` (run on all cores);
    with ``balance`` too, a short one runs together with the next loop (``FEW_PARALLEL_TRIPS``).
    """
    n, index = prod(shape), axes.index
    outermost = AxisKind.PARALLEL if parallel else AxisKind.GLOBAL
    if opts is None:
        if n == 1:
            flat = idx_const(0, index)
        elif grid:  # a symbolic size launches threads for its largest value (see lower_kernel)
            flat = UOp(Ops.SPECIAL, index, (), ("gidx0", sym_max(n)))
        else:
            flat = axes.range(n, outermost)
        return unflatten(flat, shape), flat
    # (an axis whose size is a variable is looped whole: no upcast, no tile)
    upcast = {d: u for d, u in opts.upcast if isinstance(shape[d], int)}
    blocks = {d: _blocks(s, upcast.get(d, 1)) for d, s in enumerate(shape)}
    tile = {d: t for d, t in opts.tile if isinstance(blocks[d], int) and blocks[d] % t == 0}
    trips = {d: blocks[d] // tile[d] if d in tile else blocks[d] for d in range(len(shape))}
    looped = [(d, trips[d]) for d in opts.order if _longer_than_one(trips[d])]
    looped += [(d, tile[d]) for d in opts.order if d in tile]  # tiles: innermost output loops
    loops: dict[int, list[tuple[UOp, int | UOp]]] = {}  # axis -> its loops: counter, trips
    if parallel and balance and _few_trips(looped):
        # a short outermost loop (3 panel tiles of a 768-column weight gradient) leaves cores
        # idle or unevenly loaded: the parallel loop runs the first two loops' trips together
        (d0, n0), (d1, n1) = looped[:2]
        both = axes.range(n0 * n1, outermost)
        loops[d0], looped = [(both // n1, n0)], looped[2:]
        loops.setdefault(d1, []).append((both % n1, n1))
        outermost = AxisKind.GLOBAL
    for n, (d, count) in enumerate(looped):
        loop = axes.range(count, outermost if n == 0 else AxisKind.GLOBAL)
        loops.setdefault(d, []).append((loop, count))
    inner = {d: axes.range(u, AxisKind.UPCAST) for d, u in upcast.items()}
    idx = []
    for d, size in enumerate(shape):
        block: UOp | None = None
        for loop, count in loops.get(d, []):
            block = loop if block is None else block * count + loop
        block = idx_const(0, index) if block is None else block
        amount = upcast.get(d, 1)
        ragged = isinstance(size, int) and size % amount
        if ragged and d in opts.shifted and isinstance(size, int) and size > amount:
            # (the overlap is computed twice, from the same inputs: the same values stored)
            i = clamp(block * amount, 0, size - amount) + inner[d]
        else:
            i = block * amount + inner.get(d, idx_const(0, index))
            # an upcast that does not divide the axis computes its last block's spare elements
            # again at the last position: same inputs, same value, written to the same place
            i = clamp(i, 0, size - 1) if ragged else i
        idx.append(i if _longer_than_one(size) else idx_const(0, index))
    return tuple(idx), flatten(tuple(idx), shape, index)


#: an outermost parallel loop of fewer trips than this runs together with the next loop
FEW_PARALLEL_TRIPS = 8


def _few_trips(looped: list[tuple[int, int | UOp]]) -> bool:
    """Whether the outermost of ``looped`` (axis, trips) has too few trips to share among
    cores, and the next loop's (fixed) trips could join them."""
    if len(looped) < 2:
        return False
    (_, first), (_, second) = looped[:2]
    return (
        isinstance(first, int)
        and isinstance(second, int)
        and first < FEW_PARALLEL_TRIPS
        and second > 1
    )


def _blocks(size: int | UOp, upcast: int) -> int | UOp:
    """How many blocks of ``upcast`` elements an axis of ``size`` takes (a variable: itself)."""
    return size if isinstance(size, UOp) else -(-size // upcast)


def _longer_than_one(size: int | UOp) -> bool:
    return isinstance(size, UOp) or size > 1


def row_reductions(value: UOp) -> list[UOp]:
    """The reductions of a row kernel (schedule/kernelize.py ``_row_reads``), which all reduce
    arrays of the output's own shape over its last axis; [] for any other kernel."""
    reduced = [u for u in toposort([value]) if u.op is Ops.REDUCE_AXIS]
    return reduced if reduced and all(r.src[0].shape == value.shape for r in reduced) else []


#: the longest row of an online softmax kept in registers (attention's head size)
ONLINE_ROW = 256


def online_opts(value: UOp) -> KernelOpts | None:
    """The loops of an attention kernel whose sums run online (codegen/online_softmax.py), else
    None: a loop per output row, and the row (a head's values, the last axis longer than 1)
    upcast whole, so that one pass over the keys computes each score once for the whole row.
    Lowering keeps to them whatever else it is asked (BEAM's lanes or upcasts would split the
    keys, or give the running max a row of its own)."""
    longer = [d for d, size in enumerate(value.shape) if size != 1]
    if not longer or any(isinstance(s, UOp) for s in value.shape):
        return None  # (a size that is a variable: a loop per axis, see opt.symbolic_opts)
    if value.shape[longer[-1]] > ONLINE_ROW or not has_online_softmax(value):
        return None
    last = longer[-1]  # (the sum's own axis, of 1, may come after it)
    order = tuple(d for d in range(len(value.shape)) if d != last)
    return KernelOpts(order, ((last, value.shape[last]),))


def lower_kernel(
    ast: UOp,
    grid: bool,
    opts: KernelOpts | None = None,
    index: DType | None = None,
    balance: bool = True,
) -> UOp:
    """Lower ``SINK(STORE(PARAM, value), ...)`` to a kernel graph of loops and index arithmetic,
    in the kernel's ``index`` type (``index_type(ast)`` when not given). The stores of a kernel
    with several outputs (all of one shape: schedule/kernelize.py) share the loops, and the
    values they have in common are computed once. ``balance=False`` keeps a loop per output
    axis, as the optimiser's analyses expect (``output_index``)."""
    out, value = ast.src[-1].src
    if opts is not None and (online := online_opts(value)) is not None:
        opts = online
    nodes = toposort([value])
    reduced = [u for u in nodes if u.op is Ops.REDUCE_AXIS]
    # (a row kernel's reductions run once per row: a pass over the output each)
    rows = row_reductions(value)
    per_output = (
        len(rows) + 1
        if rows
        else max((sym_max(r.src[0].size) // max(sym_max(r.size), 1) for r in reduced), default=1)
    )
    alu = sum(1 for u in nodes if u.op in GroupOp.ALU)
    work = sym_max(value.size) * per_output * max(1, alu // ELEMENT_OPS)
    lowerer = Lowerer(opts, AxisCounter(index=index or index_type(ast)))
    parallel = work > PARALLEL_WORK
    idx, flat = output_index(value.shape, grid, opts, parallel, lowerer.axes, balance)
    if flat.op is Ops.SPECIAL and isinstance(value.size, UOp):
        # the launch has threads for the variables' largest values; those past the size this
        # launch has must return before they load or store: the elements after the output's
        # may be real data (Tensor.assign writes in place into the first rows of a tensor)
        flat = flat.replace(src=(value.size,))
        idx = unflatten(flat, value.shape)
    gate = UOp.const(dtypes.bool, True)
    writes = []
    for store in ast.src:
        out, value = store.src
        result = lowerer.lower(value, idx, gate)
        writes.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, flat)), result)))
    # attention's softmax-weighted sums run in one pass over the keys (codegen/online_softmax.py)
    if (sink := online_softmax(UOp(Ops.SINK, dtypes.void, tuple(writes)))) is None:
        return lower_kernel(ast, grid, None, index, balance)  # (upcast not the sums' own axis)
    return sink
