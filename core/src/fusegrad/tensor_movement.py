"""Movement methods of ``Tensor``: views that never copy.

Six primitives (reshape, permute, expand, pad, shrink, flip) become graph nodes; everything
else here (transpose, squeeze, slicing with steps...) is built from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fusegrad.dtype import dtypes
from fusegrad.errors import ShapeError
from fusegrad.helpers import prod
from fusegrad.uop import ops
from fusegrad.uop.ops import Ops, UOp, is_symbolic, sym_eval

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor


def _size(x: Any) -> int | UOp:
    """An int, or a bound Variable (an end of a shrink may be one: the first ``seq`` rows)."""
    return x if isinstance(x, UOp) else int(x)


def _sizes(args: tuple) -> tuple:
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


class MovementMixin:
    """Reshaping, reordering, broadcasting, padding and slicing."""

    __slots__ = ()

    uop: UOp
    device: str
    shape: tuple[int, ...]
    ndim: int

    def _move(self, op: Ops, arg: Any) -> Tensor:
        return self._wrap(UOp(op, self.uop.dtype, (self.uop,), arg), self.device)  # type: ignore[attr-defined]

    def _axis(self, axis: int, ndim: int | None = None) -> int:
        """A non-negative axis; an IndexError names the valid range."""
        n = self.ndim if ndim is None else ndim
        if not -max(n, 1) <= axis < max(n, 1):
            raise IndexError(f"axis {axis} is out of range for a {n}-d tensor (valid: {-n}..{n - 1})")
        return axis % max(n, 1)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """The same elements in a new shape; one size may be -1 (inferred)."""
        new = _sizes(shape)
        if ops.VARIABLES_USED and (is_symbolic(new) or is_symbolic(self.shape)):
            return self._reshape_symbolic(new)
        if new.count(-1) > 1:
            raise ShapeError(f"reshape to {new}: only one size may be -1")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known:  # type: ignore[attr-defined]
                raise ShapeError(f"cannot reshape {self.shape} to {new}: sizes do not divide")
            new = tuple(self.numel() // known if s == -1 else s for s in new)  # type: ignore[attr-defined]
        if any(s < 0 for s in new) or prod(new) != prod(self.shape):
            raise ShapeError(
                f"cannot reshape {self.shape} ({prod(self.shape)} elements) to {new} ({prod(new)} elements)"
            )
        if new == self.shape:
            return self  # type: ignore[return-value]
        return self._move(Ops.RESHAPE, new)

    def _reshape_symbolic(self, new: tuple) -> Tensor:
        """A reshape where a size is a bound variable: checked with the values bound now."""
        if any(not isinstance(s, (int, UOp)) for s in new) or -1 in new:
            raise ShapeError(f"reshape to {new}: sizes must be ints or bound variables (no -1)")
        old_n, new_n = prod(sym_eval(s) for s in self.shape), prod(sym_eval(s) for s in new)
        if old_n != new_n:
            raise ShapeError(f"cannot reshape {self.shape} ({old_n} elements) to {new} ({new_n} elements)")
        if new == self.shape:
            return self
        from fusegrad.tensor import _unreshaped

        # a reshape of a reshape is one: a buffer viewed with a symbolic shape stays a buffer
        src = _unreshaped(self.uop)
        return self._wrap(UOp(Ops.RESHAPE, src.dtype, (src,), new), self.device)  # type: ignore[attr-defined]

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        return self.reshape(*shape)

    def permute(self, *order: int | Sequence[int]) -> Tensor:
        """Reorder the axes: ``x.permute(1, 0)`` swaps the two axes of a matrix."""
        axes = tuple(self._axis(a) for a in _sizes(order))
        if sorted(axes) != list(range(self.ndim)):
            raise ShapeError(f"permute of a {self.ndim}-d tensor needs each axis once, got {_sizes(order)}")
        if axes == tuple(range(self.ndim)):
            return self  # type: ignore[return-value]
        return self._move(Ops.PERMUTE, axes)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802
        """The transpose (all axes reversed)."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape: int | Sequence[int]) -> Tensor:
        """Repeat size-1 axes (and add leading axes) without copying; -1 keeps a size."""
        new = _sizes(shape)
        if len(new) < self.ndim:
            raise ShapeError(f"cannot expand {self.shape} to fewer dimensions {new}")
        old = (1,) * (len(new) - self.ndim) + self.shape
        new = tuple(o if n == -1 else n for o, n in zip(old, new))
        for o, n in zip(old, new):
            if o != n and o != 1:
                raise ShapeError(f"cannot expand {self.shape} to {new}: only size-1 axes can grow")
        x = self.reshape(old)
        return x if new == old else x._move(Ops.EXPAND, new)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        return self if self.shape == shape else self.expand(shape)

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 axis at ``dim``."""
        dim = self._axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Remove size-1 axes (only ``dim`` if given)."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dim = self._axis(dim)
        if self.shape and self.shape[dim] != 1:
            return self  # type: ignore[return-value]
        return self.reshape(self.shape[:dim] + self.shape[dim + 1 :])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge axes ``start_dim..end_dim`` into one."""
        if self.ndim == 0:
            return self.reshape(1)
        a, b = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:a] + (prod(self.shape[a : b + 1]),) + self.shape[b + 1 :])

    def pad(self, padding: Sequence[tuple[int, int] | None], value: float = 0.0) -> Tensor:
        """Pad with ``value``: one ``(before, after)`` per axis (None for none), as tinygrad."""
        if len(padding) != self.ndim:
            raise ShapeError(f"pad needs one (before, after) per axis of {self.shape}, got {padding}")
        arg = tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
        if any(b < 0 or a < 0 for b, a in arg):
            cut = tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(arg, self.shape))
            return self.shrink(cut).pad([(max(b, 0), max(a, 0)) for b, a in arg], value)
        if all(p == (0, 0) for p in arg):
            return self  # type: ignore[return-value]
        padded = self._move(Ops.PAD, arg)
        if value == 0:
            return padded
        inside = self.full_like(True, dtypes.bool)._move(Ops.PAD, arg)  # type: ignore[attr-defined]
        return inside.where(padded, padded.full_like(value))  # keeps the tensor's dtype, as torch

    def shrink(self, ranges: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep ``[start, end)`` of each axis (None keeps the whole axis)."""
        arg = tuple((0, s) if r is None else (_size(r[0]), _size(r[1])) for r, s in zip(ranges, self.shape))
        for (b, e), s in zip(arg, self.shape):  # a symbolic size is checked with its bound value
            if not 0 <= sym_eval(b) <= sym_eval(e) <= sym_eval(s):
                raise ShapeError(f"shrink {arg} does not fit shape {self.shape}")
        if all(r == (0, s) for r, s in zip(arg, self.shape)):
            return self  # type: ignore[return-value]
        return self._move(Ops.SHRINK, arg)

    def flip(self, axis: int | Sequence[int]) -> Tensor:
        """Reverse the order of elements along ``axis``."""
        axes = {self._axis(a) for a in ((axis,) if isinstance(axis, int) else axis)}
        return self._move(Ops.FLIP, tuple(i in axes for i in range(self.ndim)))

    # ---- indexing --------------------------------------------------------------------------------

    def __getitem__(self, index: Any) -> Tensor:
        """Basic indexing: ints (negative too), slices with any step, None and Ellipsis."""
        if ops.VARIABLES_USED and is_symbolic(self.shape):
            raise ShapeError(f"indexing a tensor of symbolic shape {self.shape} is not supported; "
                             "use shrink, or index before binding the Variable")
        items = list(index) if isinstance(index, tuple) else [index]
        if any(isinstance(i, (MovementMixin, list)) for i in items):
            return self._getitem_tensor(index)  # type: ignore[attr-defined]
        n_real = sum(1 for i in items if i is not None and i is not Ellipsis)
        if n_real > self.ndim:
            raise IndexError(f"too many indices ({n_real}) for a {self.ndim}-d tensor")
        if Ellipsis in items:
            at = items.index(Ellipsis)
            items[at : at + 1] = [slice(None)] * (self.ndim - n_real)
        n_given = sum(1 for i in items if i is not None)
        items += [slice(None)] * (self.ndim - n_given)
        x: Tensor = self  # type: ignore[assignment]
        out_shape: list[int] = []
        axis = 0
        for item in items:
            if item is None:
                out_shape.append(1)
                continue
            if isinstance(item, bool) or not isinstance(item, (int, slice)):
                raise IndexError(f"unsupported index {item!r}; use ints, slices, None or ...")
            x, size = x._index_axis(axis, item)
            if size is not None:
                out_shape.append(size)
            axis += 1
        return x.reshape(tuple(out_shape))

    def _index_axis(self, axis: int, item: int | slice) -> tuple[Tensor, int | None]:
        """Apply one index to one axis; returns the tensor and the kept size (None if dropped)."""
        size = self.shape[axis]
        if isinstance(item, int):
            if not -size <= item < size:
                raise IndexError(f"index {item} is out of range for axis {axis} of size {size}")
            i = item % size
            return self.shrink([(i, i + 1) if a == axis else None for a in range(self.ndim)]), None
        start, stop, step = item.indices(size)
        if step < 0:
            flipped = self.flip(axis)
            start, stop = size - 1 - start, size - 1 - stop
            return flipped._strided(axis, start, stop, -step)
        return self._strided(axis, start, stop, step)

    def _strided(self, axis: int, start: int, stop: int, step: int) -> tuple[Tensor, int]:
        """Elements ``start, start+step, ...`` below ``stop`` of ``axis``: shrink, pad, reshape, shrink."""
        count = max(0, -(-(stop - start) // step))
        if count == 0:
            return self.shrink([(0, 0) if a == axis else None for a in range(self.ndim)]), 0
        x = self.shrink([(start, min(start + count * step, self.shape[axis])) if a == axis else None
                         for a in range(self.ndim)])
        if step == 1:
            return x, count
        extra = count * step - x.shape[axis]
        x = x.pad([(0, extra) if a == axis else None for a in range(self.ndim)])
        split = x.shape[:axis] + (count, step) + x.shape[axis + 1 :]
        x = x.reshape(split).shrink([(0, 1) if a == axis + 1 else None for a in range(len(split))])
        return x.reshape(x.shape[:axis] + (count,) + x.shape[axis + 2 :]), count
