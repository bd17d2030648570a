"""Lowering: a kernel AST (tensor-graph ops over PARAM buffers) -> a kernel graph of index math.

The kernel computes each element of its output. The output index is one flat loop variable
(a RANGE on a CPU, a SPECIAL grid index on a GPU); ``lower`` walks the AST from the output down,
carrying the index of the element it needs, and turns every movement op into arithmetic on that
index. A reshape becomes ``//`` and ``%``, a permute reorders, an expand drops an index, a pad
becomes a bounds check that gates the load, a shrink adds an offset and a flip mirrors. Nothing
is copied. A reduce opens a loop of its own (a RANGE of kind "reduce") and becomes ``REDUCE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusegrad.dtype import dtypes
from fusegrad.helpers import prod, strides_for
from fusegrad.uop.ops import GroupOp, Ops, UOp

Index = tuple[UOp, ...]


def idx_const(v: int) -> UOp:
    return UOp.const(dtypes.index, v)


def unflatten(flat: UOp, shape: tuple[int, ...]) -> Index:
    """The per-axis indices of element ``flat`` of a contiguous array of ``shape``."""
    return tuple((flat // st) % s if s > 1 else idx_const(0) for st, s in zip(strides_for(shape), shape))


def flatten(idx: Index, shape: tuple[int, ...]) -> UOp:
    """The flat position of per-axis indices ``idx`` in a contiguous array of ``shape``."""
    out = idx_const(0)
    for i, st, s in zip(idx, strides_for(shape), shape):
        if s > 1:
            out = out + i * st
    return out


def in_range(i: UOp, lo: int, hi: int) -> UOp:
    """``lo <= i < hi`` as a bool UOp."""
    return i.lt(lo).ne(True) & i.lt(hi)


@dataclass
class Lowerer:
    """Walks one kernel AST; ``next_axis`` numbers the loops it opens."""

    next_axis: int = 1
    memo: dict = field(default_factory=dict)

    def new_range(self, size: int, kind: str) -> UOp:
        r = UOp(Ops.RANGE, dtypes.index, (idx_const(size),), (self.next_axis, kind))
        self.next_axis += 1
        return r

    def lower(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        """The value of element ``idx`` of ``u``; loads happen only where ``gate`` holds."""
        key = (u, idx, gate)
        if (hit := self.memo.get(key)) is None:
            hit = self.memo[key] = self._lower(u, idx, gate)
        return hit

    def _lower(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        op, arg = u.op, u.arg
        if op is Ops.PARAM:
            address = UOp(Ops.INDEX, u.dtype, (u, idx[0]))
            if gate.op is Ops.CONST and gate.arg is True:
                return UOp(Ops.LOAD, u.dtype, (address,))
            return UOp(Ops.LOAD, u.dtype, (address, gate, UOp.const(u.dtype, 0)))
        if op is Ops.CONST:
            return u
        if op in GroupOp.Movement:
            return self._lower_movement(u, idx, gate)
        if op is Ops.REDUCE_AXIS:
            return self._lower_reduce(u, idx, gate)
        if op in (Ops.CONTIGUOUS, Ops.DETACH):
            return self.lower(u.src[0], idx, gate)
        if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
            return u.replace(src=tuple(self.lower(s, idx, gate) for s in u.src))
        raise NotImplementedError(f"cannot lower {op} inside a kernel")

    def _lower_movement(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        op, arg, src = u.op, u.arg, u.src[0]
        if op is Ops.RESHAPE:
            return self.lower(src, unflatten(flatten(idx, u.shape), src.shape), gate)
        if op is Ops.PERMUTE:
            inner = [idx_const(0)] * len(idx)
            for out_axis, src_axis in enumerate(arg):
                inner[src_axis] = idx[out_axis]
            return self.lower(src, tuple(inner), gate)
        if op is Ops.EXPAND:
            inner = tuple(idx_const(0) if s == 1 else i for i, s in zip(idx, src.shape))
            return self.lower(src, inner, gate)
        if op is Ops.SHRINK:
            return self.lower(src, tuple(i + b for i, (b, _) in zip(idx, arg)), gate)
        if op is Ops.FLIP:
            inner = tuple((s - 1) - i if f else i for i, s, f in zip(idx, src.shape, arg))
            return self.lower(src, inner, gate)
        # PAD: outside the source the value is 0, and nothing may be loaded there
        valid = UOp.const(dtypes.bool, True)
        for i, s, (before, after) in zip(idx, src.shape, arg):
            if before or after:
                valid = valid & in_range(i, before, before + s)
        inner = tuple(i - b for i, (b, _) in zip(idx, arg))
        value = self.lower(src, inner, gate & valid)
        return valid.where(value, UOp.const(u.dtype, 0))

    def _lower_reduce(self, u: UOp, idx: Index, gate: UOp) -> UOp:
        reduce_op, axes = u.arg
        src = u.src[0]
        reduced_shape = tuple(src.shape[a] for a in axes)
        rng = self.new_range(prod(reduced_shape), "reduce")
        ridx = iter(unflatten(rng, reduced_shape))
        inner = tuple(next(ridx) if a in axes else i for a, i in enumerate(idx))
        value = self.lower(src, inner, gate)
        return UOp(Ops.REDUCE, u.dtype, (value, rng), reduce_op)


def lower_kernel(ast: UOp, grid: bool) -> UOp:
    """Lower ``SINK(STORE(PARAM, value))`` to a kernel graph over one flat output index."""
    store = ast.src[0]
    out, value = store.src
    n = prod(value.shape)
    if n == 1:
        flat = idx_const(0)
    elif grid:
        flat = UOp(Ops.SPECIAL, dtypes.index, (), ("gidx0", n))
    else:
        flat = UOp(Ops.RANGE, dtypes.index, (idx_const(n),), (0, "global"))
    true = UOp.const(dtypes.bool, True)
    result = Lowerer().lower(value, unflatten(flat, value.shape), true)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, flat)), result)),))
