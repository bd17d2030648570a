"""Where attention may run as one kernel: a softmax-weighted sum whose reductions stay nested.

``softmax(x) @ v`` sums, over the keys j, ``exp(x_j - g(max_j x)) / sum_j exp(...) * v_j``,
where ``x`` (the scores ``q @ k.T``) is itself a reduction. The scheduler normally cuts a
reduction read inside another (it would run again for every outer element), so the scores,
their max and their sum each get a buffer: for attention a T x T matrix in memory.

A sum of ``exp(x_j - g(M)) * f_j`` with ``M = max_j x_j`` has an exact one-pass form (online
softmax): keep a running max ``m`` and rescale what was summed by ``exp(g(m_old) - g(m_new))``
whenever it grows. ``codegen/online_softmax.py`` lowers it that way: per output row, one loop
over the keys computes each score once (its own dot product inside), folds it into the running
max, the softmax's denominator and the weighted sums. Nothing runs twice, so nothing needs a
buffer. ``online_softmax_reads`` recognises the pattern on the tensor graph, where its
reductions and the views between them are kept in the kernel (schedule/kernelize.py).

Only loop devices (the CPU) do this: a grid thread per output element would redo the whole
key loop for each element of ``v``'s row, so grid devices keep today's kernels.
"""

from __future__ import annotations

from fusegrad.dtype import dtypes
from fusegrad.uop.ops import GroupOp, Ops, UOp, is_symbolic

#: the dtypes whose attention runs online (float16 math is float32 arithmetic on the CPU, with
#: its own rounding points: it keeps today's kernels)
ONLINE_DTYPES = (dtypes.float32, dtypes.float64)


def _below_views(u: UOp) -> UOp:
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u


def _axis_through(view: UOp, axis: int) -> int | None:
    """The axis of ``view``'s source that its ``axis`` reads, or None when the view makes it
    (an EXPAND from 1: the source does not depend on it) or scrambles it."""
    src = view.src[0].shape
    if view.op is Ops.PERMUTE:
        return view.arg[axis]
    if view.op is Ops.EXPAND:
        return axis if src[axis] == view.shape[axis] else None
    if view.op is Ops.RESHAPE:
        before = _prod(view.shape[:axis])
        for b, size in enumerate(src):
            if size == view.shape[axis] and _prod(src[:b]) == before:
                return b
    return None


def _prod(sizes: tuple) -> int:
    out = 1
    for s in sizes:
        out *= s
    return out


def softmax_weight(e: UOp) -> tuple[UOp, UOp] | None:
    """``(x, M)`` when ``e`` is ``exp(x - g(M))`` with ``M = max(x)`` over x's last axis (kept,
    as softmax's ``_shifted`` builds it: ``exp2((x - g(M)) * log2(e))``), else None. ``g`` is
    any work on M alone (softmax's guard turns a max of -inf into 0)."""
    if e.op is not Ops.EXP2 or (scaled := e.src[0]).op is not Ops.MUL:
        return None
    shifted, c = scaled.src if _below_views(scaled.src[1]).op is Ops.CONST else scaled.src[::-1]
    if _below_views(c).op is not Ops.CONST or shifted.op is not Ops.ADD:
        return None
    x, neg = shifted.src
    if neg.op is not Ops.NEG or neg.src[0].op is not Ops.EXPAND:
        return None
    reduces = _reduces_in(neg.src[0])
    if len(reduces) != 1 or (m := reduces[0]).arg != (Ops.MAX, (len(x.shape) - 1,)):
        return None
    return (x, m) if m.src[0] is x and x.dtype in ONLINE_DTYPES else None


def _reduces_in(u: UOp) -> list[UOp]:
    """The reductions ``u`` reads through elementwise work and views (not below a reduction)."""
    found, stack, seen = [], [u], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op is Ops.REDUCE_AXIS:
            found.append(n)
        else:
            stack.extend(n.src)
    return found


def online_softmax_reads(root: UOp, realize: set[UOp]) -> set[UOp]:
    """The reductions and EXPANDs that the kernel of ``root`` keeps when it is a
    softmax-weighted sum that runs online (see the module's docstring), else an empty set.

    ``root`` (through views) must be a sum over one axis j of a product (through views) in which
    exactly one factor depends on j through ``exp(x_j - g(max_j x))``; j must be x's last axis.
    Factors that do not depend on j may hold sums ``sum_j exp(...)`` of the same weight (the
    softmax's denominator). Kept: the max, those sums, the reductions that x is made of (the
    scores' dot product), and the views on the way, which would otherwise be cut for repeating
    work. A reduction the pattern does not name is cut as usual.
    """
    red = _below_views(root.src[0] if root.op is Ops.CONTIGUOUS else root)
    if red.op is not Ops.REDUCE_AXIS or red.arg[0] is not Ops.ADD or len(red.arg[1]) != 1:
        return set()
    if red.dtype not in ONLINE_DTYPES or is_symbolic(red.src[0].shape):
        return set()  # (sizes that are variables: a loop of unknown length, kept as today)
    found = _Found()
    if not _walk_product(red.src[0], red.arg[1][0], found, realize) or len(found.weights) != 1:
        return set()
    x, m = found.weights[0]
    if m in realize or any(s in realize for s in found.sums):
        return set()
    scores = [r for r in _reduces_in(x) if r not in realize and _plain_path(x, r)]
    return {m, *found.sums, *scores, *found.expands, *_mask_views(x, realize)}


def _mask_views(x: UOp, realize: set[UOp]) -> list[UOp]:
    """The EXPANDs in the scores' elementwise work (a causal mask broadcast over the heads):
    computed once per score here, next to a dot product over the head, a buffer of T x T
    elements would cost more than repeating them per head."""
    found, stack, seen = [], [x], set()
    while stack:
        n = stack.pop()
        if n in seen or n in realize or n.op in (Ops.PARAM, Ops.REDUCE_AXIS):
            continue
        seen.add(n)
        if n.op is Ops.EXPAND and not _reduces_in(n):
            found.append(n)
        stack.extend(n.src)
    return found


class _Found:
    """What ``_walk_product`` saw: the softmax weights, their denominators, the views."""

    def __init__(self) -> None:
        self.weights: list[tuple[UOp, UOp]] = []
        self.sums: list[UOp] = []
        self.expands: list[UOp] = []


def _walk_product(
    u: UOp,
    axis: int | None,
    found: _Found,
    realize: set[UOp],
    product: bool = True,
    walked: dict | None = None,
) -> bool:
    """Walk a product's factors with the summed axis (None: no longer depends on it). False
    when the summed axis reaches a softmax weight other than as a factor of the product, or
    reaches more than one (through two paths too).

    ``walked`` remembers each (node, axis, product) already walked, with the weights found
    under it: a graph whose nodes are each read twice (32 steps of a bit-by-bit search) has
    2**32 paths, and the walk without it never ended."""
    walked = {} if walked is None else walked
    key = (u, axis, product)
    if key in walked:
        ok, weights = walked[key]
        found.weights.extend(weights)  # (reached again: each path counts)
        return ok and len(found.weights) <= 1
    before = len(found.weights)
    ok = _walk_factor(u, axis, found, realize, product, walked)
    walked[key] = (ok, found.weights[before:])
    return ok and len(found.weights) <= 1


def _walk_factor(
    u: UOp, axis: int | None, found: _Found, realize: set[UOp], product: bool, walked: dict
) -> bool:
    """One step of ``_walk_product``: ``u`` itself, its sources through ``_walk_product``."""
    if u in realize or u.op in (Ops.PARAM, Ops.CONST):
        return True
    if axis is None:
        return _walk_constant(u, found, realize)
    if u.op is Ops.REDUCE_AXIS:
        return True  # (another reduction: cut as usual)
    if u.op in GroupOp.Movement:
        if u.op is Ops.EXPAND:
            found.expands.append(u)
        inner = _axis_through(u, axis)
        if inner is None and u.op is not Ops.EXPAND:  # (a reshape splitting the summed axis)
            return not _has_weight(u.src[0])  # (fine for a plain input: v)
        return _walk_product(u.src[0], inner, found, realize, product, walked)
    if (weight := softmax_weight(u)) is not None:
        if not product or axis != len(weight[0].shape) - 1:
            return False
        found.weights.append(weight)
        return _collect_views(u.src[0], weight[0], found)
    keep = product and u.op is Ops.MUL
    return all(_walk_product(s, axis, found, realize, keep, walked) for s in u.src)


def _has_weight(u: UOp) -> bool:
    """Whether ``u`` reads a softmax weight (not counting inside another reduction)."""
    stack, seen = [u], set()
    while stack:
        n = stack.pop()
        if n in seen or n.op in (Ops.PARAM, Ops.CONST, Ops.BUFFER, Ops.REDUCE_AXIS):
            continue
        seen.add(n)
        if softmax_weight(n) is not None:
            return True
        stack.extend(n.src)
    return False


def _collect_views(u: UOp, stop: UOp, found: _Found) -> bool:
    """The EXPANDs between a weight and its max (the broadcast of ``g(M)``), stopping at x."""
    stack, seen = [u], set()
    while stack:
        n = stack.pop()
        if n in seen or n is stop or n.op is Ops.REDUCE_AXIS:
            continue
        seen.add(n)
        if n.op is Ops.EXPAND:
            found.expands.append(n)
        stack.extend(n.src)
    return True


def _walk_constant(u: UOp, found: _Found, realize: set[UOp]) -> bool:
    """A factor that does not depend on the summed axis: its sums of a softmax weight over that
    weight's last axis (the denominator) are kept, with the views to them."""
    stack, seen = [u], set()
    while stack:
        n = stack.pop()
        if n in seen or n in realize or n.op in (Ops.PARAM, Ops.CONST):
            continue
        seen.add(n)
        if n.op is Ops.REDUCE_AXIS:
            weight = softmax_weight(n.src[0])
            if weight is not None and n.arg == (Ops.ADD, (len(n.src[0].shape) - 1,)):
                found.sums.append(n)
                _collect_views(n.src[0].src[0], weight[0], found)
            continue  # (any other reduction is cut as usual)
        if n.op is Ops.EXPAND:
            found.expands.append(n)
        stack.extend(n.src)
    return True


def _plain_path(x: UOp, reduce: UOp) -> bool:
    """Whether ``reduce`` reaches ``x`` through elementwise work and reshapes only: then it is
    computed once per key (the scores' dot product), not once per repeated element."""
    stack, seen = [x], set()
    while stack:
        n = stack.pop()
        if n is reduce:
            return True
        if n in seen or n.op is Ops.REDUCE_AXIS:
            continue
        seen.add(n)
        if n.op in GroupOp.Movement and n.op is not Ops.RESHAPE:
            continue
        stack.extend(n.src)
    return False
