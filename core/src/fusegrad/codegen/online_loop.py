"""Linearising an online softmax group (codegen/online_softmax.py): one loop over the keys.

Per key: the score (its dot product inside), ``m_new = max(m, x)``, ``c = exp(g(m) - g(m_new))``,
then each sum becomes ``s * c + exp(x - g(m_new)) * f``. When the keys come in whole blocks
(``KEY_BLOCKS``), a trip takes a block: its scores as one vector of dot products (k's panels
hold a block's keys side by side), their max, one rescale of every sum, the weights as one
vector of exps, then each sum adds the block. ``codegen/linearize.py`` calls
``place_online_group`` at the group's max, with itself as ``lin``: its accumulators, loops
and placement (``place``, ``place_nested``, ``copy_loop``, ``close``) are reused.

A register is read where it is used (renderer/cstyle.py), so whatever reads the old running
max is placed before it is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fusegrad.codegen.online_softmax import loops_in, simplified
from fusegrad.codegen.transcendental import exp2_f32
from fusegrad.dtype import dtypes
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import Ops, UOp, substitute, toposort

_STRUCTURE = (Ops.SINK, Ops.REDUCE, Ops.RANGE)


@dataclass(frozen=True)
class OnlineGroup:
    """A running max, the sums that read it inside its loop, and the reductions its value is
    made of (the scores' dot product, run inside the loop for each key)."""

    max: UOp
    sums: tuple[UOp, ...]
    inner: tuple[UOp, ...]


def online_groups(reduces: list[UOp]) -> dict[UOp, OnlineGroup]:
    """For each REDUCE of an online group, its group (see ``online_softmax``)."""
    groups: dict[UOp, OnlineGroup] = {}
    for m in reduces:
        if m.arg is not Ops.MAX or len(m.src) != 2:
            continue
        sums = tuple(
            u for u in reduces if u.arg is Ops.ADD and u.src[1:] == m.src[1:] and m in toposort([u])
        )
        if not sums:
            continue
        inner = tuple(u for u in toposort([m.src[0]]) if u.op is Ops.REDUCE)
        group = OnlineGroup(m, sums, inner)
        for u in (m, *sums, *inner):
            groups[u] = group
    return groups


def _slot(acc: UOp, index: list[UOp], sizes: list[int]) -> UOp:
    """The accumulator element at ``index`` (loop variables) of an array of ``sizes``."""
    if not sizes:
        return acc
    flat = index[0]
    for part, size in zip(index[1:], sizes[1:]):
        flat = flat * size + part
    return UOp(Ops.INDEX, acc.dtype, (acc, flat))


def _identity(red: UOp) -> UOp:
    return UOp.const(red.dtype, 0 if red.arg is Ops.ADD else red.dtype.min)


def place_online_group(lin: Any, group: OnlineGroup) -> dict[UOp, Callable[[dict], UOp]]:
    """Emit ``group``'s accumulators and its one loop into linearizer ``lin``
    (codegen/linearize.py); return how to read each of its reductions after the loop."""
    if (block := _key_block(group)) > 1:
        return _place_blocked(lin, group, block)
    key = group.max.src[1]
    scope = set(lin.outer) | {key}
    regs: dict[UOp, tuple[UOp, list[UOp], list[int]]] = {}
    for red in (group.max, *group.sums):
        ups = [u for u in lin.upcast if u in lin.used[red]]
        regs[red] = _start(lin, red, ups)
    lin.place([key.src[0], key])
    scores = {r: _place_inner(lin, r, scope) for r in group.inner}
    x = substitute(group.max.src[0], scores)
    lin.place_tree(x)
    m_acc = regs[group.max][0]
    m_old = UOp(Ops.LOAD, group.max.dtype, (m_acc, key))
    m_new = m_old.alu(Ops.MAX, x)
    lin.place_tree(m_new)
    updates = []
    for red in group.sums:
        value = substitute(red.src[0], {**scores, group.max: m_new})
        rescale = _rescale(lin, red.src[0], group.max, m_old, m_new)
        # (a register is read where it is used: what reads m_old comes before m is stored)
        lin.place_tree(rescale)
        row_loops = set(regs[red][1])  # the work shared by the whole row first: the weight
        lin.place(
            [n for n in toposort([value]) if n.op not in _STRUCTURE and not row_loops & loops_in(n)]
        )
        updates.append((red, value, rescale))
    lin.place_tree(UOp(Ops.STORE, src=(m_acc, m_new)))
    for red, value, rescale in updates:
        _update(lin, red, value, rescale, regs[red], key)
    lin.close([key])
    end = UOp(Ops.END, src=(key,))
    results: dict[UOp, Callable[[dict], UOp]] = {red: _reader(red, *regs[red], end) for red in regs}
    for r in group.inner:  # (read only inside the loop, for the current key)
        results[r] = _fixed(scores[r])
    return results


def _start(lin: Any, red: UOp, ups: list[UOp]) -> tuple[UOp, list[UOp], list[int]]:
    """An accumulator for ``red`` (an array over its upcast loops), set to its identity."""
    sizes = [u.src[0].arg for u in ups]
    size = 1
    for s in sizes:
        size *= s
    acc = UOp(Ops.DEFINE_REG, red.dtype, (), (lin.reduces.index(red), size))
    start = _identity(red)
    lin.place([start, acc])
    loops = [lin.copy_loop(u, ("start", lin.reduces.index(red))) for u in ups]
    for loop in loops:
        lin.place([loop.src[0], loop])
    lin.place_tree(UOp(Ops.STORE, src=(_slot(acc, loops, sizes), start)))
    lin.close(loops)
    return acc, ups, sizes


def _place_inner(lin: Any, red: UOp, scope: set[UOp]) -> UOp:
    """A reduction inside the key loop (a score's dot product): its own accumulator and loops,
    placed for the current key; returns the read of its result."""
    acc = UOp(Ops.DEFINE_REG, red.dtype, (), (lin.reduces.index(red), 1))
    start = _identity(red)
    lin.place([start, acc])
    lin.place_tree(UOp(Ops.STORE, src=(acc, start)))
    loops = list(red.src[1:])
    value = red.src[0]
    fused = lin.fuse_mulacc and red.arg is Ops.ADD and value.op is Ops.MUL and value.dtype.is_float
    body = [u for u in toposort(list(value.src) if fused else [value]) if u not in lin.placed]
    lin.place_nested(loops, scope, body, lin.used)
    current = UOp(Ops.LOAD, red.dtype, (acc, loops[-1]))
    update = (
        UOp(Ops.MULACC, red.dtype, (*value.src, current)) if fused else current.alu(red.arg, value)
    )
    lin.place_tree(UOp(Ops.STORE, src=(acc, update)))
    lin.close(loops)
    result = UOp(Ops.LOAD, red.dtype, (acc, UOp(Ops.END, src=(loops[0],))))
    lin.place([result])
    return result


def _rescale(lin: Any, value: UOp, m: UOp, m_old: UOp, m_new: UOp) -> UOp:
    """``exp(g(m_old) - g(m_new))`` for the weight in ``value``: what a sum so far is multiplied
    by when the running max moves. Clamped at 1: a max of -inf shifts by g(-inf) = 0, and a sum
    of weights so far (all exp(-inf) = 0) must stay 0, not become 0 * inf."""
    shift, scale = _shift_of(value, m)
    moved = (substitute(shift, {m: m_old}) - substitute(shift, {m: m_new})) * scale
    moved = -((-moved).alu(Ops.MAX, UOp.const(moved.dtype, 0.0)))
    if not any(u.op is Ops.EXP2 for u in lin.order) and moved.dtype == dtypes.float32:
        return exp2_f32(moved, lin.fuse_mulacc)  # (the kernel's exps became arithmetic too)
    return UOp(Ops.EXP2, moved.dtype, (moved,))


def _shift_of(value: UOp, m: UOp) -> tuple[UOp, UOp]:
    """``(g(m), c)`` of the weight ``exp2((x - g(m)) * c)`` in a sum's ``value``, found by its
    argument: the exp2 itself may have become arithmetic (codegen/transcendental.py)."""
    for u in toposort([value]):
        if u.op is not Ops.MUL or len(u.src) != 2:
            continue
        shifted, scale = u.src if u.src[1].op is Ops.CONST else u.src[::-1]
        if scale.op is not Ops.CONST or shifted.op is not Ops.ADD:
            continue
        neg = shifted.src[1]
        if neg.op is Ops.NEG and m in toposort([neg]) and m not in toposort([shifted.src[0]]):
            return neg.src[0], scale
    raise NotImplementedError("an online softmax sum lost its weight's shape")


def _update(
    lin: Any,
    red: UOp,
    value: UOp,
    rescale: UOp,
    reg: tuple[UOp, list[UOp], list[int]],
    key: UOp,
) -> None:
    """``acc = acc * rescale + value`` for one sum, inside copies of its upcast loops."""
    acc, ups, sizes = reg
    number = lin.reduces.index(red)
    copies = {u: lin.copy_loop(u, ("body", number)) for u in ups}
    loops = [copies[u] for u in ups]
    for loop in loops:
        lin.place([loop.src[0], loop])
    value = substitute(value, copies)
    current = UOp(Ops.LOAD, red.dtype, (_slot(acc, loops, sizes), (loops or [key])[-1]))
    kept = current * rescale
    if lin.fuse_mulacc and value.op is Ops.MUL and value.dtype.is_float:
        update = UOp(Ops.MULACC, red.dtype, (*value.src, kept))
    else:
        update = kept + value
    lin.place_tree(UOp(Ops.STORE, src=(_slot(acc, loops, sizes), update)))
    lin.close(loops)


def _fixed(value: UOp) -> Callable[[dict], UOp]:
    """A reader that gives ``value`` whatever the copies (a value read only inside the loop)."""
    return lambda copies: value


def _reader(
    red: UOp, acc: UOp, ups: list[UOp], sizes: list[int], end: UOp
) -> Callable[[dict], UOp]:
    def result(copies: dict) -> UOp:
        return UOp(Ops.LOAD, red.dtype, (_slot(acc, [copies[u] for u in ups], sizes), end))

    return result


# ---- the group's loop by blocks of keys ------------------------------------------------------

#: keys per trip of a blocked group, the first that divides the keys: their scores are one
#: vector of dot products, their exps one vector of polynomials, and the sums are rescaled once
#: per block. 32 first: k's panels (schedule/layout.py) are 32 or 16 keys wide, and a block
#: that is a whole panel reads it without index divisions
KEY_BLOCKS = (32, 16)


def _key_block(group: OnlineGroup) -> int:
    """How many keys each trip of ``group``'s loop takes (1: one at a time)."""
    size = group.max.src[1].src[0]
    if size.op is not Ops.CONST or not group.inner:
        return 1
    return next((b for b in KEY_BLOCKS if size.arg % b == 0 and size.arg >= 2 * b), 1)


class _Block:
    """The loop over blocks of keys and the registers it adds (numbered after the kernel's)."""

    def __init__(self, lin: Any, group: OnlineGroup, size: int):
        self.lin, self.key, self.size = lin, group.max.src[1], size
        self.outer = lin.axes.range(self.key.src[0].arg // size, AxisKind.REDUCE)
        self.number = len(lin.reduces) + 8 * lin.reduces.index(group.max)

    def at(self, lane: UOp) -> UOp:
        """The key that ``lane`` of the block is."""
        return self.outer * self.size + lane

    def lane(self, kind: AxisKind = AxisKind.UPCAST) -> UOp:
        """A new loop over the block's keys (not placed yet: see ``open``)."""
        return self.lin.axes.range(self.size, kind)

    def open(self, loop: UOp, roots: list[UOp], inner: tuple[UOp, ...] = ()) -> None:
        """Open ``loop``, first placing what ``roots`` compute without it (nor the ``inner``
        loops it will hold): a value placed inside a loop is not seen after it."""
        loops = {loop, *inner}
        used = _used(UOp(Ops.SINK, src=tuple(roots)))
        self.lin.place(
            [u for u, around in used.items() if u.op not in _KEPT_IN_PLACE and not around & loops]
        )
        self.lin.place([loop.src[0], loop])

    def register(self, dtype: Any, size: int) -> UOp:
        acc = UOp(Ops.DEFINE_REG, dtype, (), (self.number, size))
        self.number += 1
        self.lin.place([acc])
        return acc


def _place_blocked(lin: Any, group: OnlineGroup, size: int) -> dict[UOp, Callable[[dict], UOp]]:
    """``place_online_group`` by blocks of ``size`` keys: the block's scores (dot products in
    vector lanes), their max, one rescale of every sum, the weights (vector exps), then each sum
    adds its block."""
    block = _Block(lin, group, size)
    regs = {
        red: _start(lin, red, [u for u in lin.upcast if u in lin.used[red]])
        for red in (group.max, *group.sums)
    }
    lin.place([block.outer.src[0], block.outer])
    dots = {red: _place_block_dots(block, red) for red in group.inner}

    def keyed(value: UOp, lane: UOp, m: UOp | None = None) -> UOp:
        """``value`` for key ``lane`` of the block (its dot products read from the lanes)."""
        new = {r: read(lane) for r, read in dots.items()}
        return substitute(
            value, {**new, block.key: block.at(lane), **({group.max: m} if m is not None else {})}
        )

    dtype = group.max.dtype
    xs, lane = block.register(dtype, size), block.lane(AxisKind.LANE)
    store = UOp(Ops.STORE, src=(UOp(Ops.INDEX, dtype, (xs, lane)), keyed(group.max.src[0], lane)))
    block.open(lane, [store])
    lin.place_tree(store)
    lin.close([lane])
    m_acc = regs[group.max][0]
    m_old = UOp(Ops.LOAD, dtype, (m_acc, block.outer))
    m_new = m_old.alu(Ops.MAX, _tree(block, xs, Ops.MAX))
    lin.place_tree(m_new)
    rescale = {red: _rescale(lin, red.src[0], group.max, m_old, m_new) for red in group.sums}
    for c in rescale.values():  # (m_old is read where it is used: before m is stored)
        lin.place_tree(c)
    lin.place_tree(UOp(Ops.STORE, src=(m_acc, m_new)))
    weights = _place_block_weights(block, group, regs, keyed, m_new)
    for red in group.sums:
        _add_block(block, red, regs[red], rescale[red], weights, keyed, m_new)
    lin.close([block.outer])
    end = UOp(Ops.END, src=(block.outer,))
    results: dict[UOp, Callable[[dict], UOp]] = {red: _reader(red, *regs[red], end) for red in regs}
    for r in group.inner:  # (read only inside the loop)
        results[r] = _fixed(m_new)
    return results


#: what ``_Block.open`` never moves ahead of a loop: loops, reductions, writes
_KEPT_IN_PLACE = (*_STRUCTURE, Ops.STORE, Ops.END)


def _used(root: UOp) -> dict[UOp, frozenset[UOp]]:
    """For each node of ``root`` (no REDUCE left in it), the loops it sits inside."""
    used: dict[UOp, frozenset[UOp]] = {}
    for u in toposort([root]):
        inner = frozenset().union(*(used[s] for s in u.src))
        used[u] = inner | {u} if u.op is Ops.RANGE else inner
    return used


#: independent sums per dot product: a sum of products waits for the last one's multiply-add
#: (4 cycles); two chains, over the even and the odd terms, keep twice as many in flight
DOT_CHAINS = 2


def _place_block_dots(block: _Block, red: UOp) -> Callable[[UOp], UOp]:
    """A reduction inside the key loop (a score's dot product) for every key of the block at
    once: arrays of accumulators (``DOT_CHAINS`` per key when its one loop splits evenly), the
    reduction's loops around a vector loop over the keys. Returns how to read key ``lane``'s."""
    lin, loops = block.lin, list(red.src[1:])
    size = loops[-1].src[0]
    chains = DOT_CHAINS if len(loops) == 1 and size.op is Ops.CONST and size.arg % 2 == 0 else 1
    acc = block.register(red.dtype, chains * block.size)
    start = _identity(red)
    init = lin.axes.range(chains * block.size, AxisKind.UPCAST)
    store = UOp(Ops.STORE, src=(UOp(Ops.INDEX, red.dtype, (acc, init)), start))
    block.open(init, [store])
    lin.place_tree(store)
    lin.close([init])
    lane = block.lin.axes.range(block.size, AxisKind.UPCAST)
    value, slot_at = red.src[0], lane
    if chains > 1:  # term d of the sum is term (half, chain) with d = half * chains + chain
        half = lin.axes.range(size.arg // chains, loops[0].arg.kind)
        chain = lin.axes.range(chains, AxisKind.UPCAST)
        value = substitute(value, {loops[0]: half * chains + chain})
        loops, slot_at = [half, chain], chain * block.size + lane
    # (simplified: a block that is a whole panel of k reads it without divisions)
    value = simplified(substitute(value, {block.key: block.at(lane)}))
    fused = lin.fuse_mulacc and red.arg is Ops.ADD and value.op is Ops.MUL and value.dtype.is_float
    body = [u for u in toposort(list(value.src) if fused else [value]) if u not in lin.placed]
    lin.place_nested([*loops, lane], set(lin.outer) | {block.outer}, body, _used(value))
    slot = UOp(Ops.INDEX, red.dtype, (acc, slot_at))
    current = UOp(Ops.LOAD, red.dtype, (slot, lane))
    update = (
        UOp(Ops.MULACC, red.dtype, (*value.src, current)) if fused else current.alu(red.arg, value)
    )
    lin.place_tree(UOp(Ops.STORE, src=(slot, update)))
    lin.close([*loops, lane])

    def read(at: UOp) -> UOp:
        parts = [
            UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, red.dtype, (acc, at + c * block.size)), at))
            for c in range(chains)
        ]
        out = parts[0]
        for part in parts[1:]:
            out = out.alu(red.arg, part)
        return out

    return read


def _split(value: UOp, ups: set[UOp]) -> tuple[list[UOp], list[UOp]]:
    """A sum's value as the factors shared by a row (free of its upcast loops: the softmax
    weight) and the factors of each element (v's)."""
    if value.op is Ops.MUL and ups & loops_in(value):
        shared: list[UOp] = []
        own: list[UOp] = []
        for s in value.src:
            a, b = _split(s, ups)
            shared, own = shared + a, own + b
        return shared, own
    return ([], [value]) if ups & loops_in(value) else ([value], [])


def _product(factors: list[UOp]) -> UOp | None:
    out = None
    for f in factors:
        out = f if out is None else out * f
    return out


def _place_block_weights(block, group, regs, keyed, m_new) -> dict[UOp, UOp]:
    """Each distinct shared factor of the sums (the softmax weight, for every sum one) for the
    block's keys, into an array: one vector loop of exps. Returns weight (in the lane of the
    loop made here) -> its array."""
    lin = block.lin
    arrays: dict[UOp, UOp] = {}
    for red in group.sums:
        shared, _ = _split(red.src[0], set(regs[red][1]))
        weight = _product(shared)
        if weight is None or weight in arrays:
            continue
        arrays[weight] = acc = UOp(Ops.DEFINE_REG, red.dtype, (), (block.number, block.size))
        block.number += 1
        lin.place([acc])
    lane = block.lane(AxisKind.LANE)  # (a vector loop of exps: selects keep it from unrolling)
    stores = [
        UOp(Ops.STORE, src=(UOp(Ops.INDEX, acc.dtype, (acc, lane)), keyed(weight, lane, m_new)))
        for weight, acc in arrays.items()
    ]
    block.open(lane, stores)
    for store in stores:
        lin.place_tree(store)
    lin.close([lane])
    return arrays


def _tree(block: _Block, array: UOp, op: Ops) -> UOp:
    """``array[0] op array[1] op ...`` over the block, as a tree: its depth, not its length, is
    the chain of dependent operations (a running max or sum one key at a time waits for each)."""
    index = block.outer.dtype
    reads = [
        UOp(Ops.LOAD, array.dtype, (UOp(Ops.INDEX, array.dtype, (array, UOp.const(index, i))),))
        for i in range(block.size)
    ]
    while len(reads) > 1:
        reads = [a.alu(op, b) for a, b in zip(reads[::2], reads[1::2])] + reads[len(reads) & ~1 :]
    return reads[0]


def _add_block(block, red, reg, rescale, weights, keyed, m_new) -> None:
    """``acc = acc * rescale``, then ``acc += weight[k] * own(k)`` for each key k of the block."""
    lin = block.lin
    acc, ups, sizes = reg
    number = lin.reduces.index(red)
    shared, own = _split(red.src[0], set(ups))
    if not ups and not own:  # (the softmax's denominator: the block's weights, summed as a tree)
        total = _tree(block, weights[_product(shared)], Ops.ADD)
        current = UOp(Ops.LOAD, red.dtype, (acc, block.outer))
        lin.place_tree(UOp(Ops.STORE, src=(acc, current * rescale + total)))
        return
    scaled = [lin.copy_loop(u, ("rescale", number)) for u in ups]
    for loop in scaled:
        lin.place([loop.src[0], loop])
    slot = _slot(acc, scaled, sizes)
    lin.place_tree(
        UOp(
            Ops.STORE,
            src=(slot, UOp(Ops.LOAD, red.dtype, (slot, (scaled or [block.outer])[-1])) * rescale),
        )
    )
    lin.close(scaled)
    lane = block.lane(AxisKind.REDUCE)
    weight = _product(shared)
    w = (
        None
        if weight is None
        else UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, red.dtype, (weights[weight], lane)), lane))
    )
    copies = {u: lin.copy_loop(u, ("body", number)) for u in ups}
    loops = [copies[u] for u in ups]
    mine = _product([keyed(substitute(f, copies), lane, m_new) for f in own])
    slot = _slot(acc, loops, sizes)
    current = UOp(Ops.LOAD, red.dtype, (slot, (loops or [lane])[-1]))
    if w is not None and mine is not None and lin.fuse_mulacc and red.dtype.is_float:
        update = UOp(Ops.MULACC, red.dtype, (w, mine, current))
    else:
        term = w if mine is None else mine if w is None else w * mine
        update = current + term
    store = UOp(Ops.STORE, src=(slot, update))
    block.open(lane, [store], tuple(loops))
    if w is not None:
        lin.place([w.src[0], w])
    for loop in loops:
        lin.place([loop.src[0], loop])
    lin.place_tree(store)
    lin.close([*loops, lane])
