"""Online softmax: a softmax-weighted sum (attention) as one pass over the keys.

The scheduler keeps attention's reductions in one kernel (schedule/online_softmax.py). Lowered,
each output element is ``sum_j exp(x_j - g(M)) * v_j * (1 / sum_j exp(x_j - g(M)))`` with
``M = max_j x_j`` and ``x_j`` a dot product of its own: three reductions over the keys, each
reading the scores, one reading the others. Run as written, that is a loop over the keys for
the max, then again for each sum, recomputing every score each time.

``online_softmax`` (after lowering) rewrites each such sum to run over the max's own loop and
read the max itself: ``REDUCE(ADD, exp(x_r - g(M)) * f_r, r)`` with ``M = REDUCE(MAX, x_r, r)``.
A sum reading a reduction over its own loop means nothing else, so this shape marks a group:
the max and its sums are one loop in which ``M`` is the running max. Factors that do not depend
on the key (the denominator, read by the weighted sum) move out of the sum first.

``codegen/online_loop.py`` (the linearizer) emits the group's loop. Per key: the score (its own
reduction inside), ``m_new = max(m, x)``, ``c = exp(g(m) - g(m_new))``, then each sum becomes
``s * c + exp(x - g(m_new)) * f``. That is exact arithmetic (each sum always equals the sum so
far shifted by the running max; the shift cancels in the final division), so the result is
today's up to float rounding; a row whose keys are all masked (-inf) is NaN, as before.
"""

from __future__ import annotations

from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import Ops, UOp, substitute, toposort
from fusegrad.uop.pattern import graph_rewrite
from fusegrad.uop.symbolic import SIMPLIFY

# ---- after lowering: sums of softmax weights run over the max's loop -------------------------


def online_softmax(sink: UOp) -> UOp | None:
    """``sink`` with each sum of a softmax weight rewritten to run over its max's loop (see the
    module's docstring); unchanged when it has none. None when a max sits inside an upcast loop
    (the row upcast was not the sums' own axis: lower without upcasts).

    Lowering spells each read's index through the views it came by, so one max (or one score)
    read from two places is two computations here that simplify to the same one: what depends
    on which loop, and which computations are equal, is decided on simplified copies
    (``simplified``, ``_canonical``), while the rewrite keeps the lowered nodes."""
    order = toposort([sink])
    maxes = [u for u in order if u.op is Ops.REDUCE and u.arg is Ops.MAX and len(u.src) == 2]
    if not maxes or not any(_nested(u, order) for u in maxes):
        return sink
    if any(r.arg.kind is AxisKind.UPCAST for m in maxes for r in loops_in(m)):
        return None  # (a group keeps one running max per row: see lower.online_opts)
    first: dict[UOp, UOp] = {}  # a max's canonical form -> the max its group runs at
    for m in maxes:
        first.setdefault(_canonical(m), m)
    done: dict[UOp, UOp] = {}
    for u in order:
        src = tuple(done[s] for s in u.src)
        new = u if src == u.src else u.replace(src=src)
        if new.op is Ops.REDUCE and new.arg is Ops.ADD and len(new.src) == 2:
            new = _online_sum(new, maxes, first) or new
        done[u] = new
    return done[sink]


def _nested(m: UOp, order: list[UOp]) -> bool:
    """Whether some sum reads the max ``m`` inside its loop (else there is nothing to do)."""
    return any(u.op is Ops.REDUCE and u is not m and m in toposort([u.src[0]]) for u in order)


def factors(u: UOp) -> list[UOp]:
    """The factors of a product tree."""
    return [f for s in u.src for f in factors(s)] if u.op is Ops.MUL else [u]


def loops_in(u: UOp) -> set[UOp]:
    """The loops ``u`` depends on (as it is spelt: simplify first to drop spurious ones)."""
    return {n for n in toposort([u]) if n.op is Ops.RANGE}


def simplified(u: UOp) -> UOp:
    """``u`` simplified: index math that merely spells a loop another way folds back to it."""
    return graph_rewrite(u, SIMPLIFY)


def _online_sum(red: UOp, maxes: list[UOp], first: dict[UOp, UOp]) -> UOp | None:
    """``red`` (a sum over loop r) as a sum over its max's loop, times the factors that do not
    depend on r, or None when its value is no softmax weight times work free of the max."""
    value, r = red.src
    parts = factors(value)
    free = {f: r not in loops_in(simplified(f)) for f in parts}
    inner = [f for f in parts if not free[f]]
    weights = [(f, m) for f in inner for m in maxes if m in toposort([f])]
    if len(weights) != 1 or (found := _weight_parts(*weights[0], r, first)) is None:
        return None
    weight, m = weights[0]
    shift, scale, group_max = found
    rest = [f for f in inner if f is not weight]
    if any(n.op is Ops.REDUCE for f in rest for n in toposort([f])):
        return None
    loop = group_max.src[1]
    body = UOp(Ops.EXP2, weight.dtype, (((group_max.src[0] + -shift) * scale),))
    for f in rest:
        body = body * substitute(f, {r: loop})
    out = UOp(Ops.REDUCE, red.dtype, (body, loop), Ops.ADD)
    for f in parts:
        out = out * simplified(f) if free[f] else out
    return out


def _weight_parts(
    weight: UOp, m: UOp, r: UOp, first: dict[UOp, UOp]
) -> tuple[UOp, UOp, UOp] | None:
    """``(g, c, M)`` when ``weight`` is ``exp2((x_r - g(m)) * c)`` with ``x_r`` the max's value
    at key r (the same computation, with loops of its own), ``g`` free of r and ``c`` a positive
    constant: ``M`` is the max the group runs at (``m`` or its equal), ``g`` reads it. Else None."""
    if weight.op is not Ops.EXP2 or weight.src[0].op is not Ops.MUL:
        return None
    shifted, scale = weight.src[0].src
    if shifted.op is Ops.CONST:
        shifted, scale = scale, shifted
    if scale.op is not Ops.CONST or not scale.arg > 0 or shifted.op is not Ops.ADD:
        return None
    x, neg = shifted.src
    group_max = first[_canonical(m)]
    if neg.op is not Ops.NEG or m not in toposort([neg]):
        return None
    shift = simplified(substitute(neg.src[0], {m: group_max}))
    loop = group_max.src[1]
    if r in loops_in(shift) or loop.src[0] is not r.src[0] or loop.arg.kind is not r.arg.kind:
        return None
    if _canonical(substitute(x, {r: loop})) is not _canonical(group_max.src[0]):
        return None
    return shift, scale, group_max


def _canonical(u: UOp) -> UOp:
    """``u`` simplified, its loops renumbered in the order a walk meets them: two computations
    that differ only in their loops' numbers and in how their index math was spelt (the views
    each reached the scores through) become one UOp."""
    u = simplified(u)
    loops = [n for n in toposort([u]) if n.op is Ops.RANGE]
    return substitute(
        u,
        {
            r: UOp(Ops.RANGE, r.dtype, r.src, r.arg._replace(axis=-1 - i))
            for i, r in enumerate(loops)
        },
    )


def has_online_softmax(value: UOp) -> bool:
    """Whether a kernel AST's ``value`` holds a max inside a sum: only the scheduler's online
    softmax kernels do (schedule/online_softmax.py), every other nesting is cut."""
    sums = [u for u in toposort([value]) if u.op is Ops.REDUCE_AXIS and u.arg[0] is Ops.ADD]
    return any(
        n.op is Ops.REDUCE_AXIS and n.arg[0] is Ops.MAX for s in sums for n in toposort([s.src[0]])
    )
