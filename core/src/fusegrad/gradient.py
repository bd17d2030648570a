"""Autograd as a rewrite of the UOp graph.

``DERIVATIVES`` holds one rule per primitive op: given the node ``ret`` and the gradient ``g``
flowing into it (same shape as ``ret``), it returns one gradient per source (None where the
source gets none). ``compute_gradient`` walks the graph from the output back to the targets,
summing the gradients of nodes used more than once. Every Tensor method is built from these
primitives, so each has a derivative without a rule of its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fusegrad.dtype import dtypes
from fusegrad.uop.ops import GroupOp, Ops, UOp, broadcast_scalar, toposort
from fusegrad.uop.pattern import PatternMatcher, UPat


def cosine(x: UOp) -> UOp:
    """cos(x) as 1 - 2 sin(x/2)**2: halving is exact, so this is as accurate as the sine at any
    magnitude (within ~3e-7 of the exact value in float32). The sine of pi/2 - x rounds pi/2 - x
    first, an error that grows with x: 1e-5 at x = 1000, any value in [-1, 1] past 1e8."""
    half = (x * full_like(x, 0.5)).alu(Ops.SIN)
    return full_like(x, 1.0) - full_like(x, 2.0) * half * half


def full_like(u: UOp, value: float) -> UOp:
    """A constant with the shape and dtype of ``u``."""
    return broadcast_scalar(value, u.dtype, u.shape)


def expand_to(g: UOp, shape: tuple[int, ...]) -> UOp:
    return g if g.shape == shape else UOp(Ops.EXPAND, g.dtype, (g,), shape)


def sum_to(g: UOp, shape: tuple[int, ...]) -> UOp:
    """Sum ``g`` over the axes where ``shape`` has size 1 and ``g`` does not; half floats
    accumulate in float32, as ``Tensor.sum`` does (a matmul's gradient is such a sum)."""
    axes = tuple(i for i, (a, b) in enumerate(zip(g.shape, shape)) if a != b)
    if not axes:
        return g
    acc = dtypes.float32 if g.dtype in (dtypes.float16, dtypes.bfloat16) else g.dtype
    return UOp(Ops.REDUCE_AXIS, acc, (g.cast(acc),), (Ops.ADD, axes)).cast(g.dtype)


def max_grad(ret: UOp, g: UOp) -> tuple[UOp, UOp]:
    """d max(a,b): all of g to the larger input, half to each on a tie."""
    a, b = ret.src
    a_wins = b.lt(a).where(full_like(g, 1.0), a.ne(b).where(full_like(g, 0.0), full_like(g, 0.5)))
    return g * a_wins, g * (full_like(g, 1.0) - a_wins)


def reduce_max_grad(ret: UOp, g: UOp) -> tuple[UOp]:
    """d max over axes: shared equally among the elements equal to the maximum."""
    x = ret.src[0]
    hit = x.ne(expand_to(ret, x.shape)).where(full_like(x, 0.0), full_like(x, 1.0))
    count = UOp(Ops.REDUCE_AXIS, x.dtype, (hit,), (Ops.ADD, ret.arg[1]))
    return (hit * expand_to(g * count.alu(Ops.RECIP), x.shape),)


def inverse_permute(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(order)), key=lambda i: order[i]))


def _move(op: Ops, g: UOp, arg) -> UOp:
    return UOp(op, g.dtype, (g,), arg)


LN2 = math.log(2)

DERIVATIVES = PatternMatcher(
    [
        (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx, ctx)),  # d(a+b) = 1, 1
        (
            UPat(Ops.MUL, name="ret"),
            lambda ctx, ret: (ctx * ret.src[1], ctx * ret.src[0]),
        ),  # d(ab) = b, a
        (
            UPat(Ops.MULACC, name="ret"),
            lambda ctx, ret: (ctx * ret.src[1], ctx * ret.src[0], ctx),
        ),  # d(ab + c) = b, a, 1
        (UPat(Ops.NEG, name="ret"), lambda ctx, ret: (-ctx,)),  # d(-x) = -1
        (UPat(Ops.RECIP, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),  # d(1/x) = -1/x²
        (
            UPat(Ops.SQRT, name="ret"),
            lambda ctx, ret: (ctx * (ret * full_like(ret, 2)).alu(Ops.RECIP),),
        ),  # d√x = 1/(2√x)
        (
            UPat(Ops.EXP2, name="ret"),
            lambda ctx, ret: (ctx * ret * full_like(ret, LN2),),
        ),  # d2^x = 2^x ln2
        (
            UPat(Ops.LOG2, name="ret"),
            lambda ctx, ret: (ctx * (ret.src[0] * full_like(ret, LN2)).alu(Ops.RECIP),),
        ),  # dlog2 x = 1/(x ln2)
        (
            UPat(Ops.SIN, name="ret"),
            lambda ctx, ret: (ctx * cosine(ret.src[0]),),
        ),  # dsin = cos
        (UPat(Ops.MAX, name="ret"), lambda ctx, ret: max_grad(ret, ctx)),
        (
            UPat(Ops.WHERE, name="ret"),  # d(c?a:b)
            lambda ctx, ret: (
                None,
                ret.src[0].where(ctx, full_like(ctx, 0)),
                ret.src[0].where(full_like(ctx, 0), ctx),
            ),
        ),
        (
            UPat(
                GroupOp.Comparison
                | {Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV, Ops.MOD},
                name="ret",
            ),
            lambda ctx, ret: (None,) * len(ret.src),
        ),  # piecewise constant
        (
            UPat(Ops.CAST, name="ret"),
            lambda ctx, ret: (ctx.cast(ret.src[0].dtype) if ret.src[0].dtype.is_float else None,),
        ),
        (UPat((Ops.BITCAST, Ops.DETACH), name="ret"), lambda ctx, ret: (None,)),
        (UPat(Ops.CONTIGUOUS, name="ret"), lambda ctx, ret: (ctx,)),
        (UPat(Ops.SHARD, name="ret"), lambda ctx, ret: (ctx,)),  # placement keeps values
        (
            UPat(Ops.CUSTOM_GRAD, name="ret"),  # the op's own rule
            lambda ctx, ret: (None, *ret.arg[0](ctx, ret.src[1:], ret.arg[1])),
        ),
        (UPat(Ops.COPY, name="ret"), lambda ctx, ret: (_move(Ops.COPY, ctx, ret.arg[::-1]),)),
        (
            UPat(Ops.REDUCE_AXIS, name="ret"),
            lambda ctx, ret: (
                (expand_to(ctx, ret.src[0].shape),)
                if ret.arg[0] is Ops.ADD
                else reduce_max_grad(ret, ctx)
            ),
        ),
        (
            UPat(Ops.RESHAPE, name="ret"),
            lambda ctx, ret: (_move(Ops.RESHAPE, ctx, ret.src[0].shape),),
        ),
        (
            UPat(Ops.PERMUTE, name="ret"),
            lambda ctx, ret: (_move(Ops.PERMUTE, ctx, inverse_permute(ret.arg)),),
        ),
        (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: (sum_to(ctx, ret.src[0].shape),)),
        (
            UPat(Ops.PAD, name="ret"),
            lambda ctx, ret: (
                _move(
                    Ops.SHRINK,
                    ctx,
                    tuple((b, b + s) for (b, _), s in zip(ret.arg, ret.src[0].shape)),
                ),
            ),
        ),
        (
            UPat(Ops.SHRINK, name="ret"),
            lambda ctx, ret: (
                _move(
                    Ops.PAD, ctx, tuple((b, s - e) for (b, e), s in zip(ret.arg, ret.src[0].shape))
                ),
            ),
        ),
        (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (_move(Ops.FLIP, ctx, ret.arg),)),
    ]
)


def _reaching(order: list[UOp], targets: set[UOp]) -> set[UOp]:
    """The nodes from which some target can be reached (gradients flow only through them)."""
    reach: set[UOp] = set()
    for u in order:
        if u in targets or (u.op is not Ops.DETACH and any(s in reach for s in u.src)):
            reach.add(u)
    return reach


def expand_realized(root: UOp, targets: set[UOp], realized: Mapping[UOp, UOp]) -> UOp:
    """Put back the graph of each realized tensor in ``root`` whose graph reaches a target.

    A tensor realized along the way (``y.numpy()``) is a plain buffer to graphs built on it
    later; ``realized`` maps such buffers to the graphs that computed them. Targets themselves
    (the parameters) are never expanded, so an optimizer's update graph is not differentiated.
    """
    done: dict[UOp, UOp] = {}
    for u in toposort([root]):
        lazy = realized.get(u) if u not in targets else None
        if lazy is not None and any(n in targets for n in toposort([lazy])):
            done[u] = expand_realized(lazy, targets, realized)
        elif u.src:
            new_src = tuple(done[s] for s in u.src)
            done[u] = u if new_src == u.src else u.replace(src=new_src)
        else:
            done[u] = u
    return done[root]


def compute_gradient(
    root: UOp, root_grad: UOp, targets: list[UOp], realized: Mapping[UOp, UOp] | None = None
) -> dict[UOp, UOp | None]:
    """The gradient of ``root`` (seeded with ``root_grad``) with respect to each target."""
    if realized:
        root = expand_realized(root, set(targets), realized)
    order = toposort([root])
    reach = _reaching(order, set(targets))
    grads: dict[UOp, UOp] = {root: root_grad}
    for u in reversed(order):
        g = grads.get(u)
        if g is None or not u.src or not any(s in reach for s in u.src):
            continue
        src_grads: tuple[UOp | None, ...] | None = DERIVATIVES.rewrite(u, ctx=g)
        if src_grads is None:
            raise NotImplementedError(f"no derivative rule for {u.op}")
        for s, sg in zip(u.src, src_grads):
            if sg is not None and s in reach:
                grads[s] = grads[s] + sg if s in grads else sg
    return {t: grads.get(t) for t in targets}
