"""Scans and sorting of ``Tensor``: cumsum, cumprod, cummax/cummin, logcumsumexp, and the
rank-based sort, argsort and topk.

A scan is built in log-depth steps (``_scan``): each step combines every element with the one a
power of two before it, so n elements take log2(n) fused steps rather than an n-long chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from fusegrad.dtype import dtypes
from fusegrad.errors import InvalidArgument
from fusegrad.helpers import prod
from fusegrad.tensor.base import TensorBase

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor


#: a cumsum along an axis this long or shorter is one masked sum (n*n additions in one kernel);
#: a longer one is summed in blocks of ``SCAN_BLOCK`` (``_blocked_cumsum``)
SCAN_WHOLE = 256
#: 2**20 floats (3 rows) on 2 cores (AMD EPYC, AVX-512): blocks of 32 took 3.0 ms of kernels,
#: of 64 4.6, of 128 8.4, of 256 14.7 (the masked sums' work grows with the block)
SCAN_BLOCK = 32
#: any other scan (cumprod, cummax, cummin, logcumsumexp) doubles (``_scan``) along an axis this
#: long or shorter, else runs in blocks (``_blocked_scan``)
SCAN_DOUBLED = 1 << 16


def _blocked_scan(
    parts: Sequence[Tensor],
    fills: Sequence[Any],
    combine: Callable[[tuple[Tensor, ...], tuple[Tensor, ...]], tuple[Tensor, ...]],
    steps_per_kernel: int,
) -> tuple[Tensor, ...]:
    """``_scan`` along the last axis of ``parts``, longer than ``SCAN_WHOLE``, as
    ``_blocked_cumsum`` sums: in blocks of ``SCAN_BLOCK`` (the last padded with ``fills``), each
    block scanned alone, then the scan of the blocks' last elements (a level shorter) combined
    into the next block's elements. Doubling over the whole axis took log2(n) passes over it, 20
    for 2**20 elements (a cumprod of 2**20: ~30 ms); in blocks, ~7 passes."""
    n = max(p.shape[-1] for p in parts)
    blocks = -(-n // SCAN_BLOCK)
    shaped = []
    for p, fill in zip(parts, fills):
        if p.shape[-1] != n:  # (broadcast along the axis: indices shaped (1,) there never are)
            p = p.expand(*p.shape[:-1], n)
        padded = p.pad((0, blocks * SCAN_BLOCK - n), value=fill)
        shaped.append(padded.reshape(*p.shape[:-1], blocks, SCAN_BLOCK))
    within = shaped[0]._scan(shaped[0].ndim - 1, shaped, fills, combine, steps_per_kernel)
    ends = tuple(_checkpoint(w[..., -1]) for w in within)  # (..., blocks): each block's whole
    done = ends[0]._scan(
        ends[0].ndim - 1, ends, fills, combine, steps_per_kernel
    )  # (blocks longer: blocked)
    # what each block starts from: the scan of the blocks before it (fills before the first)
    before = tuple(d[..., :-1].pad((1, 0), value=f).unsqueeze(-1) for d, f in zip(done, fills))
    outs = combine(before, within)
    return tuple(o.reshape(*o.shape[:-2], blocks * SCAN_BLOCK)[..., :n] for o in outs)


class ValuesIndices(NamedTuple):
    """What ``cummax`` and ``cummin`` return, as PyTorch's: the values, and where each came from."""

    values: Tensor
    indices: Tensor


def _checkpoint(x: Tensor) -> Tensor:
    """``x.contiguous()``, whose gradient is made contiguous too: a kernel boundary in both passes
    (the gradient of ``contiguous`` alone passes through, and would fuse the backward steps)."""
    return x.contiguous()._with_gradient(_contiguous_gradient, (x,))


def _contiguous_gradient(grad: Tensor, x: Tensor) -> tuple[Tensor]:
    return (grad.contiguous(),)


#: a sort (or topk) counts each element's rank (n*n comparisons a row, in one reduction) when
#: its axis is this long or shorter, or all its rows take at most ``SORT_RANK_WORK``
#: comparisons; else it runs a bitonic network (``_bitonic_sort``, a kernel a step). On 2 cores
#: (AMD EPYC): topk of (4096, 1024), 2**32 comparisons, 2.0 s counted, 1.9 s by the network; a
#: sort of 2**16 elements 0.25 s by the network, of 2**20 1.5 s (counted: 2**40 comparisons)
SORT_WHOLE = 256
SORT_RANK_WORK = 1 << 30


def _goes_before(
    a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], n: int, descending: bool
) -> Tensor:
    """Whether element ``a`` (value, original index) comes before ``b`` in a stable sort of ``n``
    elements: by value (nan above everything), equal values by index; the padding past ``n``
    (indices ``n`` and up) last."""
    (av, ai), (bv, bi) = a, b
    earlier = ai < bi
    ahead = (av > bv) if descending else (av < bv)
    same = av == bv
    if av.dtype.is_float:
        a_nan, b_nan = av.isnan(), bv.isnan()
        ahead = ahead | ((a_nan & ~b_nan) if descending else (b_nan & ~a_nan))
        same = same | (a_nan & b_nan)
    padding = (ai >= n) | (bi >= n)
    return padding.where(earlier, ahead | (same & earlier))


def _compare_exchange(
    values: Tensor, index: Tensor, distance: int, flipped: bool, n: int, descending: bool
) -> tuple[Tensor, Tensor]:
    """One step of the bitonic network (``_bitonic_sort``): in each run of ``2 * distance``
    elements, element i and element i + ``distance`` (or, ``flipped``, the run's element
    ``2 * distance - 1 - i``) put in order. Each element is compared with its partner and keeps
    its own value or takes the partner's: one select an element, no concatenation."""
    lead, size = values.shape[:-3], prod(values.shape[-3:])
    runs = (*lead, size // (2 * distance), 2, distance)
    axes = (-2, -1) if flipped else (-2,)
    own = (values.reshape(runs), index.reshape(runs))
    partner = (own[0].flip(axes), own[1].flip(axes))
    # (true in the first of each pair: a constant padded, no buffer)
    first = type(values).full((1, 1), True, device=values.device).pad(((0, 1), None))
    keep = _goes_before(own, partner, n, descending) == first
    return keep.where(own[0], partner[0]), keep.where(own[1], partner[1])


class ScanMixin(TensorBase):
    """Scans along an axis, and sorting."""

    __slots__ = ()

    def _prefix(self, axis: int, fill: Any) -> Tensor:
        """(..., n, n) with [..., i, j] = x[..., j] for j <= i, else ``fill``; the axis moved
        last."""
        x = self.transpose(axis, -1) if self.ndim else self.reshape(1)
        n = x.shape[-1]
        idx = type(self).arange(n, device=self.device)
        # [i, j] = j <= i, built as its transpose: kept in a buffer of its own, it is then read
        # one run along i, the output's vector axis (as [i, j], a gather of bytes: 3x slower)
        before = (idx.reshape(n, 1) <= idx.reshape(1, n)).T
        return before.where(x.unsqueeze(-2), fill).cast(self.dtype)

    def _unscan(self, out: Tensor, axis: int) -> Tensor:
        return out.transpose(axis, -1) if self.ndim else out.reshape(())

    def cumsum(self, axis: int = 0) -> Tensor:
        """Running sums along ``axis``: a masked sum of each element's prefix (one kernel) up to
        ``SCAN_WHOLE`` elements; a longer axis is summed in blocks (``_blocked_cumsum``).

        >>> Tensor([1, 2, 3]).cumsum().tolist()
        [1, 3, 6]
        """
        axis = self._axis(axis)
        if self.ndim and self.shape[axis] > SCAN_WHOLE:
            return self.transpose(axis, -1)._blocked_cumsum().transpose(axis, -1)
        return self._unscan(self._prefix(axis, 0).sum(-1), axis)

    def _blocked_cumsum(self) -> Tensor:
        """Running sums along the last axis, longer than ``SCAN_WHOLE``: the axis cut into blocks
        of ``SCAN_BLOCK`` (the last padded with zeros), each block's running sums as a masked
        sum (``SCAN_BLOCK`` additions an element), and to each block the sum of all blocks
        before it, from the running sums of the blocks' totals (this, one level shorter).

        The masked sum over the whole axis is n*n work: a cumsum of 2**20 floats took 34 s a
        call on 2 cores; in blocks about n * (``SCAN_BLOCK`` + a few) additions, ~1 ms."""
        x = cast("Tensor", self)
        n = x.shape[-1]
        blocks = -(-n // SCAN_BLOCK)
        padded = x.pad((0, blocks * SCAN_BLOCK - n))  # (F.pad's form: the last axis)
        parts = padded.reshape(*x.shape[:-1], blocks, SCAN_BLOCK)
        within = parts.cumsum(-1)  # (..., blocks, SCAN_BLOCK)
        totals = within[..., -1]  # (..., blocks)
        # the sum of the blocks before each: the totals' running sums moved one block on
        before = totals[..., :-1].cumsum(-1).pad((1, 0))
        out = within + before.unsqueeze(-1)
        return out.reshape(*x.shape[:-1], blocks * SCAN_BLOCK)[..., :n]

    def _scan(
        self,
        axis: int,
        parts: Sequence[Tensor],
        fills: Sequence[Any],
        combine: Callable[[tuple[Tensor, ...], tuple[Tensor, ...]], tuple[Tensor, ...]],
        steps_per_kernel: int,
    ) -> tuple[Tensor, ...]:
        """Running ``combine`` of ``parts`` (tensors shaped like this one) along ``axis``.

        By doubling (Hillis and Steele): the step of shift s combines each element with the one s
        before it (``fills`` before the start), so after log2(n) steps element i covers 0..i.
        ``combine(earlier, later)`` must be associative. n log n work where an n*n masked
        reduction takes n*n. Each step uses its input twice, so k fused steps compute ``combine``
        2**k times an element: a kernel every ``steps_per_kernel`` steps, in the backward pass
        too (``_checkpoint``)."""
        n = self.shape[axis] if self.ndim else 1
        if n > SCAN_DOUBLED:
            moved = tuple(p.transpose(axis, -1) for p in parts)
            outs = _blocked_scan(moved, fills, combine, steps_per_kernel)
            return tuple(out.transpose(axis, -1) for out in outs)
        shift, steps = 1, 0
        while shift < n:
            before = tuple((shift, 0) if i == axis else None for i in range(self.ndim))
            keep = tuple((0, n) if i == axis else None for i in range(self.ndim))
            earlier = tuple(p.pad(before, value=f).shrink(keep) for p, f in zip(parts, fills))
            parts = combine(earlier, tuple(parts))
            shift, steps = shift * 2, steps + 1
            if steps % steps_per_kernel == 0 and shift < n:
                parts = tuple(_checkpoint(p) for p in parts)
        return tuple(parts)

    def cumprod(self, axis: int = 0) -> Tensor:
        """Running products along ``axis``, exact for integers (small ints and bool give int64,
        halves are multiplied in float32, as ``prod``); the gradient is right at zeros too.

        >>> Tensor([1, 2, 3, 0, 5]).cumprod().tolist()
        [1, 2, 6, 0, 0]
        """
        axis = self._axis(axis)
        x = cast("Tensor", self)
        if x.dtype == dtypes.bool or (x.dtype.is_int and x.dtype.itemsize < 8):
            x = x.cast(dtypes.int64)
        wide = x.cast(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
        (out,) = wide._scan(axis, (wide,), (1,), lambda e, later: (e[0] * later[0],), 4)
        return out.cast(x.dtype)

    def _running_best(
        self, axis: int, later_wins: Callable[[Tensor, Tensor], Tensor], worst: Any
    ) -> ValuesIndices:
        """The running best along ``axis`` and its index: a later element replaces the best so
        far where ``later_wins(later, best)`` (ties too: the latest index, as PyTorch), and a nan
        always does. The values are selected, so the gradient goes to the element chosen."""
        axis = self._axis(axis)
        positions = self._positions(axis) if self.ndim else type(self).arange(1).reshape(())

        def combine(earlier: tuple[Tensor, ...], later: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            wins = later_wins(later[0], earlier[0])
            if self.dtype.is_float:
                wins = wins | later[0].isnan()
            return wins.where(later[0], earlier[0]), wins.where(later[1], earlier[1])

        start = (cast("Tensor", self), positions)
        values, indices = self._scan(axis, start, (worst, 0), combine, 2)
        return ValuesIndices(values, indices._broadcast_to(self.shape).cast(dtypes.int32))

    def cummax(self, axis: int = 0) -> ValuesIndices:
        """Running maxima along ``axis`` and their indices (``values``, ``indices``), as
        ``torch.cummax``: the latest index among equal maxima; nan wins once it appears.

        >>> [t.tolist() for t in Tensor([1, 3, 2, 3]).cummax()]
        [[1, 3, 3, 3], [0, 1, 1, 3]]
        """
        worst = -math.inf if self.dtype.is_float else self.dtype.min
        return self._running_best(axis, lambda later, best: later >= best, worst)

    def cummin(self, axis: int = 0) -> ValuesIndices:
        """Running minima along ``axis`` and their indices, as ``torch.cummin``."""
        worst = math.inf if self.dtype.is_float else self.dtype.max
        return self._running_best(axis, lambda later, best: later <= best, worst)

    def logcumsumexp(self, axis: int = 0) -> Tensor:
        """ln of the running sums of e**x along ``axis``, each step a stable ``logaddexp``
        (so [0, 1000] gives [0, 1000], not inf).

        >>> Tensor([0.0, 1000.0]).logcumsumexp().tolist()
        [0.0, 1000.0]
        """
        axis = self._axis(axis)
        x = self._float_operand()
        wide = x.cast(dtypes.float32) if x.dtype.itemsize < 4 else x
        (out,) = wide._scan(
            axis, (wide,), (-math.inf,), lambda e, later: (e[0].logaddexp(later[0]),), 1
        )
        return out.cast(x.dtype)

    # ---- sorting ---------------------------------------------------------------------------------

    def _ranks(self, axis: int, descending: bool) -> Tensor:
        """Each element's position in a stable sort along ``axis`` (an n*n comparison count)."""
        x = self.transpose(axis, -1)
        a, b = x.unsqueeze(-1), x.unsqueeze(-2)  # a: element i, b: every other element j
        n = x.shape[-1]
        idx = type(self).arange(n, device=self.device)
        earlier = idx.reshape(n, 1) > idx.reshape(1, n)  # j comes before i
        ahead = (b > a) if descending else (b < a)
        same = b == a
        if self.dtype.is_float:  # nan sorts above everything, and nans tie, as in PyTorch
            a_nan, b_nan = a.isnan(), b.isnan()
            ahead = ahead | (
                b_nan & a_nan.logical_not() if descending else a_nan & b_nan.logical_not()
            )
            same = same | (a_nan & b_nan)
        return (ahead | (same & earlier)).sum(-1)  # (..., n): rank of element i

    def topk(
        self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
    ) -> tuple[Tensor, Tensor]:
        """The ``k`` largest (or smallest) values along ``dim`` and their indices, in order.

        >>> [t.tolist() for t in Tensor([3, 1, 4, 1, 5]).topk(2)]
        [[5, 4], [4, 2]]
        """
        dim = self._axis(dim)
        n = self.shape[dim]
        if not 0 <= k <= n:
            raise InvalidArgument(
                f"topk k={k} is out of range for a dimension of size {n}; k must lie in 0..{n}"
            )
        if 0 < k <= n // 2 and self._selectable(dim):  # (n past SELECT_SORTED: found by keys)
            values, positions = self.transpose(dim, -1)._selected_top(k, largest)
            return values.transpose(dim, -1), positions.transpose(dim, -1)
        if n > SORT_WHOLE and prod(self.shape) * n > SORT_RANK_WORK:
            values, positions = self.transpose(dim, -1)._bitonic_sort(descending=largest)
            return values[..., :k].transpose(dim, -1), positions[..., :k].transpose(dim, -1)
        ranks = self._ranks(dim, descending=largest)  # (..., n) with dim moved last
        x = self.transpose(dim, -1)
        slot = type(self).arange(k, device=self.device)
        picked = ranks.unsqueeze(-2) == slot.reshape(k, 1)  # (..., k, n)
        values = picked.where(x.unsqueeze(-2), 0).sum(
            -1, dtype=self.dtype if self.dtype != dtypes.bool else None
        )
        positions = picked.where(type(self).arange(n, device=self.device), 0).sum(-1)
        values = values.cast(self.dtype)
        return values.transpose(dim, -1), positions.transpose(dim, -1)

    def _bitonic_sort(self, descending: bool) -> tuple[Tensor, Tensor]:
        """The values along the last axis in order (stable: equal values keep their order; nan
        above everything, as PyTorch), and where each came from (int32): a bitonic sorting
        network over the axis padded to a power of two, P = 2**p elements.

        Stage s (1..p) sorts blocks of 2**s from sorted halves: its first step compares element
        i of a block with element 2**s - 1 - i (the second half read backwards), each later step
        element i with element i + d of each run of 2d, for d = 2**(s-2) down to 1; the earlier
        of each pair (``_goes_before``) goes first. p(p+1)/2 steps of P/2 comparisons each: a
        sort of 2**20 elements is 210 steps, where the rank count (``_ranks``) compares every
        pair (2**40). A kernel a step: each step reads its input twice, so fused steps would
        compute the earlier ones again, at positions found by division."""
        x = cast("Tensor", self)
        keys = x.cast(dtypes.int8) if x.dtype == dtypes.bool else x
        n, lead = x.shape[-1], x.shape[:-1]
        size = 1 << max(0, n - 1).bit_length()
        values = keys.pad((0, size - n))  # (the last axis; pads go last, by index)
        index = type(x).arange(size, dtype=dtypes.int32, device=x.device)
        index = index.reshape(*((1,) * len(lead)), size).expand(*lead, size)
        # (each step's arrays as (..., runs, 2, distance): its kernel then reads the previous
        # step's buffer at sums of its loop counters, no division)
        values, index = values.reshape(*lead, size, 1, 1), index.reshape(*lead, size, 1, 1)
        stage = 2
        while stage <= size:
            distance = stage // 2
            while distance >= 1:
                flipped = distance == stage // 2
                values, index = _compare_exchange(values, index, distance, flipped, n, descending)
                values, index = _checkpoint(values), index.contiguous()
                distance //= 2
            stage *= 2
        values, index = values.reshape(*lead, size)[..., :n], index.reshape(*lead, size)[..., :n]
        return values.cast(x.dtype), index

    def sort(self, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
        """The values along ``dim`` in order, and where each came from (stable)."""
        return self.topk(self.shape[self._axis(dim)], dim, largest=descending)

    def argsort(self, dim: int = -1, descending: bool = False) -> Tensor:
        return self.sort(dim, descending)[1]
