"""Index-set splitting: an innermost loop that tests its own counter runs as several loops.

A pad's copy (``x.pad(...)``: zeros at the borders, the source inside) and a concatenation's
(each part in its stretch of the output) test the output position against constants in every
trip of their innermost loop, and read their source at a clamped position so that the border
trips read memory too::

    for x < 100:  out[x] = (2 <= x && x < 98) ? f(in[min(max(x - 2, 0), 95)]) : 0

The clamp hides that the source is read consecutively, so gcc gathers it one element at a time
(a pad copy feeding a 5x5 depthwise convolution of PP-OCR's classifier: 79 us). Here the loop
is cut at the constants it is compared with, into loops over the stretches between them, each
with its counter offset by the stretch's start; in each the tests and the clamps simplify away
(the symbolic rules know a loop's bounds)::

    for x < 2:  out[x] = 0
    for x < 96: out[x + 2] = f(in[x])       (consecutive: vector loads and stores)
    for x < 2:  out[x + 98] = 0

The linearizer places such loops one after the other inside the loops around them (they are
*siblings*: no node uses two of them). Only kernels without reductions (elementwise kernels
with a loop per axis) are split, at up to ``MAX_CUTS`` constants, and only when a stretch of at
least ``MIN_STRETCH`` trips is left to run as vectors. A kernel reading an input transposed has
a short tile loop inside (``opt._transpose_tile``): each stretch gets a copy of it (GPT's
concatenation of the q, k and v gradients, two of them read transposed).
"""

from __future__ import annotations

from collections.abc import Callable

from fusegrad.uop.loops import AxisCounter, AxisKind
from fusegrad.uop.ops import Ops, UOp, substitute, toposort

#: the most constants one loop is cut at (a pad's two borders, a concatenation of up to 5)
MAX_CUTS = 4
#: the longest stretch must be this long for the cut to pay: shorter loops stay whole
MIN_STRETCH = 8


def _cuts(order: list[UOp], loop: UOp, trips: int) -> list[int]:
    """The constants strictly inside ``(0, trips)`` that ``loop`` is compared with: ``x < c``
    (true below ``c``) and ``c < x`` (true from ``c + 1``)."""
    found: set[int] = set()
    for u in order:
        if u.op is not Ops.CMPLT:
            continue
        a, b = u.src
        if a is loop and b.op is Ops.CONST:
            found.add(b.arg)
        elif b is loop and a.op is Ops.CONST:
            found.add(a.arg + 1)
    return sorted(c for c in found if isinstance(c, int) and 0 < c < trips)


def split_index_sets(sink: UOp, simplify: Callable[[UOp], UOp]) -> UOp:
    """``sink`` (a lowered kernel) with its innermost loop cut where its counter is compared
    with constants (module docstring); ``simplify`` rewrites each stretch's stores with the
    kernel rules. Anything else is returned as it is."""
    order = toposort([sink])
    loops = [u for u in order if u.op is Ops.RANGE]
    if not loops or any(u.op is Ops.REDUCE for u in order):
        return sink
    if any(r.arg.kind not in (AxisKind.GLOBAL, AxisKind.PARALLEL, AxisKind.UPCAST) for r in loops):
        return sink  # (lanes: the optimiser planned this loop nest for a reduction)
    tile = [r for r in loops if r.arg.kind is AxisKind.UPCAST]  # (a transposed read's rows)
    outer = [r for r in loops if r not in tile]
    if not outer:
        return sink
    inner = max(outer, key=lambda r: r.arg.axis)
    if inner.arg.kind is not AxisKind.GLOBAL or inner.src[0].op is not Ops.CONST:
        return sink  # the only loop (spread over the cores), or one of a variable's trips
    trips = inner.src[0].arg
    cuts = _cuts(order, inner, trips)
    if not cuts or len(cuts) > MAX_CUTS:
        return sink
    bounds = [0, *cuts, trips]
    if max(b - a for a, b in zip(bounds, bounds[1:])) < MIN_STRETCH:
        return sink
    axes = AxisCounter.after(order)
    stores: list[UOp] = []
    for start, end in zip(bounds, bounds[1:]):
        stretch = axes.range(end - start, AxisKind.GLOBAL)
        at = stretch + UOp.const(inner.dtype, start) if start else stretch
        fresh = {r: axes.range(r.src[0], AxisKind.UPCAST) for r in tile}  # each its own tile
        stores += [simplify(substitute(store, {inner: at, **fresh})) for store in sink.src]
    return sink.replace(src=tuple(stores))
