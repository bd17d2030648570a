"""Joining, splitting, gathering and indexing methods of ``Tensor``: cat, stack, split, roll,
tril, gather, scatter, masked_select, nonzero, indexing with int lists, tensors and bool masks
(numpy's advanced indexing), ``__setitem__``, einsum.

All of them are graphs of the primitives in ``tensor.py``; gathers and tensor indexing compare
indices with ``arange`` and sum (a one-hot reduce), which fuses into one kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fusegrad.dtype import dtypes, promote_types
from fusegrad.errors import (
    InvalidArgument,
    InvalidIndex,
    InvalidType,
    InvalidValue,
    ShapeError,
    UnknownOption,
)
from fusegrad.helpers import prod
from fusegrad.tensor import bounds
from fusegrad.tensor.autograd import replace_value
from fusegrad.tensor.base import TensorBase, is_tensor
from fusegrad.tensor.movement import (
    ADVANCED_INDEX,
    ONE_INT,
    _check_variable_bounds,
    broadcast_shapes,
)
from fusegrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor

# an embedding's gradient sums per position (N*N*C + V*N work) rather than as a one-hot matmul
# (V*N*C) when the vocabulary V is at least this many times the N ids
PAIRED_IDS = 4


def _tuple(x: int | Sequence[int], n: int, name: str) -> tuple[int, ...]:
    """An int repeated ``n`` times, or a sequence of exactly ``n`` ints."""
    if isinstance(x, int):
        return (x,) * n
    if len(x) != n:
        raise ShapeError(f"{name} needs {n} values (one per spatial axis), got {tuple(x)}")
    return tuple(x)


def _join_args(name: str, first: Any, rest: tuple, dim: int) -> tuple[list[Tensor], int]:
    """The tensors a join was given (``first`` and ``rest``, or the sequence ``first``) and the
    axis (``rest`` may be the axis after a sequence, as in ``torch.stack([a, b], 1)``)."""
    if not isinstance(first, (list, tuple)):
        return _tensors_only(name, [first, *rest]), dim
    if len(rest) == 1 and isinstance(rest[0], int):
        return _join_args(name, first, (), rest[0])
    if rest:
        raise InvalidValue(
            f"{name}: give a sequence of tensors or the tensors themselves, not "
            f"both (got a {type(first).__name__} and {len(rest)} more)"
        )
    if not first:
        raise ShapeError(f"{name} needs at least one tensor, got an empty {type(first).__name__}")
    return _tensors_only(name, list(first)), dim


def _tensors_only(name: str, tensors: list) -> list[Tensor]:
    """``tensors``, if each is a Tensor: a list of numbers is not joined silently."""
    for i, t in enumerate(tensors):
        if not is_tensor(t):
            raise InvalidType(
                f"{name} joins Tensors, got {type(t).__name__} {t!r} at position {i}; "
                f"wrap it first: Tensor.{name}(Tensor(a), Tensor(b))"
            )
    return tensors


def _index_array(item: Any) -> Any:
    """An index item with lists, tuples, python bools and bool tensors made numpy arrays (masks
    are bool arrays); int tensors and basic items (ints, slices, None, ...) as they are."""
    if is_tensor(item):
        return item.numpy() if item.dtype == dtypes.bool else item
    if not isinstance(item, ADVANCED_INDEX):
        return item
    try:
        array = np.asarray(item)
    except ValueError:
        raise InvalidIndex(f"index {item!r} is ragged: nested lists must be rectangular") from None
    if array.size == 0 and array.dtype != np.bool_:
        array = array.astype(np.int32)  # ([] is a float array to numpy)
    if array.dtype != np.bool_ and not np.issubdtype(array.dtype, np.integer):
        raise InvalidIndex(
            f"index {item!r} has {array.dtype} elements; indices must be ints or bools"
        )
    return array


def _indexed_axes(item: Any) -> int:
    """How many axes of the indexed tensor an index item uses up (a mask: as many as it has)."""
    return item.ndim if isinstance(item, np.ndarray) and item.dtype == np.bool_ else 1


class IndexMixin(TensorBase):
    """Joining, splitting, gathering, scattering and advanced indexing."""

    __slots__ = ()

    # ---- joining and splitting -------------------------------------------------------------------

    def cat(self: Any, *others: Tensor, dim: int = 0) -> Tensor:  # (self may be a list)
        """Join tensors along ``dim``: each is padded into place and the pads are added. Called
        as ``a.cat(b, c)``, ``Tensor.cat(a, b, c)`` or ``Tensor.cat([a, b, c])``.

        >>> Tensor([1, 2]).cat(Tensor([3]), dim=0).tolist()
        [1, 2, 3]
        """
        tensors, dim = _join_args("cat", self, others, dim)
        first, rest = tensors[0], tensors[1:]
        for i, t in enumerate(tensors):
            if t.ndim == 0:
                raise ShapeError(
                    f"cat: the tensor at position {i} is 0-d and has no axis to join "
                    "along; use stack, or reshape it to 1-d"
                )
        dim = first._axis(dim)
        for t in rest:
            if t.ndim != first.ndim or any(
                a != b
                for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=False))
                if i != dim
            ):
                _check_variable_bounds({*t.shape, *first.shape})
                raise ShapeError(
                    f"cat along dim {dim}: shape {t.shape} does not match {first.shape}; "
                    f"every size but dim {dim}'s must be equal"
                )
        dtype = functools.reduce(promote_types, (t.dtype for t in tensors))
        tensors = [t.cast(dtype) for t in tensors]
        work = [t.cast(dtypes.uint8) for t in tensors] if dtype == dtypes.bool else tensors
        total, start = sum(t.shape[dim] for t in work), 0
        out: Tensor | None = None
        # an empty piece adds only a zero term, which hid the join from the layout pass (a
        # reflect pad of one side cats an empty piece on the other)
        pieces = [t for t in work if not isinstance(t.shape[dim], int) or t.shape[dim] > 0]
        for t in pieces or work[:1]:
            size = t.shape[dim]
            placed = t.pad(
                [(start, total - start - size) if i == dim else None for i in range(t.ndim)]
            )
            out = placed if out is None else out + placed
            start += size
        assert out is not None  # (tensors is not empty)
        return out.cast(dtype)

    def stack(self: Any, *others: Tensor, dim: int = 0) -> Tensor:  # (self may be a list)
        """Join tensors of one shape along a new axis ``dim``. Called as ``a.stack(b, c)``,
        ``Tensor.stack(a, b, c)`` or ``Tensor.stack([a, b, c])``.

        >>> Tensor.stack([Tensor([1, 2]), Tensor([3, 4])], dim=1).tolist()
        [[1, 3], [2, 4]]
        """
        tensors, dim = _join_args("stack", self, others, dim)
        for i, t in enumerate(tensors):
            if t.shape != tensors[0].shape:
                raise ShapeError(
                    f"stack needs tensors of one shape, got {tensors[0].shape} at "
                    f"position 0 and {t.shape} at position {i}"
                )
        dim = tensors[0]._axis(dim, tensors[0].ndim + 1)
        return type(tensors[0]).cat(*(t.unsqueeze(dim) for t in tensors), dim=dim)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Pieces of ``sizes`` along ``dim`` (an int: equal pieces, the last may be smaller)."""
        dim = self._axis(dim)
        n = self.shape[dim]
        if isinstance(sizes, ONE_INT):
            if sizes <= 0:
                raise InvalidValue(f"split size must be positive (>= 1), got {sizes}")
            sizes = [min(sizes, n - s) for s in range(0, n, sizes)] or [0]
        if sum(sizes) != n:
            raise ShapeError(
                f"split sizes {list(sizes)} do not add up to {n} (dim {dim} of {self.shape})"
            )
        starts = np.cumsum([0, *sizes[:-1]])
        return tuple(
            self.shrink([(int(s), int(s) + z) if i == dim else None for i in range(self.ndim)])
            for s, z in zip(starts, sizes, strict=False)
        )

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """At most ``chunks`` equal pieces along ``dim``, as ``torch.chunk``."""
        if not isinstance(chunks, int) or chunks < 1:
            raise InvalidValue(f"chunk needs a number of chunks >= 1, got chunks={chunks!r}")
        n = self.shape[self._axis(dim)]
        return self.split(max(1, -(-n // chunks)), dim)

    def repeat(self, *repeats: int | Sequence[int]) -> Tensor:
        """Tile the whole tensor ``repeats`` times along each axis, as ``torch.Tensor.repeat``."""
        reps = (
            tuple(repeats[0])
            if len(repeats) == 1 and isinstance(repeats[0], (list, tuple))
            else repeats
        )
        if len(reps) < self.ndim:
            raise ShapeError(
                f"repeat needs at least {self.ndim} counts for shape {self.shape}, got {reps}; "
                "give one count per axis (1 keeps an axis), or use tile"
            )
        if any(not isinstance(r, int) or r < 0 for r in reps):
            raise InvalidValue(f"repeat counts must be non-negative ints, got {tuple(reps)}")
        x = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        interleaved = tuple(v for s in x.shape for v in (1, s))
        grown = tuple(v for r, s in zip(reps, x.shape, strict=False) for v in (r, s))
        return (
            x.reshape(interleaved)
            .expand(grown)
            .reshape(tuple(r * s for r, s in zip(reps, x.shape, strict=False)))
        )

    def tile(self, *reps: int | Sequence[int]) -> Tensor:
        """``torch.tile``: like repeat, but fewer counts than axes repeat the last axes."""
        counts: tuple = tuple(reps[0]) if len(reps) == 1 and not isinstance(reps[0], int) else reps
        return self.repeat((1,) * (self.ndim - len(counts)) + tuple(counts))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
        """Repeat each element ``repeats`` times along ``dim`` (the flattened tensor if None)."""
        if not isinstance(repeats, int) or repeats < 0:
            raise InvalidValue(f"repeat_interleave needs repeats >= 0 (an int), got {repeats!r}")
        x = self.flatten() if dim is None else self
        dim = 0 if dim is None else x._axis(dim)
        shape = x.shape[: dim + 1] + (repeats,) + x.shape[dim + 1 :]
        out = x.unsqueeze(dim + 1).expand(shape)
        return out.reshape(x.shape[:dim] + (x.shape[dim] * repeats,) + x.shape[dim + 1 :])

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Rotate elements along ``dims`` by ``shifts``, one shift per axis (the flattened tensor
        by one shift if no dims), as ``torch.roll``.

        >>> Tensor([1, 2, 3, 4]).roll(1).tolist()
        [4, 1, 2, 3]
        """
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims = (dims,) if isinstance(dims, int) else tuple(dims) if dims else None
        if not shifts or len(shifts) != (1 if dims is None else len(dims)):
            raise InvalidArgument(
                f"roll needs one shift per dim, got shifts={shifts} and "
                f"dims={dims} (no dims: a single shift of the flattened tensor)"
            )
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        if self.ndim == 0:
            raise InvalidIndex(
                f"roll of a 0-d tensor along dims {dims}: it has none (leave out dims)"
            )
        x = cast("Tensor", self)
        for shift, dim in zip(shifts, dims, strict=True):
            dim = x._axis(dim)
            n = x.shape[dim]
            if n == 0 or shift % n == 0:
                continue
            s = shift % n
            twice = x.repeat([2 if i == dim else 1 for i in range(x.ndim)])
            x = twice.shrink([(n - s, 2 * n - s) if i == dim else None for i in range(x.ndim)])
        return x

    def meshgrid(self, *others: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids from 1-d (or 0-d) tensors, as ``torch.meshgrid``; ``indexing="xy"``
        swaps the first two axes. Called as ``a.meshgrid(b)``, ``Tensor.meshgrid(a, b)`` or
        ``Tensor.meshgrid([a, b])``.

        >>> [t.tolist() for t in Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))]
        [[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]
        """
        tensors, _ = _join_args("meshgrid", self, others, 0)
        if indexing not in ("ij", "xy"):
            raise InvalidArgument(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
        for i, t in enumerate(tensors):
            if t.ndim > 1:
                raise ShapeError(
                    f"meshgrid takes 0-d or 1-d tensors, got shape {t.shape} at "
                    f"position {i}; flatten it first"
                )
        sizes = [t.numel() for t in tensors]
        if indexing == "xy" and len(sizes) >= 2:
            sizes[0], sizes[1] = sizes[1], sizes[0]
        out = []
        for i, t in enumerate(tensors):
            axis = (1 - i if i < 2 else i) if indexing == "xy" and len(tensors) >= 2 else i
            shape = [1] * len(tensors)
            shape[axis] = t.numel()
            out.append(t.reshape(shape).expand(sizes))
        return tuple(out)

    def _triangle(self, diagonal: int, upper: bool) -> Tensor:
        if self.ndim < 2:
            name = "triu" if upper else "tril"
            raise ShapeError(
                f"{name} needs a tensor of at least 2 dimensions, got shape {self.shape}"
            )
        rows, cols = self.shape[-2], self.shape[-1]
        r = type(self).arange(rows, device=self.device).reshape(rows, 1)
        c = type(self).arange(cols, device=self.device).reshape(1, cols)
        keep = (c - r >= diagonal) if upper else (c - r <= diagonal)
        return keep.where(self, self.zeros_like())

    def tril(self, diagonal: int = 0) -> Tensor:
        """Keep the lower triangle (``col - row <= diagonal``) of the last two axes."""
        return self._triangle(diagonal, upper=False)

    def triu(self, diagonal: int = 0) -> Tensor:
        """Keep the upper triangle (``col - row >= diagonal``) of the last two axes."""
        return self._triangle(diagonal, upper=True)

    # ---- gathering and scattering ----------------------------------------------------------------

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """A new last axis with a 1 at each index (int32; ``-1`` means ``max + 1`` classes).

        Indices outside ``[0, num_classes)`` raise IndexError at the next read
        (``tensor/bounds.py``).

        >>> Tensor([0, 2]).one_hot(3).tolist()
        [[1, 0, 0], [0, 0, 1]]
        """
        if not self.dtype.is_int:
            raise InvalidArgument(
                f"one_hot takes a tensor of integer indices, got {self.dtype.name}; "
                "cast it with .long()"
            )
        if num_classes < -1:
            raise InvalidArgument(
                f"one_hot num_classes must be -1 (infer) or >= 0, got {num_classes}"
            )
        if num_classes == -1:
            if self.numel() == 0:
                raise InvalidArgument(
                    "one_hot cannot infer num_classes from an empty tensor; pass num_classes"
                )
            low, high = (int(v) for v in self.min().stack(self.max()).numpy())
            if low < 0:
                raise InvalidArgument(f"one_hot class values must be non-negative, got {low}")
            num_classes = high + 1
        else:
            what = f"{num_classes} classes"
            bounds.check_later("one_hot", cast("Tensor", self), 0, num_classes, what)
        return (self.unsqueeze(-1) == type(self).arange(num_classes, device=self.device)).cast(
            dtypes.int32
        )

    def _pick(self, mask: Tensor, values: Tensor, axis: int | tuple[int, ...] = -1) -> Tensor:
        """The one value per row of ``axis`` that ``mask`` selects (0 where none), in this dtype."""
        if self.dtype == dtypes.bool:
            return mask.where(values, False)._max(axis, False)  # (False when none)
        return mask.where(values, values.zeros_like()).sum(axis, dtype=self.dtype)

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """``out[p] = self[p with p[dim] = index[p]]``, as ``torch.gather``.

        >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[1], [0]])).tolist()
        [[2], [3]]
        """
        dim = self._axis(dim)
        if not index.dtype.is_int:
            raise InvalidArgument(
                f"gather index must be an int tensor, got {index.dtype.name}; "
                "cast it with .long() or .int()"
            )
        if index.ndim != self.ndim:
            raise ShapeError(
                f"gather index must have {self.ndim} dims like the input, got {index.shape}"
            )
        if any(i != dim and k > n for i, (k, n) in enumerate(zip(index.shape, self.shape))):
            raise ShapeError(
                f"gather index of shape {index.shape} is larger than the input "
                f"{self.shape} on an axis other than dim {dim}"
            )
        x = self.shrink([None if i == dim else (0, s) for i, s in enumerate(index.shape)])
        n = self.shape[dim]
        bounds.check_later("gather", index, 0, n, f"dim {dim} (size {n})")
        return x._gathered(dim, index)

    def _gathered(self, axis: int, index: Tensor) -> Tensor:
        """``out[p] = self[p with p[axis] = index[p]]``, one load per element (``Ops.GATHER``):
        ``index`` has this tensor's rank, and off ``axis`` this tensor is as long as it or 1.
        Indices must be in ``[0, self.shape[axis])`` (a bad one reads a clamped element; callers
        report it with ``bounds.check_later``). The gradient is a scatter-add."""
        if self.shape[axis] == 0 or index.numel() == 0:  # nothing to read (or an error reported)
            return type(self).zeros(index.shape, dtype=self.dtype, device=self.device)
        node = UOp(Ops.GATHER, self.dtype, (self.uop, index.uop), axis)
        out = self._wrap(node, self.device)
        if not self.dtype.is_float:
            return out
        return out.detach()._with_gradient(_gather_gradient, (cast("Tensor", self), index), (axis,))

    def _scatter_parts(
        self, dim: int, index: Tensor, src: Tensor | float
    ) -> tuple[Tensor, Tensor, tuple[int, ...]]:
        """(mask, values, region): mask[q, k] is true when ``index`` sends src[q with dim k] to
        q."""
        dim = self._axis(dim)
        self._check_scatter(dim, index, src)
        region = tuple(self.shape[i] if i == dim else s for i, s in enumerate(index.shape))
        if not is_tensor(src):
            src = index.full_like(src, self.dtype)
        src = src.shrink([(0, s) for s in index.shape])
        n, k = self.shape[dim], index.shape[dim]
        bounds.check_later("scatter", index, 0, n, f"dim {dim} (size {n})")
        rows = self._positions_at(dim, n)
        sent = (
            index.unsqueeze(-1)
            .transpose(dim, -1)
            .expand(region[:dim] + (n,) + region[dim + 1 :] + (k,))
        )
        mask = sent == rows
        values = src.unsqueeze(-1).transpose(dim, -1).expand(mask.shape)
        return mask, values, region

    def _check_scatter(self, dim: int, index: Tensor, src: Tensor | float) -> None:
        """PyTorch's rules for a scatter: an integer index with this tensor's number of axes and
        no larger than it (but along ``dim``) or than ``src``; ``src`` of this tensor's dtype."""
        if not index.dtype.is_int:
            raise InvalidArgument(
                f"a scatter index must be an integer tensor, got {index.dtype.name}"
            )
        if index.ndim != self.ndim or (is_tensor(src) and src.ndim != self.ndim):
            raise ShapeError(
                f"scatter into shape {self.shape}: index {index.shape} and src "
                f"{src.shape if is_tensor(src) else '(a number)'} need {self.ndim} axes like it"
            )
        too_big = any(i > s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim)
        if too_big or (is_tensor(src) and any(i > s for i, s in zip(index.shape, src.shape))):
            raise ShapeError(
                f"scatter index of shape {index.shape} is larger than the tensor {self.shape} "
                f"(apart from dim {dim}) or than src {src.shape if is_tensor(src) else '()'}"
            )
        if is_tensor(src) and src.dtype != self.dtype:
            raise InvalidArgument(
                f"scatter src of dtype {src.dtype.name} into a {self.dtype.name} tensor; "
                f"cast it first (src.cast(dtypes.{self.dtype.name})), as PyTorch requires"
            )

    def _positions_at(self, dim: int, n: int) -> Tensor:
        """0..n-1 along ``dim`` of an (ndim + 1)-d tensor whose last axis is extra."""
        shape = tuple(n if i == dim else 1 for i in range(self.ndim + 1))
        return type(self).arange(n, device=self.device).reshape(shape)

    def _fit(self, region_values: Tensor, region: tuple[int, ...], fill: Any) -> Tensor:
        """Pad a result computed over ``region`` (the front corner) to this tensor's shape."""
        return region_values.pad(
            [(0, s - r) for s, r in zip(self.shape, region, strict=False)], value=fill
        )

    def scatter(
        self, dim: int, index: Tensor, src: Tensor | float, reduce: str | None = None
    ) -> Tensor:
        """Write ``src`` into a copy of this tensor at ``index`` along ``dim``, as
        ``torch.scatter``.

        Where several writes go to one place, the last along ``dim`` wins (PyTorch's CPU order).
        ``reduce`` "add" or "multiply" combines them instead (``scatter_reduce``'s sum and prod).

        >>> Tensor([0, 0, 0]).scatter(0, Tensor([1, 1]), Tensor([5, 7])).tolist()
        [0, 7, 0]
        """
        if reduce is not None:
            if reduce not in ("add", "multiply"):
                raise UnknownOption(f"scatter reduce must be 'add' or 'multiply', got {reduce!r}")
            return self.scatter_reduce(dim, index, src, {"add": "sum", "multiply": "prod"}[reduce])
        mask, values, region = self._scatter_parts(dim, index, src)
        k = mask.shape[-1]
        order = mask.where(type(self).arange(1, k + 1, device=self.device), 0)
        latest = order._max(-1, True)  # 1 + the last k that writes here, 0 if none does
        hit = self._fit((latest > 0).squeeze(-1), region, False)
        written = self._pick(mask & (order == latest), values)
        return hit.where(self._fit(written, region, 0), cast("Tensor", self))

    def scatter_reduce(
        self, dim: int, index: Tensor, src: Tensor | float, reduce: str, include_self: bool = True
    ) -> Tensor:
        """Combine ``src`` into this tensor at ``index`` with ``reduce`` (sum, prod, mean, amax,
        amin), as ``torch.scatter_reduce``; ``include_self`` False leaves this tensor's values
        out where something is written. Ties of amax and amin share the gradient evenly."""
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise UnknownOption(
                f"scatter_reduce reduce must be sum, prod, mean, amax or amin, got {reduce!r}"
            )
        mask, values, region = self._scatter_parts(dim, index, src)
        hit = self._fit(mask._max(-1, False), region, False)
        if reduce in ("sum", "mean"):
            total = self._fit(self._pick(mask, values), region, 0)
            if reduce == "sum":
                kept = cast("Tensor", self)
                return (total + kept).cast(self.dtype) if include_self else hit.where(total, kept)
            count = self._fit(mask.sum(-1), region, 0) + (1 if include_self else 0)
            total = total + self if include_self else total
            mean = (
                total / count.maximum(1)
                if self.dtype.is_float
                else total.floor_divide(count.maximum(1))
            )
            return hit.where(mean.cast(self.dtype), cast("Tensor", self))
        fill = {"amax": self.dtype.min, "amin": self.dtype.max, "prod": 1}[reduce]
        chosen = mask.where(values, values.full_like(fill))
        if include_self:  # this tensor's value is one more candidate
            own = self.shrink([(0, r) for r in region]).unsqueeze(-1)
            chosen = own.cat(chosen, dim=-1)
        if reduce == "prod":
            part = chosen.prod(-1)
        else:
            part = chosen._max(-1, False) if reduce == "amax" else chosen._min(-1, False)
        return hit.where(self._fit(part.cast(self.dtype), region, fill), cast("Tensor", self))

    def masked_select(self, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
        """The elements where the bool ``mask`` (broadcast with this tensor) is true, in order,
        as a 1-d tensor (``torch.masked_select``). Their number depends on the data, so the
        mask is counted (its graph runs) unless ``size`` is given: then the first ``size``
        elements, padded with ``fill_value``, and nothing runs.

        >>> Tensor([1, 2, 3, 4]).masked_select(Tensor([True, False, True, False])).tolist()
        [1, 3]
        """
        if mask.dtype != dtypes.bool:
            raise InvalidArgument(f"masked_select needs a bool mask, got {mask.dtype.name}")
        shape = broadcast_shapes(self.shape, mask.shape)
        x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
        if size is None:  # (the count is read from the data: the positions come with it)
            picked = x.detach()._gathered(0, m._true_positions())
            if not self.dtype.is_float:
                return picked
            return picked._with_gradient(_selected_gradient, (x, m))
        hit = m._nth_true(size)  # (n, size)
        out = x._pick(hit, x.unsqueeze(1).expand(hit.shape), axis=0)
        return hit._max(0, False).where(out, fill_value).cast(self.dtype)

    def nonzero(
        self, as_tuple: bool = False, size: int | None = None, fill_value: int = 0
    ) -> Tensor | tuple[Tensor, ...]:
        """The coordinates of the non-zero elements in order, one row each: (count, ndim) int32
        (``torch.nonzero``, whose are int64), or with ``as_tuple`` one 1-d tensor per axis.
        The count depends on the data, so it is read (the graph runs) unless ``size`` is
        given: then the first ``size`` rows, padded with ``fill_value``, and nothing runs.

        >>> Tensor([[0, 3], [5, 0]]).nonzero().tolist()
        [[0, 1], [1, 0]]
        """
        if as_tuple and self.ndim == 0:  # (PyTorch's answer: the coordinates of a 1-d tensor)
            return self.reshape(1).nonzero(True, size, fill_value)
        if size is None:  # (the count is read from the data: the positions come with it)
            flat = self.cast(dtypes.bool).flatten()._true_positions()
            count = flat.shape[0]
        else:
            hit = self.cast(dtypes.bool).flatten()._nth_true(size)  # (n, size)
            n = hit.shape[0]
            flat = type(self).arange(n, device=self.device).unsqueeze(1).expand(hit.shape)
            flat = flat._pick(hit, flat, axis=0)  # (size,): the flat position of each
            flat, count = hit._max(0, False).where(flat, -1), size
        coordinates = []
        for axis, n in enumerate(self.shape):
            c = flat // prod(self.shape[axis + 1 :]) % n
            coordinates.append(c if size is None else (flat < 0).where(fill_value, c))
        columns = tuple(c.cast(dtypes.int32) for c in coordinates)
        if as_tuple:
            return columns
        if not columns:
            return type(self).zeros(count, 0, dtype=dtypes.int32, device=self.device)
        return columns[0].stack(*columns[1:], dim=1)

    def _true_positions(self) -> Tensor:
        """Where this 1-d bool tensor is true, in order (int32; int64 past 2**31 elements). Their
        number depends on the data, so the mask is computed and read back here, and the
        positions found as it is read: an (n, count) comparison on the device (``_nth_true``)
        took 16 s for the 500,000 true elements of a mask of 2**20."""
        found = np.flatnonzero(self.numpy())
        dtype = dtypes.int32 if self.shape[0] <= dtypes.int32.max else dtypes.int64
        return type(self)(found.astype(dtype.np), dtype=dtype, device=self.device)

    def _nth_true(self, size: int) -> Tensor:
        """For this 1-d bool tensor: (n, size) ``hit``, ``hit[k, j]`` true when element k is the
        j-th true element (from 0), for the first ``size`` of them."""
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        rank = self.cumsum(0) - 1  # how many true elements come before each
        slot = type(self).arange(size, device=self.device).reshape(1, size)
        return self.unsqueeze(1) & (rank.unsqueeze(1) == slot)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """``value`` where ``mask`` is true, else this tensor (keeping its dtype)."""
        return mask.where(value, cast("Tensor", self)).cast(self.dtype)

    def embedding(self, weight: Tensor) -> Tensor:
        """Rows of ``weight`` picked by this index tensor: shape ``self.shape +
        weight.shape[1:]``."""
        vocab = weight.shape[0]
        what = f"the {vocab} rows of the weight"
        bounds.check_later("embedding", cast("Tensor", self), 0, vocab, what)
        return self._rows_of(weight)

    def _rows_of(self, weight: Tensor) -> Tensor:
        """``embedding`` without the bounds check (the caller made its own)."""
        rest = weight.shape[1:]
        ids = self.reshape(self.shape or (1,))  # (..., T)
        table = weight.reshape((1,) * (ids.ndim - 1) + weight.shape)  # (1.., V, *rest)
        index = ids.reshape(ids.shape + (1,) * len(rest)).expand(ids.shape + rest)
        out = table.detach()._gathered(ids.ndim - 1, index).reshape(self.shape + rest)
        if not weight.dtype.is_float:
            return out
        return out._with_gradient(_rows_gradient, (weight, cast("Tensor", self)))

    # ---- tensor indexing -------------------------------------------------------------------------

    def _getitem_tensor(self, items: list) -> Tensor:
        """Indexing where some items are int lists, arrays or tensors, or bool masks: numpy's
        advanced indexing as PyTorch applies it. Ints, slices and None apply first; the int
        indices then broadcast together, and their shape replaces their axes if those are
        adjacent, else goes in front. A mask stands for the coordinates of its true elements
        (so it is realized); a 0-d mask is an index of shape (1,) (True) or (0,) (False) on a
        new axis."""
        items = [_index_array(i) for i in items]
        used = sum(_indexed_axes(i) for i in items if i is not None and i is not Ellipsis)
        items = self._fill_ellipsis(items, used)
        basic: list[Any] = []
        picks: list[tuple[int, Tensor]] = []  # (axis of the basic result, int index)
        axis = out_axis = 0
        for item in items:
            for basic_item, pick in self._index_parts(item, axis):
                basic.append(basic_item)
                if pick is not None:
                    picks.append((out_axis, pick))
                out_axis += basic_item is None or isinstance(basic_item, slice)
                axis += basic_item is not None
        x = self[tuple(basic)]
        return x._take(picks) if picks else x

    def _index_parts(self, item: Any, axis: int) -> list[tuple[Any, Tensor | None]]:
        """An index item, at ``axis`` of this tensor, as (basic item, int index or None) pairs:
        an int index takes a whole axis (``slice(None)``) to pick from; a k-d mask is k int
        indices, the coordinates of its true elements; a 0-d mask is a new axis (None)."""
        if isinstance(item, np.ndarray) and item.dtype == np.bool_:
            self._check_mask(item, axis)
            if item.ndim == 0:  # its axis has size 1: True picks [0], False picks []
                return [(None, self._index_tensor(np.zeros(int(item), np.int32)))]
            return [(slice(None), self._index_tensor(c)) for c in item.nonzero()]
        if isinstance(item, np.ndarray) or is_tensor(item):
            return [(slice(None), self._index_tensor(item, axis))]
        return [(item, None)]

    def _check_mask(self, mask: np.ndarray, axis: int) -> None:
        """A bool mask must have the shape of the axes it covers, from ``axis`` on."""
        covered = self.shape[axis : axis + mask.ndim]
        if mask.shape != covered:
            raise InvalidIndex(
                f"the shape of the mask {mask.shape} at index {axis} does not match "
                f"the shape of the indexed tensor {self.shape} there {covered}"
            )

    def _index_tensor(self, index: Any, axis: int | None = None) -> Tensor:
        """An int index as a tensor on this device; constant ones are checked against the size
        of ``axis`` (a tensor's values are only known when it runs: out of range picks zeros)."""
        if is_tensor(index):
            if index.dtype.is_float or index.dtype == dtypes.bool:
                raise InvalidIndex(
                    f"tensors used as indices must be int or bool tensors, got {index.dtype.name}"
                )
            return index
        if axis is not None and index.size:
            n = self.shape[axis]
            bad = index[(index < -n) | (index >= n)]
            if bad.size:
                raise InvalidIndex(
                    f"index {bad.flat[0]} is out of bounds for dimension {axis} with size {n}"
                )
        return type(self)(index.astype(np.int32), device=self.device)

    def _take(self, picks: list[tuple[int, Tensor]]) -> Tensor:
        """Index axes with int tensors; their broadcast shape goes where numpy puts it."""
        axes = [a for a, _ in picks]
        try:
            bshape = broadcast_shapes(*(t.shape for _, t in picks))
        except ShapeError:
            shapes = ", ".join(str(t.shape) for _, t in picks)
            raise InvalidIndex(
                f"shape mismatch: indexing tensors could not be broadcast together "
                f"with shapes {shapes}"
            ) from None
        if axes == [0]:  # rows of a table (an embedding): a gather whose gradient is a matmul
            (_, idx), n = picks[0], self.shape[0]
            bounds.check_later("indexing", idx, -n, n, f"dim 0 (size {n})")
            return (idx < 0).where(idx + n, idx)._rows_of(cast("Tensor", self))
        rest = [i for i in range(self.ndim) if i not in axes]
        nb, nr, nk = len(bshape), len(rest), len(axes)
        # the picked axes as one, indexed by the flat position the indices give together
        picked = prod(self.shape[a] for a in axes)
        x = self.permute(rest + axes).reshape(tuple(self.shape[r] for r in rest) + (picked,))
        flat: Tensor | None = None
        for a, idx in picks:
            n = self.shape[a]
            bounds.check_later("indexing", idx, -n, n, f"dim {a} (size {n})")
            idx = idx._broadcast_to(bshape) if idx.shape != bshape else idx
            idx = (idx < 0).where(idx + n, idx)
            flat = idx if flat is None else flat * n + idx
        assert flat is not None  # (picks is not empty)
        table = x.reshape((1,) * nb + x.shape)  # (1.., *R, picked)
        index = flat.reshape(bshape + (1,) * (nr + 1)).expand(bshape + x.shape[:-1] + (1,))
        out = table._gathered(nb + nr, index).reshape(bshape + x.shape[:-1])  # (*B, *R)
        adjacent = axes == list(range(axes[0], axes[0] + nk))
        if adjacent and axes[0] > 0:
            order = (
                list(range(nb, nb + axes[0])) + list(range(nb)) + list(range(nb + axes[0], nb + nr))
            )
            out = out.permute(order)
        return out

    def __setitem__(self, index: Any, value: Any) -> None:
        """``x[index] = value`` builds a new graph and makes this tensor point at it."""
        flat_positions = type(self).arange(self.numel(), device=self.device).reshape(self.shape)
        chosen = flat_positions[index]  # which element each selected slot is
        value = value if is_tensor(value) else type(self).full((), value, self.dtype, self.device)
        value = (
            value.cast(self.dtype)._broadcast_to(chosen.shape)
            if value.shape != chosen.shape
            else value.cast(self.dtype)
        )
        if chosen.numel() == 0:
            return
        flat = chosen.reshape(-1, 1) == type(self).arange(self.numel(), device=self.device).reshape(
            1, -1
        )
        hit = flat.max(0).reshape(self.shape)
        new = (
            self.flatten()
            ._pick(flat, value.reshape(-1, 1).expand(flat.shape), axis=0)
            .reshape(self.shape)
        )
        replace_value(self, hit.where(new, self).cast(self.dtype).uop)

    # ---- einsum and linear -----------------------------------------------------------------------

    @staticmethod
    def einsum(formula: str, *operands: Tensor | Sequence[Tensor]) -> Tensor:
        """Sum of products over named axes, as ``torch.einsum``: ``Tensor.einsum("ij,jk->ik", a,
        b)``
        is ``a @ b`` (the operands may also come as one list).

        A letter twice in one term takes the diagonal (``"ii->"`` is the trace); ``...`` stands for
        the axes no letter names, broadcast together across operands. Without ``->`` the output
        is ``...`` and then the letters used once, in alphabetical order.

        >>> Tensor.einsum("ii", Tensor([[1, 2], [3, 4]])).item()
        5
        """
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        tensors = cast("list[Tensor]", list(operands))
        lhs, arrow, rhs = formula.replace(" ", "").partition("->")
        terms = lhs.split(",")
        if len(terms) != len(tensors):
            raise ShapeError(f"einsum {formula!r} names {len(terms)} operands, got {len(tensors)}")
        spans = [
            t.ndim - len(term.replace("...", "")) for term, t in zip(terms, tensors, strict=True)
        ]
        rest = max((n for term, n in zip(terms, spans, strict=True) if "..." in term), default=0)
        labels = [
            _einsum_labels(term, t.shape, rest) for term, t in zip(terms, tensors, strict=True)
        ]
        if arrow:
            output = _einsum_labels(rhs, None, rest)
            unknown = [c for c in output if not any(c in ls for ls in labels)]
            if unknown or len(set(output)) != len(output):
                raise ShapeError(
                    f"einsum output {rhs!r} must name each input letter at most once "
                    f"(unknown or repeated: {unknown or output})"
                )
        else:
            letters = lhs.replace("...", "")
            once = sorted(c for c in set(letters) - {","} if letters.count(c) == 1)
            output = [f"...{j}" for j in range(rest)] + once
        for i, (ls, t) in enumerate(zip(labels, tensors, strict=True)):
            tensors[i], labels[i] = _einsum_diagonals(t, ls)
        sizes: dict[str, int] = {}
        for ls, t in zip(labels, tensors, strict=True):
            for c, s in zip(ls, t.shape, strict=True):
                if sizes.setdefault(c, s) != s and 1 not in (s, sizes[c]):
                    raise ShapeError(
                        f"einsum {formula!r}: axis {c!r} has sizes {sizes[c]} and {s}, "
                        f"which do not broadcast (operand shapes "
                        f"{[tuple(x.shape) for x in tensors]})"
                    )
                sizes[c] = max(sizes[c], s)
        order = output + sorted({c for ls in labels for c in ls} - set(output))
        product: Tensor | None = None
        for ls, t in zip(labels, tensors, strict=True):
            present = [c for c in order if c in ls]
            moved = t.permute([ls.index(c) for c in present])
            moved = moved.reshape(
                tuple(moved.shape[present.index(c)] if c in present else 1 for c in order)
            )
            product = moved if product is None else product * moved
        summed = tuple(range(len(output), len(order)))
        assert product is not None  # (einsum has at least one operand)
        out = product.sum(summed) if summed else product
        return out.expand(tuple(sizes[c] for c in output))

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """``x @ weight + bias`` with ``weight`` shaped (in, out), as tinygrad (PyTorch's is
        transposed)."""
        out = self * weight if weight.ndim == 1 else self.matmul(weight)
        return out + bias if bias is not None else out


def _einsum_labels(term: str, shape: tuple[int, ...] | None, rest: int) -> list[str]:
    """The axis labels of one einsum term (``shape`` None: the output): its letters, and for
    ``...`` labels "...j" of the last of the ``rest`` broadcast axes (right-aligned, as in
    broadcasting)."""
    named = term.replace("...", "", 1)
    if not all(c.isalpha() for c in named):
        raise ShapeError(f"einsum term {term!r}: subscripts are letters and at most one '...'")
    count = rest if shape is None else len(shape) - len(named)
    if shape is not None and (count < 0 or (count and "..." not in term)):
        raise ShapeError(f"einsum term {term!r} does not fit an operand of shape {shape}")
    before, dots, after = term.partition("...")
    broadcast = [f"...{j}" for j in range(rest - count, rest)] if dots else []
    return list(before) + broadcast + list(after)


def _einsum_diagonals(t: Tensor, labels: list[str]) -> tuple[Tensor, list[str]]:
    """``t`` with the axes of each letter repeated in ``labels`` replaced by their diagonal."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        a = labels.index(c)
        b = labels.index(c, a + 1)
        if t.shape[a] != t.shape[b]:
            raise ShapeError(
                f"einsum letter {c!r} repeats in one term over axes of sizes "
                f"{t.shape[a]} and {t.shape[b]}; a diagonal needs equal sizes"
            )
        t = t.diagonal(0, a, b)  # (the diagonal becomes the last axis)
        labels = [x for i, x in enumerate(labels) if i not in (a, b)] + [c]
    return t, labels


def _selected_gradient(g: Tensor, x: Tensor, mask: Tensor) -> tuple[Tensor, None]:
    """The gradient of ``x.masked_select(mask)`` (both flat): each selected element's share of
    ``g``, read at its rank among the selected ones (a gather, where the gather's own rule would
    compare every position with every selected one)."""
    if g.shape[0] == 0:
        return x.zeros_like(), None
    rank = (mask.cast(dtypes.int32).cumsum(0) - 1).clip(0, g.shape[0] - 1)
    return mask.where(g._gathered(0, rank), 0).cast(x.dtype), None


def _rows_gradient(g: Tensor, weight: Tensor, ids: Tensor) -> tuple[Tensor, None]:
    """The gradient of ``ids._rows_of(weight)`` (an embedding): each row of the weight gets the
    sum of the gradient's rows whose id it is. With a vocabulary at least ``PAIRED_IDS`` times
    the ids' count that sum is taken per position (``_paired_rows``), else as one matmul of which
    ids are each row, (V, N), with the gradient's rows (N, *rest). The gather's own rule would
    compare each id once per element of its row (the index is broadcast along the row), and its
    sum comes out in (rest, V) order: that kernel ran at a third of a matmul's speed in the GPT's
    step."""
    vocab, rest = weight.shape[0], weight.shape[1:]
    flat = ids.reshape(1, -1)  # (checked by the caller: one_hot would check again)
    rows = g.reshape(flat.shape[1], prod(rest))
    if 0 < flat.shape[1] and vocab >= PAIRED_IDS * flat.shape[1]:
        return _paired_rows(rows, flat, vocab).reshape(weight.shape).cast(weight.dtype), None
    # (V, N), not the transpose of (N, V): its rows, of the ids' count, seldom alias in the
    # level-1 cache as the rows of a 1024-word vocabulary do (4 KB)
    hot = (type(g).arange(vocab, device=g.device).reshape(vocab, 1) == flat).cast(g.dtype)
    return (hot @ rows).reshape(weight.shape).cast(weight.dtype), None


def _paired_rows(rows: Tensor, flat: Tensor, count: int, selected: bool = False) -> Tensor:
    """(count, C): for each id in ``[0, count)``, the sum of the ``rows`` (N, C) at the positions
    of ``flat`` (1, N) holding it, 0 for an id it lacks. Each position first sums the rows of
    every position with its id, (N, N) by (N, C); each id then reads that sum at its last
    position, found by a (count, N) max of comparisons. For a GPT-2 vocabulary (50,257 ids) and
    512 positions of 768 that is 0.4 GFLOP where a one-hot matmul is 40. The pairs' sum is a
    matmul, or with ``selected`` a select and sum, so that an inf or nan in one row reaches only
    its own id's sum (``index_add``'s promise; a 0 times inf is nan)."""
    n = flat.shape[1]
    same = flat.reshape(n, 1) == flat
    if selected:
        pairs = same.unsqueeze(-1).where(rows.unsqueeze(0), 0).sum(1, dtype=rows.dtype)
    else:
        pairs = same.cast(rows.dtype) @ rows
    sums = pairs.pad(((1, 0), (0, 0)))  # row 0: an id no position holds
    ordinal = type(rows).arange(1, n + 1, device=rows.device).reshape(1, n)
    hits = type(rows).arange(count, device=rows.device).reshape(count, 1) == flat
    last = hits.where(ordinal, 0).max(1, keepdim=True)  # (count, 1): 1 + the last position, or 0
    return sums._gathered(0, last.expand(count, rows.shape[1]))


def _gather_gradient(g: Tensor, table: Tensor, index: Tensor, axis: int) -> tuple[Tensor, None]:
    """The gradient of ``table._gathered(axis, index)``: each element of ``g`` added into the
    table element it was read from (and summed over the axes the table was broadcast along)."""
    n = table.shape[axis]
    hits = index.unsqueeze(-1) == type(g).arange(n, device=g.device)  # index.shape + (n,)
    # a product, not a select: summed over the index's positions it is a matmul of the one-hot
    # rows with the gradient, which runs as one (an embedding's backward)
    spread = hits.cast(g.dtype) * g.unsqueeze(-1)
    pairs = enumerate(zip(table.shape, index.shape))
    broadcast = [a for a, (t, i) in pairs if t == 1 != i and a != axis]
    summed = spread.sum(tuple([axis, *broadcast]), keepdim=True)
    return summed.transpose(axis, -1).squeeze(-1).cast(table.dtype), None
