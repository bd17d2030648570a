"""Searching and order statistics of ``Tensor``: searchsorted, bucketize, kthvalue, quantile,
nanquantile, unique, argwhere and count_nonzero, with PyTorch's signatures and errors.

A search counts: the insertion point of a value in a sorted row is the number of elements that
must come before it, one comparison per pair, summed (one fused kernel, no branching search).
Order statistics sort the row (``sort``) and pick ranks from it with a one-hot sum, so their
gradients go to the elements picked. Index results are int32, as ``nonzero``'s (PyTorch's are
int64). ``unique`` has a result whose size depends on the data: it reads one count from the
device, as ``nonzero`` does, and computes everything else there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.errors import InvalidArgument, ShapeError, UnknownOption
from fusegrad.helpers import prod
from fusegrad.tensor.base import TensorBase, is_tensor
from fusegrad.tensor.scan import ValuesIndices

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor

#: quantile's ways to land between two neighbouring order statistics (PyTorch's names)
INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


#: a search in a sorted axis this long or shorter compares each value with every element (one
#: vectorised sum); a longer one bisects (``_bisected``)
SEARCH_COUNTED = 128

#: an order statistic (kthvalue, median) along an axis this long or shorter sorts it; a longer
#: one is found bit by bit (``_rank_select``): the median of 2**20 floats took 0.8 s sorted
SELECT_SORTED = 256
#: the dtypes whose values ``_rank_select`` orders through 32-bit integer keys
_KEYED = ("float32", "float16", "bfloat16", "int32", "int16", "int8", "uint16", "uint8", "bool")


class SearchMixin(TensorBase):
    """Searching sorted rows, order statistics and unique elements."""

    __slots__ = ()

    # ---- searching -------------------------------------------------------------------------------

    def searchsorted(
        self,
        values: Tensor | float,
        *,
        out_int32: bool = False,
        right: bool = False,
        side: str | None = None,
        sorter: Tensor | None = None,
    ) -> Tensor:
        """Where each of ``values`` would go in this sorted tensor's last axis to keep it sorted,
        as ``torch.searchsorted(self, values)``: before equal elements, or after them with
        ``right`` (or ``side="right"``). ``sorter`` holds the indices that sort an unsorted row.
        A nan value goes last, as in PyTorch. (int32 either way: ``out_int32`` is accepted.)

        >>> Tensor([1, 3, 5, 7]).searchsorted(Tensor([3, 6])).tolist()
        [1, 3]
        """
        if side is not None:
            if side not in ("left", "right"):
                raise UnknownOption(f"searchsorted side must be 'left' or 'right', got {side!r}")
            if right and side == "left":
                raise InvalidArgument(
                    "searchsorted: side='left' and right=True say opposite things; give one of them"
                )
            right = side == "right"
        boundaries = cast("Tensor", self) if sorter is None else self.gather(-1, sorter)
        if not is_tensor(values):
            values = type(self).full((), values, self.dtype, self.device)
        if self.ndim > 1 and self.shape[:-1] != values.shape[:-1]:
            raise ShapeError(
                f"searchsorted: boundaries of shape {self.shape} are 1-d or share all but the "
                f"last axis with the values, which have shape {values.shape}"
            )
        return boundaries._count_before(values, right)

    def _count_before(self, values: Tensor, right: bool) -> Tensor:
        """For each value, how many elements of this sorted last axis come before it: those not
        >= it (> with ``right``). "not" makes a nan value count every element, as PyTorch's."""
        if self.ndim == 0:
            raise ShapeError(
                "searchsorted needs boundaries with at least one axis, got a 0-d tensor"
            )
        if self.shape[-1] > SEARCH_COUNTED:
            return self._bisected(values, right)
        row = self if self.ndim == 1 else self.unsqueeze(-2)  # (..., 1, n) against (..., k, 1)
        after = row > values.unsqueeze(-1) if right else row >= values.unsqueeze(-1)
        return after.logical_not().sum(-1, dtype=dtypes.int32)

    def _bisected(self, values: Tensor, right: bool) -> Tensor:
        """``_count_before`` by bisection, as PyTorch searches: each value halves its range
        [lo, hi) of this sorted last axis ``n.bit_length()`` times, reading one element a step
        (a gather); the first element not before the value ends it. log2(n) reads a value where
        the count compares it with all n (64K values in 64K boundaries: 97 ms counted)."""
        n = self.shape[-1]
        table = cast("Tensor", self)
        if self.ndim == 1:  # (the values flat, each reading the one row)
            shape, values = values.shape, values.reshape(-1)
        lo = values.zeros_like(dtypes.int32)
        hi = values.full_like(n, dtypes.int32)
        for _ in range(n.bit_length()):
            mid, searching = (lo + hi) // 2, lo < hi
            at = table._gathered(table.ndim - 1, mid.clip(0, n - 1))
            before = (at > values if right else at >= values).logical_not()
            lo, hi = (searching & before).where(mid + 1, lo), (searching & ~before).where(mid, hi)
        return lo.reshape(shape) if self.ndim == 1 else lo

    def bucketize(
        self, boundaries: Tensor, *, out_int32: bool = False, right: bool = False
    ) -> Tensor:
        """The bucket of each element between the sorted 1-d ``boundaries``, as
        ``torch.bucketize``: i with boundaries[i-1] < x <= boundaries[i] (with ``right``,
        boundaries[i-1] <= x < boundaries[i]).

        >>> Tensor([0, 3, 9]).bucketize(Tensor([1, 3, 5])).tolist()
        [0, 1, 3]
        """
        if boundaries.ndim != 1:
            raise ShapeError(f"bucketize needs 1-d boundaries, got shape {boundaries.shape}")
        return boundaries._count_before(cast("Tensor", self), right)

    def argwhere(self) -> Tensor:
        """The coordinates of the non-zero elements, one row each: ``nonzero()``."""
        return self.nonzero()

    def count_nonzero(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """How many elements are not zero, over ``dim`` (every axis if None).

        >>> Tensor([[0, 1], [2, 3]]).count_nonzero(0).tolist()
        [1, 2]
        """
        return (self != 0).sum(dim, dtype=dtypes.int32)

    # ---- order statistics ------------------------------------------------------------------------

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
        """The ``k``-th smallest element along ``dim`` (k from 1) and its index, as
        ``torch.kthvalue``.

        >>> [t.item() for t in Tensor([5.0, 1.0, 4.0]).kthvalue(2)]
        [4.0, 2]
        """
        axis = self._axis(dim)
        n = self.shape[axis] if self.ndim else 1
        if not 1 <= k <= n:
            raise InvalidArgument(
                f"kthvalue: k={k} is out of range for dim {dim} of size {n} (k counts from 1)"
            )
        x = self if self.ndim else self.reshape(1)
        if x._selectable(axis):
            shape = (*x.shape[:axis], 1, *x.shape[axis + 1 :])
            rank = _int_buffer(cast("Tensor", x), k - 1)._broadcast_to(shape)
            values, indices = x._rank_select(axis, rank)
        else:
            ordered, order = x.sort(axis)
            keep = [(k - 1, k) if i == axis else None for i in range(x.ndim)]
            values, indices = ordered.shrink(keep), order.shrink(keep)
        if not keepdim or self.ndim == 0:
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return ValuesIndices(values, indices)

    def _selectable(self, axis: int) -> bool:
        """Whether an order statistic along ``axis`` is found by ``_rank_select``."""
        return self.shape[axis] > SELECT_SORTED and self.dtype.name in _KEYED

    def _rank_select(self, axis: int, rank: Tensor) -> tuple[Tensor, Tensor]:
        """The element at ``rank`` (int32, 0 first; this shape with ``axis`` 1) of each row of
        ``axis`` in a stable ascending sort (nan above inf), and its index, both keeping the
        axis (size 1). No sort: each value becomes a 32-bit key whose integer order is the
        values' order, and the wanted key is found a bit at a time, from the top, by counting
        the keys below a candidate (32 passes over the row, a reduction each); its index is the
        right occurrence of that key, found by a running count. The median of 2**20 floats:
        0.8 s by the bitonic sort, ~10 ms so."""
        x = self.transpose(axis, -1)
        rank = rank.transpose(axis, -1)
        keys = x._order_keys().contiguous()  # (..., n)
        _, equal, place = _at_rank(keys, rank)
        hit = equal & (place == 0)
        positions = type(self).arange(x.shape[-1], device=self.device)
        index = hit.where(positions, -1).max(-1, keepdim=True).cast(dtypes.int32)
        values = x.gather(-1, index)
        return values.transpose(axis, -1), index.transpose(axis, -1)

    def _selected_top(self, k: int, largest: bool) -> tuple[Tensor, Tensor]:
        """``topk`` along the last axis, longer than ``SELECT_SORTED``: the k-th key found bit by
        bit (``_key_of_rank``), the k elements up to it picked (the first of equal keys),
        gathered in index order (a running count of the picked, searched), then the k sorted.
        n * 32 comparisons and a sort of k, where counting ranks compares n * n: topk(50) of a
        50,257-word vocabulary's logits took 193 ms by the bitonic sort."""
        keys = self._order_keys()
        keys = (~keys if largest else keys).contiguous()  # the wanted ones: the k smallest
        rank = _int_buffer(cast("Tensor", self), k - 1)._broadcast_to((*self.shape[:-1], 1))
        key, equal, place = _at_rank(keys, rank)
        picked = (keys < key) | (equal & (place <= 0))  # k in each row
        count = picked.cast(dtypes.int32).cumsum(-1)  # (..., n): rising to k
        slots = type(self).arange(1, k + 1, dtype=dtypes.int32, device=self.device)
        slots = slots.reshape((1,) * (self.ndim - 1) + (k,)).expand(*self.shape[:-1], k)
        positions = count.contiguous().searchsorted(slots).cast(dtypes.int32)  # (..., k)
        values, order = self.gather(-1, positions).sort(-1, descending=largest)
        return values, positions.gather(-1, order)

    def _order_keys(self) -> Tensor:
        """int32 keys in the order of the values: for floats (halves widened to float32) the
        bits with the 31 below the sign flipped in negative numbers, every nan made the
        positive quiet one (above inf); smaller integers widened."""
        if not self.dtype.is_float:
            return self.cast(dtypes.int32)
        x = self.cast(dtypes.float32)
        x = x.isnan().where(math.nan, x)
        bits = x.bitcast(dtypes.int32)
        return bits ^ ((bits >> 31) & ((1 << 31) - 1))

    def quantile(
        self,
        q: float | Tensor,
        dim: int | None = None,
        keepdim: bool = False,
        *,
        interpolation: str = "linear",
    ) -> Tensor:
        """The ``q``-th quantiles along ``dim`` (of all elements if None), as ``torch.quantile``:
        the order statistics at rank q * (n - 1), between two of them by ``interpolation``
        (linear, lower, higher, midpoint or nearest). A 1-d ``q`` puts its axis first. A row
        with a nan gives nan.

        >>> Tensor([1.0, 2.0, 3.0, 4.0]).quantile(0.5).item()
        2.5
        """
        return self._quantile(q, dim, keepdim, interpolation, "quantile")

    def nanquantile(
        self,
        q: float | Tensor,
        dim: int | None = None,
        keepdim: bool = False,
        *,
        interpolation: str = "linear",
    ) -> Tensor:
        """``quantile`` of the elements that are not nan (nan where all are)."""
        return self._quantile(q, dim, keepdim, interpolation, "nanquantile")

    def _quantile(
        self, q: float | Tensor, dim: int | None, keepdim: bool, interpolation: str, name: str
    ) -> Tensor:
        """Sort with nans as inf (last), count the numbers per row, then take the ranks."""
        x = self._check_quantile(q, interpolation, name)
        if dim is None or x.ndim == 0:
            x = x.reshape(-1)
        axis = x._axis(dim if dim is not None and self.ndim else 0)
        x = x.permute(*(i for i in range(x.ndim) if i != axis), axis).unsqueeze(0)  # (1, ..., n)
        n = x.shape[-1]
        nans = x.isnan()
        ordered, _ = nans.where(math.inf, x).sort(-1)
        count = n - nans.sum(-1, keepdim=True)  # the numbers in each row
        qs = q.cast(x.dtype) if is_tensor(q) else type(self).full((), q, x.dtype, x.device)
        qs = qs.reshape((-1,) + (1,) * (x.ndim - 1))  # (Q, 1, ..., 1)
        last = (count - 1).maximum(0) if name == "nanquantile" else count.full_like(n - 1)
        out = _interpolate(ordered, qs * last.cast(x.dtype), interpolation)
        invalid = count == 0 if name == "nanquantile" else count < n
        out = invalid.where(math.nan, out).cast(x.dtype).squeeze(-1)  # (Q, ...) reduced
        return _quantile_shape(out, cast("Tensor", self), q, dim, keepdim)

    def _check_quantile(self, q: float | Tensor, interpolation: str, name: str) -> Tensor:
        """PyTorch's checks: a float input, not empty, q in [0, 1] and of at most 1 axis."""
        if not self.dtype.is_float:
            raise InvalidArgument(
                f"{name} needs a float tensor, got {self.dtype.name}; cast it first (x.float())"
            )
        if self.numel() == 0:
            raise InvalidArgument(f"{name} of an empty tensor (shape {self.shape}) is undefined")
        if interpolation not in INTERPOLATIONS:
            raise UnknownOption(
                f"{name} interpolation must be one of {', '.join(INTERPOLATIONS)}"
                f", got {interpolation!r}"
            )
        if is_tensor(q) and q.ndim > 1:
            raise ShapeError(
                f"{name} q must be a number or a 0-d or 1-d tensor, got shape {q.shape}"
            )
        if is_tensor(q) and q.dtype != self.dtype:
            raise InvalidArgument(
                f"{name} q of dtype {q.dtype.name} for a {self.dtype.name} "
                f"input; give them one dtype, as PyTorch requires"
            )
        found = q.numpy().reshape(-1).tolist() if is_tensor(q) else [q]
        if any(not 0 <= v <= 1 for v in found):
            raise InvalidArgument(
                f"{name} q must be in [0, 1], got {q if not is_tensor(q) else found}"
            )
        return cast("Tensor", self)

    # ---- unique ----------------------------------------------------------------------------------

    def unique(
        self,
        sorted: bool = True,
        return_inverse: bool = False,
        return_counts: bool = False,
        dim: int | None = None,
    ) -> Any:
        """The distinct elements in ascending order (of ``dim``: the distinct slices along it,
        in lexicographic order), as ``torch.unique``; with ``return_inverse`` where each input
        element (slice) is in the result, with ``return_counts`` how often each occurs. Their
        number is read from the device (the graph runs).

        >>> Tensor([3, 1, 3, 2]).unique(return_counts=True)[1].tolist()
        [1, 1, 2]
        """
        axis = None if dim is None else self._axis(dim)
        if axis is None and self.numel() > SELECT_SORTED:
            return self._unique_read(return_inverse, return_counts)
        x = self.reshape(-1, 1) if axis is None else self.transpose(0, axis)
        rows = x.reshape(x.shape[0], prod(x.shape[1:]))
        perm = rows._lexicographic_order()
        ordered = rows.gather(0, perm.unsqueeze(1).expand(rows.shape))
        n = rows.shape[0]
        changed = (ordered[1:] != ordered[:-1]).any(1)
        first = type(self).full((min(n, 1),), True, device=self.device).cat(changed)
        starts = first.nonzero(as_tuple=True)[0]  # (m,): reads the number of groups
        out = ordered[starts].reshape((-1,) + x.shape[1:])
        out = out.reshape(-1) if axis is None else out.transpose(0, axis)
        results = [out.cast(self.dtype)]
        if return_inverse:
            group = first.cumsum(0).cast(dtypes.int32) - 1  # each sorted row's group
            inverse = group.full_like(0).scatter(0, perm, group)
            results.append(inverse.reshape(self.shape) if axis is None else inverse)
        if return_counts:
            m = starts.shape[0]
            ends = starts[1:].cat(type(self).full((min(m, 1),), n, dtypes.int32, self.device))
            results.append((ends - starts).cast(dtypes.int32))
        return results[0] if len(results) == 1 else tuple(results)

    def _unique_read(self, inverse: bool, counts: bool) -> Any:
        """``unique`` of all elements, more than ``SELECT_SORTED`` of them, found as they are
        read back: the result's size needs a read anyway, and the sort on the device took 0.4 s
        for 2**20 elements. Each nan is an element of its own, as PyTorch's."""
        wide = self.cast(dtypes.float32) if self.dtype == dtypes.bfloat16 else self
        values = wide.numpy().reshape(-1)
        # only what is asked for: both took 106 ms for 2**20 ints, neither 22
        asked: dict[str, Any] = {"return_inverse": inverse, "return_counts": counts}
        found: Any = np.unique(values, equal_nan=False, **asked)
        out, *rest = found if inverse or counts else (found,)
        results = [type(self)(out, device=self.device).cast(self.dtype)]
        if inverse:
            where = rest.pop(0).astype(np.int32).reshape(self.shape)
            results.append(type(self)(where, device=self.device))
        if counts:
            results.append(type(self)(rest.pop(0).astype(np.int32), device=self.device))
        return results[0] if len(results) == 1 else tuple(results)

    def _lexicographic_order(self) -> Tensor:
        """The row order that sorts this 2-d tensor's rows lexicographically: stable sorts by
        each column, last column first (a radix sort whose digits are columns)."""
        perm = type(self).arange(self.shape[0], device=self.device)
        for c in reversed(range(self.shape[1])):
            key = self.shrink((None, (c, c + 1))).reshape(-1).gather(0, perm)
            perm = perm.gather(0, key.sort()[1])
        return perm


def _key_of_rank(keys: Tensor, rank: Tensor) -> Tensor:
    """The key at ``rank`` (0 first; (..., 1) int32) of each row of ``keys`` (..., n) (int32)
    in ascending order, found a bit at a time from the top: a candidate with the next bit set
    is kept where no more than ``rank`` keys lie below it. 32 counting passes, a kernel each."""
    found = rank.zeros_like()  # the wanted key's bits, as unsigned, found so far
    sign = -(1 << 31)  # (the top bit: an int32's sign)
    for bit in range(31, -1, -1):
        candidate = found | _int_buffer(keys, sign if bit == 31 else 1 << bit)
        below = (keys < (candidate ^ sign)).sum(-1, keepdim=True, dtype=dtypes.int32)
        found = (below <= rank).where(candidate, found).contiguous()
    return found ^ sign


def _at_rank(keys: Tensor, rank: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """For each row of ``keys`` (..., n): the key at ``rank`` (``_key_of_rank``), which elements
    hold that key, and each such element's place against the one at ``rank`` in a stable order
    (0 that one, below 0 the equal ones before it, above 0 those after)."""
    key = _key_of_rank(keys, rank)
    before = (keys < key).sum(-1, keepdim=True, dtype=dtypes.int32)
    equal = keys == key
    nth = equal.cast(dtypes.int32).cumsum(-1)  # how many equal keys up to each element
    return key, equal, nth - (rank - before + 1)


def _int_buffer(like: Tensor, value: int) -> Tensor:
    """``value`` as int32 of ``like``'s rank (every axis 1) in a buffer of its own, not a
    constant: the kernels reading it are the same for every value, compiled once (the 32 passes
    of ``_key_of_rank`` as constants took gcc seconds on a first call, and again for each k)."""
    return type(like)(np.full((1,) * like.ndim, value, np.int32), device=like.device)


def _interpolate(ordered: Tensor, rank: Tensor, interpolation: str) -> Tensor:
    """The value at fractional ``rank`` (Q, ..., 1) of the sorted rows ``ordered`` (1, ..., n)."""
    below, above = rank.floor(), rank.ceil()
    if interpolation == "nearest":
        below = above = _round_half_even(rank)
    low, high = _at(ordered, below), _at(ordered, above)
    if interpolation in ("lower", "nearest"):
        return low
    if interpolation == "higher":
        return high
    if interpolation == "midpoint":
        return low + (high - low) * 0.5
    weight, step = rank - below, high - low
    # PyTorch's lerp, from the nearer end: [-inf, 4] at 0.5 is -inf, as theirs, not nan
    return (weight < 0.5).where(low + step * weight, high - step * (1 - weight))


def _round_half_even(x: Tensor) -> Tensor:
    """Round to the nearest integer, halves to the even one (PyTorch's ``round``)."""
    below = x.floor()
    fraction = x - below
    odd = (below * 0.5).floor() * 2 != below
    up = (fraction > 0.5) | ((fraction == 0.5) & odd)
    return up.where(below + 1, below)


def _at(ordered: Tensor, rank: Tensor) -> Tensor:
    """``ordered[..., rank]`` for whole-number ``rank``: a one-hot sum, so the gradient flows."""
    n = ordered.shape[-1]
    hit = rank.cast(dtypes.int32) == type(ordered).arange(n, device=ordered.device)
    return ordered._pick(hit, ordered._broadcast_to(hit.shape)).unsqueeze(-1)


def _quantile_shape(out: Tensor, x: Tensor, q: Any, dim: int | None, keepdim: bool) -> Tensor:
    """``out`` (Q, reduced...) in PyTorch's shape: no q axis for a number or a 0-d q; with
    ``keepdim`` the reduced axes kept as size 1 (all of them when ``dim`` is None)."""
    if dim is None:
        out = out.reshape(out.shape[0], *((1,) * x.ndim if keepdim else ()))
    elif keepdim and x.ndim:
        out = out.unsqueeze(x._axis(dim) + 1)
    if not is_tensor(q) or q.ndim == 0:
        out = out.reshape(out.shape[1:])
    return out
