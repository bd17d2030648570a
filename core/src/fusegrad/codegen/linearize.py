"""Linearisation: a kernel graph -> the ordered list of backend-contract ops a renderer walks.

A kernel has at most one output loop (the RANGE of kind "global", absent on a grid) and, inside
it, one loop per REDUCE. Each node goes to the innermost loop it depends on, as early as its
sources allow, so loop-invariant work is hoisted. A REDUCE becomes an accumulator:

    acc = identity; for r: acc = acc <op> value(r); ... LOAD(acc) where the REDUCE was
"""

from __future__ import annotations

from fusegrad.uop.ops import Ops, UOp, toposort

IDENTITY = {Ops.ADD: 0, Ops.MAX: None}  # None: the dtype's smallest value


def _ranges_used(order: list[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For each node, the loops it must sit inside (a REDUCE closes its own)."""
    used: dict[UOp, frozenset[UOp]] = {}
    for u in order:
        inner = frozenset().union(*(used[s] for s in u.src))
        if u.op is Ops.RANGE:
            inner = inner | {u}
        elif u.op is Ops.REDUCE:
            inner = inner - set(u.src[1:])
        used[u] = inner
    return used


def _after_reduce(order: list[UOp]) -> set[UOp]:
    """Nodes that need the result of some REDUCE."""
    after: set[UOp] = set()
    for u in order:
        if u.op is Ops.REDUCE or any(s in after for s in u.src):
            after.add(u)
    return after


def linearize(sink: UOp) -> list[UOp]:
    """Order a kernel graph into a program: PARAMs and constants, loops, accumulators, stores."""
    order = toposort([sink])
    used = _ranges_used(order)
    after = _after_reduce(order)
    reduces = [u for u in order if u.op is Ops.REDUCE]
    reduce_ranges = {r for red in reduces for r in red.src[1:]}
    outer = [u for u in order if u.op is Ops.RANGE and u not in reduce_ranges]
    if any(used[red] & reduce_ranges for red in reduces):
        raise NotImplementedError("a REDUCE inside another REDUCE must be cut by the scheduler")

    program: list[UOp] = []
    placed: set[UOp] = set()

    def place(nodes: list[UOp]) -> None:
        for u in nodes:
            if u not in placed and u.op not in (Ops.SINK, Ops.REDUCE):
                placed.add(u)
                program.append(u)

    def loop_free(u: UOp) -> bool:
        return not (used[u] & reduce_ranges) and u not in after

    # 1. everything outside all loops, then the output loop and what depends only on it
    place([u for u in order if not used[u] and u not in after and u.op is not Ops.RANGE])
    for rng in outer:
        place([rng])
        place([u for u in order if u.op is not Ops.RANGE and loop_free(u) and used[u] <= set(outer)])
    # 2. one accumulator and loop per REDUCE
    reduced: dict[UOp, UOp] = {}
    for number, red in enumerate(reduces):
        reduced[red] = _place_reduce(red, number, order, used, place, program)
    # 3. what needs the reductions, the stores, then close the output loop
    for u in order:
        if u in after and u.op is not Ops.REDUCE and u.op is not Ops.SINK:
            new_src = tuple(reduced.get(s, s) for s in u.src)
            node = u if new_src == u.src else u.replace(src=new_src)
            reduced[u] = node
            place([node])
    place([UOp(Ops.END, src=(r,)) for r in reversed(outer)])
    return program


def _place_reduce(red: UOp, number: int, order: list[UOp], used, place, program) -> UOp:
    """Emit the accumulator, loops and update of one REDUCE; return the LOAD that replaces it."""
    value, ranges = red.src[0], red.src[1:]
    identity = IDENTITY[red.arg]
    acc = UOp(Ops.DEFINE_REG, red.dtype, (), (number, 1))
    start = UOp.const(red.dtype, red.dtype.min if identity is None else identity)
    place([start, acc, UOp(Ops.STORE, src=(acc, start))])
    body = set(toposort([value]))
    for rng in ranges:
        place([rng.src[0], rng])
        place([u for u in order if u in body and rng in used[u] and used[u] <= used[rng] | {rng}])
    place([u for u in order if u in body])
    current = UOp(Ops.LOAD, red.dtype, (acc, ranges[-1]))
    update = current.alu(red.arg, value)
    place([current, update, UOp(Ops.STORE, src=(acc, update))])
    ends = [UOp(Ops.END, src=(r,)) for r in reversed(ranges)]
    place(ends)
    result = UOp(Ops.LOAD, red.dtype, (acc, ends[-1]))
    place([result])
    return result
