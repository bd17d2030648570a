"""Linearisation: a kernel graph -> the ordered list of backend-contract ops a renderer walks.

Loops nest in this order: the output loops (kinds PARALLEL/GLOBAL), then for each REDUCE
its reduce loop with the upcast loops inside it, and after the reductions a second copy of the
upcast loops for what uses their results. Each node goes to the innermost loop it depends on,
as early as its sources allow, so loop-invariant work is hoisted. A REDUCE becomes an
accumulator (an array of them when it is upcast)::

    acc[u] = identity;  for r: for u: acc[u] = acc[u] <op> value(r, u);  ... for u: use acc[u]

The copies of the upcast loops are new loops, numbered after the kernel's own. An elementwise
kernel whose innermost loop was split into stretches (codegen/split.py) has *sibling* loops,
which no store is inside all of: they run one after the other inside the loops around them.
Last, each loop gets its compiler hint (codegen/hints.py).
"""

from __future__ import annotations

from collections.abc import Callable

from fusegrad.codegen.hints import hint_loops, reads_consecutively
from fusegrad.codegen.online_loop import online_groups, place_online_group
from fusegrad.helpers import prod
from fusegrad.uop.loops import AxisCounter, AxisKind
from fusegrad.uop.ops import Ops, UOp, substitute, toposort

IDENTITY = {Ops.ADD: 0, Ops.MAX: None}  # None: the dtype's smallest value
_STRUCTURE = (Ops.SINK, Ops.REDUCE, Ops.RANGE)


def ranges_used(order: list[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For each node, the loops it must sit inside (a REDUCE closes its own)."""
    used: dict[UOp, frozenset[UOp]] = {}
    for u in order:
        inner = frozenset().union(*(used[s] for s in u.src))
        if u.op is Ops.RANGE:
            inner = inner | {u}
        elif u.op is Ops.REDUCE:
            inner = inner - set(u.src[1:])
        elif u.op is Ops.END:
            inner = inner - {u.src[0]}
        used[u] = inner
    return used


def _index(parts: list[UOp], sizes: list[int]) -> UOp:
    """The flat position of ``parts`` (loop variables or constants) in an array of ``sizes``."""
    out = parts[0]
    for part, size in zip(parts[1:], sizes[1:]):
        out = out * size + part
    return out


class Linearizer:
    """Places the nodes of one kernel graph into ``program``."""

    def __init__(self, sink: UOp, fuse_mulacc: bool = False):
        self.sink = sink
        self.fuse_mulacc = fuse_mulacc
        self.order = toposort([sink])
        self.used = ranges_used(self.order)
        self.reduces = [u for u in self.order if u.op is Ops.REDUCE]
        #: for each REDUCE, the REDUCEs its value reads (their results, not their loops)
        self.needs = {red: set(toposort([red.src[0]])) & set(self.reduces) for red in self.reduces}
        self.reduce_loops = {r for red in self.reduces for r in red.src[1:]}
        loops = sorted(
            (u for u in self.order if u.op is Ops.RANGE and u not in self.reduce_loops),
            key=lambda r: r.arg[0],
        )
        self.outer = [r for r in loops if r.arg.kind is not AxisKind.UPCAST]
        self.upcast = [r for r in loops if r.arg.kind is AxisKind.UPCAST]
        self.axes = AxisCounter.after(self.order)
        self.copies: dict[tuple[UOp, object], UOp] = {}
        self.opened: set[UOp] = set()  # upcast loops a reduction has opened (and closed)
        self.after = self._after_reduce()
        self.program: list[UOp] = []
        self.placed: set[UOp] = set()
        #: a running max and the sums reading it inside its loop (codegen/online_softmax.py)
        self.online = online_groups(self.reduces)
        plain = [red for red in self.reduces if red not in self.online]
        if any(self.used[red] & self.reduce_loops for red in plain):
            raise NotImplementedError("a REDUCE inside another REDUCE must be cut by the scheduler")

    def copy_loop(self, r: UOp, copy: object) -> UOp:
        """Copy ``copy`` of loop ``r`` (("start", n): where reduction n's accumulators start,
        ("body", n): reduction n's own upcast loops, 2: after the reductions): a loop of the same
        size and kind, made once."""
        if (loop := self.copies.get((r, copy))) is None:
            loop = self.copies[(r, copy)] = self.axes.range(r.src[0], r.arg.kind)
        return loop

    def _after_reduce(self) -> set[UOp]:
        after: set[UOp] = set()
        for u in self.order:
            if u.op is Ops.REDUCE or any(s in after for s in u.src):
                after.add(u)
        return after

    def place(self, nodes: list[UOp]) -> None:
        for u in nodes:
            if u not in self.placed and u.op not in (Ops.SINK, Ops.REDUCE):
                self.placed.add(u)
                self.program.append(u)

    def place_nested(
        self, loops: list[UOp], base: set[UOp], nodes: list[UOp], used: dict[UOp, frozenset[UOp]]
    ) -> None:
        """Open ``loops`` one inside the other; each level gets the nodes that need no deeper
        loop."""
        scope = set(base)
        todo = [u for u in nodes if u.op not in _STRUCTURE]
        self.place([u for u in todo if used[u] <= scope])
        for loop in loops:
            scope.add(loop)
            self.place([loop.src[0], loop])
            self.place([u for u in todo if used[u] <= scope])

    def place_tree(self, root: UOp) -> None:
        """Place ``root`` and whatever it needs that is not placed yet (all in the current
        scope)."""
        self.place([u for u in toposort([root]) if u.op not in _STRUCTURE])

    def close(self, loops: list[UOp]) -> None:
        self.place([UOp(Ops.END, src=(r,)) for r in reversed(loops)])

    def linearize(self) -> list[UOp]:
        stores = list(self.sink.src)
        siblings = [r for r in self.outer if not all(r in self.used[s] for s in stores)]
        if siblings and not self.reduces:
            groups = self.sibling_groups(siblings)
            if groups is not None:
                return self.linearize_siblings(groups)
        before = [
            u for u in self.order if u not in self.after and not (self.used[u] & set(self.upcast))
        ]
        self.place_nested(
            self.outer,
            set(),
            [u for u in before if not (self.used[u] & self.reduce_loops)],
            self.used,
        )
        results: dict[UOp, Callable[[dict[UOp, UOp]], UOp]] = {}
        for number, red in enumerate(self.reduces):
            if red in self.online:  # the whole group at its max, in one loop
                if red is self.online[red].max:
                    results.update(place_online_group(self, self.online[red]))
                continue
            # a reduction over another's result (a row kernel's variance about its mean) reads
            # that result where it is: the earlier reduction's accumulator
            earlier = {r: results[r]({}) for r in results if r in self.needs[red]}
            red = substitute(red, earlier) if earlier else red
            results[self.reduces[number]] = self.place_reduce(red, number)
        self.place_rest(results)
        self.close(self.outer)
        return self.program

    def sibling_groups(self, siblings: list[UOp]) -> list[list[UOp]] | None:
        """Each sibling loop with the tile loops inside it (a split kernel's stretches each have
        their own copy, codegen/split.py); None when a node needs two groups' loops."""
        nodes = [u for u in self.order if u.op is not Ops.SINK]  # (the sink needs every loop)
        groups = [
            [loop, *(r for r in self.upcast if any({loop, r} <= self.used[u] for u in nodes))]
            for loop in siblings
        ]
        claimed = [set(group) for group in groups]
        if not set(self.upcast) <= set().union(*claimed):
            return None  # a tile loop in no stretch
        if any(sum(bool(self.used[u] & c) for c in claimed) > 1 for u in nodes):
            return None  # a node (or a tile loop) in two
        return groups

    def linearize_siblings(self, groups: list[list[UOp]]) -> list[UOp]:
        """A kernel whose innermost loop was split into stretches (codegen/split.py: no
        reductions): the loops every store is inside, then each stretch's loop (and its tile
        loops) in turn inside them, opened and closed on its own."""
        inner = {r for group in groups for r in group}
        common = [r for r in self.outer if r not in inner]
        nodes = [u for u in self.order if u.op not in _STRUCTURE]
        self.place_nested(common, set(), [u for u in nodes if not self.used[u] & inner], self.used)
        for group in groups:
            stretch, tile = group[0], group[1:]
            body = [u for u in nodes if self.used[u] & set(group)]
            if tile and reads_consecutively(stretch, body):  # (a stretch copied in order)
                group = [*tile, stretch]  # innermost: as vectors along the stretch
            self.place_nested(group, set(common), body, self.used)
            self.close(group)
        self.close(common)
        return self.program

    def place_reduce(self, red: UOp, number: int) -> Callable[[dict[UOp, UOp]], UOp]:
        """Emit the accumulator and loops of one REDUCE; return how to read its result."""
        if red not in self.used:  # (a REDUCE reading an earlier one's accumulator)
            self.used = {**self.used, **ranges_used(toposort([red]))}
        value = red.src[0]
        loops = [r for r in red.src[1:] if r.arg.kind is not AxisKind.LANE]
        lanes = [r for r in red.src[1:] if r.arg.kind is AxisKind.LANE]
        ups = [u for u in self.upcast if u in self.used[red]]
        kernel_ups, used = ups, self.used
        if self.opened & set(ups):  # an earlier reduction closed these loops: this one gets copies
            fresh = {u: self.copy_loop(u, ("body", number)) for u in ups}
            value = substitute(value, fresh)
            used = {**used, **ranges_used(toposort([value]))}
            ups = [fresh[u] for u in ups]
        self.opened.update(ups)
        sizes = [u.src[0].arg for u in ups + lanes]
        acc = UOp(Ops.DEFINE_REG, red.dtype, (), (number, prod(sizes)))
        start = UOp.const(
            red.dtype, red.dtype.min if IDENTITY[red.arg] is None else IDENTITY[red.arg]
        )

        def slot(index: list[UOp]) -> UOp:
            return UOp(Ops.INDEX, red.dtype, (acc, _index(index, sizes))) if sizes else acc

        self.place([start, acc])
        init_loops = [self.copy_loop(u, ("start", number)) for u in ups + lanes]
        self.place_nested(init_loops, set(self.outer), [], used)
        self.place_tree(UOp(Ops.STORE, src=(slot(init_loops), start)))
        self.close(init_loops)
        # acc + a*b rounds once as MULACC where the target has it (a fused multiply-add: what
        # BLAS libraries do in a dot product, and twice the arithmetic per instruction)
        fused = (
            self.fuse_mulacc and red.arg is Ops.ADD and value.op is Ops.MUL and value.dtype.is_float
        )
        body = [u for u in toposort(list(value.src) if fused else [value]) if u not in self.placed]
        self.place_nested([*loops, *ups, *lanes], set(self.outer), body, used)
        inner = ([*loops, *lanes] or [acc])[-1]
        current = UOp(Ops.LOAD, red.dtype, (slot(ups + lanes), inner))
        update = (
            UOp(Ops.MULACC, red.dtype, (*value.src, current))
            if fused
            else current.alu(red.arg, value)
        )
        self.place_tree(UOp(Ops.STORE, src=(slot(ups + lanes), update)))
        self.close([*loops, *ups, *lanes])
        end = UOp(Ops.END, src=(([*loops, *lanes])[0],)) if loops or lanes else current

        def result(copies: dict[UOp, UOp]) -> UOp:
            """The accumulator at the copies of the upcast loops, its lanes combined."""
            reads = (
                [
                    UOp(
                        Ops.LOAD,
                        red.dtype,
                        (
                            slot([copies[u] for u in kernel_ups] + [UOp.const(lanes[0].dtype, i)]),
                            end,
                        ),
                    )
                    for i in range(lanes[0].src[0].arg)
                ]
                if lanes
                else [UOp(Ops.LOAD, red.dtype, (slot([copies[u] for u in kernel_ups]), end))]
            )
            while len(reads) > 1:  # pairwise: a chain of log2(lanes) ops, not one of lanes - 1
                pairs = [a.alu(red.arg, b) for a, b in zip(reads[::2], reads[1::2])]
                reads = pairs + reads[len(pairs) * 2 :]
            return reads[0]

        return result

    def place_rest(self, results: dict[UOp, Callable[[dict[UOp, UOp]], UOp]]) -> None:
        """What needs the reductions or the upcast loops: in a copy of the upcast loops."""
        copies = {u: self.copy_loop(u, 2) if self.reduces else u for u in self.upcast}
        done: dict[UOp, UOp] = {}
        upcast = set(self.upcast)
        for u in self.order:
            if u in copies:
                done[u] = copies[u]
            elif u.op is Ops.REDUCE:
                done[u] = results[u](copies)
            elif (u in self.placed and not self.used[u] & upcast) or u.op is Ops.SINK:
                done[u] = u
            else:
                new_src = tuple(done[s] for s in u.src)
                done[u] = u if new_src == u.src else u.replace(src=new_src)
        roots = [done[s] for s in self.sink.src]
        order = toposort(roots)
        used = ranges_used(order)
        loops = [copies[u] for u in self.upcast]
        self.place_nested(loops, set(self.outer), order, used)
        self.close(loops)


def linearize(sink: UOp, fuse_mulacc: bool = False, roomy: bool = False) -> list[UOp]:
    """Order a kernel graph into a program: PARAMs and constants, loops, accumulators, stores,
    each loop with its compiler hint. With ``fuse_mulacc`` a float sum of products accumulates
    with MULACC (one rounding)."""
    return hint_loops(Linearizer(sink, fuse_mulacc).linearize(), roomy)
