"""Movement methods of ``Tensor``: views that never copy.

Six primitives (reshape, permute, expand, pad, shrink, flip) become graph nodes; everything
else here (transpose, squeeze, slicing with steps, diagonal, unfold...) is built from them.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.errors import (
    InvalidArgument,
    InvalidIndex,
    InvalidType,
    ShapeError,
    UnknownOption,
)
from fusegrad.helpers import prod
from fusegrad.tensor.base import TensorBase
from fusegrad.uop import ops
from fusegrad.uop.ops import Ops, UOp, is_symbolic, sym_eval

if TYPE_CHECKING:
    from fusegrad.device import Buffer
    from fusegrad.tensor.tensor import Tensor


def _size(x: Any) -> int | UOp:
    """An int, or a bound Variable (an end of a shrink may be one: the first ``seq`` rows)."""
    return x if isinstance(x, UOp) else int(x)


#: index items besides tensors that make an index "advanced" (numpy's word): they pick elements
ADVANCED_INDEX = (list, tuple, np.ndarray, bool, np.bool_)


def _sizes(args: tuple) -> tuple:
    """The sizes of a reshape, expand or permute: ints, or one sequence of them."""
    return no_float_sizes(
        tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)
    )


def no_float_sizes(sizes: tuple) -> tuple:
    """``sizes``, if none is a float (one is refused here, before it reaches the graph), numpy's
    integers as ints (a size computed with ``np.prod``, ``a.shape[0] // 2``)."""
    if all(type(s) is int for s in sizes):  # (the usual case, checked at every reshape)
        return sizes
    if any(isinstance(s, (float, np.floating)) for s in sizes):
        raise InvalidType(f"sizes must be ints, got {sizes}; write int(size) for a computed size")
    return tuple(int(s) if isinstance(s, np.integer) else s for s in sizes)


#: what an axis or a size given alone may be: an int, or numpy's (not a sequence of them)
ONE_INT = (int, np.integer)


def _check_variable_bounds(sizes: set) -> None:
    """Two Variables of one name but other bounds are two different sizes; say so, as their
    shapes print alike (``(n=4,)`` and ``(n=4,)``)."""
    seen: dict[str, tuple[int, int]] = {}
    for u in (u for s in sizes if isinstance(s, UOp) for u in s.toposort()):
        if u.op is Ops.DEFINE_VAR:
            name, lo, hi = u.arg
            if seen.setdefault(name, (lo, hi)) != (lo, hi):
                raise ShapeError(
                    f"two Variables named {name!r} have different bounds {list(seen[name])} "
                    f"and {[lo, hi]}; make each Variable once and bind that one everywhere"
                )


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape PyTorch broadcasts ``shapes`` to; a ShapeError names them when they don't fit."""
    if all(s == shapes[0] for s in shapes[1:]):  # (the common case: nothing to broadcast)
        return tuple(shapes[0])
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for sizes in zip(*padded):
        big = {s for s in sizes if s != 1}
        if len(big) > 1:
            _check_variable_bounds(big)
            raise ShapeError(
                f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast: "
                "aligned from the last axis, each pair of sizes must be equal or 1"
            )
        out.append(big.pop() if big else 1)
    return tuple(out)


def _unreshaped(u: UOp) -> UOp:
    """What to realize for ``u``: a reshape costs nothing once its source has a buffer."""
    return u.src[0] if u.op is Ops.RESHAPE else u


def buffer_of(u: UOp) -> Buffer | None:
    """The buffer ``u`` reads in order (a BUFFER, or a reshape of one); None for anything else."""
    u = _unreshaped(u)
    return u.arg if u.op is Ops.BUFFER else None


class MovementMixin(TensorBase):
    """Reshaping, reordering, broadcasting, padding and slicing."""

    __slots__ = ()

    uop: UOp
    device: str

    def _move(self, op: Ops, arg: Any) -> Tensor:
        return self._wrap(UOp(op, self.uop.dtype, (self.uop,), arg), self.device)

    def _axis(self, axis: int, ndim: int | None = None) -> int:
        """A non-negative axis; an IndexError names the valid range."""
        n = self.ndim if ndim is None else ndim
        m = max(n, 1)  # a 0-d tensor has axis 0 (and -1), as in PyTorch
        if not -m <= axis < m:
            raise InvalidIndex(
                f"axis {axis} is out of range for a {n}-d tensor (valid: {-m}..{m - 1})"
            )
        return int(axis) % m

    def reshape(self, *shape: int | None | Sequence[int | None]) -> Tensor:
        """The same elements in a new shape; one size may be -1 (inferred), and None keeps the
        size of the axis at that position (as tinygrad).

        >>> Tensor.zeros(2, 3, 4).reshape(None, -1).shape
        (2, 12)
        """
        new = _sizes(shape)
        if any(s is None for s in new):
            if any(s is None for s in new[self.ndim :]):
                raise ShapeError(
                    f"reshape to {new}: None keeps the size of the axis at its "
                    f"position, but {self.shape} has only {self.ndim}"
                )
            new = tuple(self.shape[i] if s is None else s for i, s in enumerate(new))
        if ops.VARIABLES_USED and (is_symbolic(new) or is_symbolic(self.shape)):
            return self._reshape_symbolic(new)
        if new.count(-1) > 1:
            raise ShapeError(f"reshape to {new}: only one size may be -1")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0:  # (then any size fits no elements: PyTorch refuses to guess too)
                raise ShapeError(
                    f"cannot reshape {self.shape} to {new}: with another size 0, "
                    "the -1 could be any size; give it explicitly"
                )
            if self.numel() % known:
                raise ShapeError(f"cannot reshape {self.shape} to {new}: sizes do not divide")
            new = tuple(self.numel() // known if s == -1 else s for s in new)
        if any(s < 0 for s in new) or prod(new) != prod(self.shape):
            raise ShapeError(
                f"cannot reshape {self.shape} ({prod(self.shape)} elements) to {new} "
                f"({prod(new)} elements); the new sizes must multiply to {prod(self.shape)} "
                "(one of them may be -1)"
            )
        if new == self.shape:
            return cast("Tensor", self)
        return self._move(Ops.RESHAPE, new)

    def _reshape_symbolic(self, new: tuple) -> Tensor:
        """A reshape where a size is a bound variable: checked with the values bound now."""
        if any(not isinstance(s, (int, UOp)) for s in new) or -1 in new:
            raise ShapeError(f"reshape to {new}: sizes must be ints or bound variables (no -1)")
        old_n, new_n = prod(sym_eval(s) for s in self.shape), prod(sym_eval(s) for s in new)
        if old_n != new_n:
            raise ShapeError(
                f"cannot reshape {self.shape} ({old_n} elements) to {new} ({new_n} elements)"
            )
        if new == self.shape:
            return cast("Tensor", self)
        # a reshape of a reshape is one: a buffer viewed with a symbolic shape stays a buffer
        src = _unreshaped(self.uop)
        return self._wrap(UOp(Ops.RESHAPE, src.dtype, (src,), new), self.device)

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        return self.reshape(*shape)

    def permute(self, *order: int | Sequence[int]) -> Tensor:
        """Reorder the axes: ``x.permute(1, 0)`` swaps the two axes of a matrix."""
        axes = tuple(self._axis(a) for a in _sizes(order))
        if sorted(axes) != list(range(self.ndim)):
            raise ShapeError(
                f"permute of a {self.ndim}-d tensor needs each axis once, got {_sizes(order)}"
            )
        if axes == tuple(range(self.ndim)):
            return cast("Tensor", self)
        return self._permuted(axes)

    def _permuted(self, axes: tuple[int, ...]) -> Tensor:
        """A permute, or the reshape it is when it moves only axes of size 1 (the others keep
        their order: attention's (B, H, 1, D) -> (B, 1, H, D) of a decode step): kernels then
        read the buffer in order, not through a permuted view the optimiser plans around."""
        shape = self.shape
        kept = [a for a in axes if type(shape[a]) is not int or shape[a] != 1]
        if kept == sorted(kept) and all(type(s) is int for s in shape):
            return self.reshape(tuple(shape[a] for a in axes))
        return self._move(Ops.PERMUTE, axes)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two axes (of a 0-d tensor, axis 0 with itself)."""
        n = len(self.uop.shape)
        a, b = self._axis(dim0, n), self._axis(dim1, n)
        if n == 0 or a == b:
            return cast("Tensor", self)
        order = list(range(n))
        order[a], order[b] = order[b], order[a]
        return self._permuted(tuple(order))  # a valid order by construction

    @property
    def T(self) -> Tensor:  # noqa: N802
        """The transpose (all axes reversed)."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape: int | Sequence[int]) -> Tensor:
        """Repeat size-1 axes (and add leading axes) without copying; -1 keeps a size."""
        new = _sizes(shape)
        if len(new) < self.ndim:
            raise ShapeError(
                f"cannot expand {self.shape} to fewer dimensions {new}; give a size for each "
                "axis (-1 keeps one)"
            )
        old = (1,) * (len(new) - self.ndim) + self.shape
        if any(isinstance(n, int) and n < -1 for n in new):
            raise ShapeError(
                f"cannot expand {self.shape} to {new}: sizes must be non-negative "
                "(or -1 to keep a size)"
            )
        new = tuple(o if n == -1 else n for o, n in zip(old, new))
        for o, n in zip(old, new):
            if o != n and o != 1:
                raise ShapeError(f"cannot expand {self.shape} to {new}: only size-1 axes can grow")
        x = self.reshape(old)
        return x if new == old else x._move(Ops.EXPAND, new)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        return cast("Tensor", self) if self.shape == shape else self.expand(shape)

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 axis at ``dim``."""
        dim = self._axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """Remove size-1 axes (only those of ``dim``, an axis or several, if given)."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dims = self._distinct_axes((dim,) if isinstance(dim, ONE_INT) else dim)
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in dims or s != 1))

    def _distinct_axes(self, axes: Sequence[int]) -> tuple[int, ...]:
        """``axes`` made non-negative; an axis named twice is refused, as PyTorch does."""
        out = tuple(self._axis(a) for a in axes)
        for i, a in enumerate(out):
            if a in out[:i]:
                raise InvalidArgument(
                    f"dim {a} appears multiple times in the list of dims {tuple(axes)}; "
                    "name each axis once"
                )
        return out

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge axes ``start_dim..end_dim`` into one (a 0-d tensor becomes 1-d)."""
        a, b = self._axis(start_dim), self._axis(end_dim)
        if a > b:
            raise ShapeError(
                f"flatten({start_dim}, {end_dim}) of a {self.ndim}-d tensor: "
                "start_dim comes after end_dim"
            )
        if self.ndim == 0:
            return self.reshape(1)
        return self.reshape(self.shape[:a] + (prod(self.shape[a : b + 1]),) + self.shape[b + 1 :])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split axis ``dim`` into ``sizes`` (one of them may be -1), undoing ``flatten``.

        >>> Tensor.zeros(2, 12).unflatten(1, (3, -1)).shape
        (2, 3, 4)
        """
        if self.ndim == 0:
            raise InvalidIndex("unflatten of a 0-d tensor: it has no axis to split")
        dim, sizes = self._axis(dim), tuple(sizes)
        n, inferred = self.shape[dim], sizes.count(-1)
        known = prod(s for s in sizes if s != -1)
        fits = known == n if inferred == 0 else inferred == 1 and known > 0 and n % known == 0
        if not sizes or any(s < -1 for s in sizes) or not fits:
            raise ShapeError(
                f"unflatten: sizes {sizes} do not multiply up to the size {n} of "
                f"dim {dim} of {self.shape} (at most one size may be -1)"
            )
        sizes = tuple(n // known if s == -1 else s for s in sizes)
        return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1 :])

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        """Every window of ``size`` elements along ``dimension``, ``step`` apart, as a new last axis
        (``torch.Tensor.unfold``); ``dimension`` keeps one entry per window. A view, no copy.

        >>> Tensor([1, 2, 3, 4, 5]).unfold(0, 2, 2).tolist()
        [[1, 2], [3, 4]]
        """
        dim = self._axis(dimension)
        n = self.shape[dim] if self.ndim else 1
        if step <= 0 or size < 0:
            raise InvalidArgument(
                f"unfold needs size >= 0 and step > 0, got size={size}, step={step}"
            )
        if size > n:
            raise ShapeError(
                f"unfold: the window size {size} is larger than dim {dim} of {self.shape} ({n})"
            )
        if self.ndim == 0:
            return self.reshape(1).unfold(0, size, step).reshape(size)
        count = (n - size) // step + 1
        x = self.permute([i for i in range(self.ndim) if i != dim] + [dim])  # (..., n)
        batch = x.shape[:-1]
        # row k of a (size, n + 1) view of ``size`` copies of x, padded by ``size``, is x moved k
        # left: rows[k, c] = x[k + c] while k + c < n, all that the windows read
        rows = x.unsqueeze(-2).expand(batch + (size, n)).reshape(batch + (size * n,))
        rows = rows.pad([None] * len(batch) + [(0, size)]).reshape(batch + (size, n + 1))
        windows, _ = rows._strided(len(batch) + 1, 0, (count - 1) * step + 1, step)
        out = windows.transpose(-1, -2)  # (..., count, size): out[w, k] = x[w * step + k]
        order = list(range(dim)) + [self.ndim - 1] + list(range(dim, self.ndim - 1)) + [self.ndim]
        return out.permute(order)

    def pad(
        self,
        padding: int | Sequence[int] | Sequence[tuple[int, int] | None],
        value: float = 0.0,
        mode: str = "constant",
    ) -> Tensor:
        """Pad with ``value``, or with the tensor's own elements; negative amounts crop.

        ``padding`` is an int (that much before and after every axis), PyTorch's flat
        ``(left, right, top, bottom, ...)`` (pairs for the last axes, the last axis first, as
        ``F.pad``), or tinygrad's one ``(before, after)`` or None per axis. ``mode`` is
        ``F.pad``'s: "constant", "reflect" (mirrored, the edge not repeated), "replicate" (the
        edge repeated) or "circular" (wrapped around).

        >>> Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
        [3, 2, 1, 2, 3, 2]
        """
        arg = self._pad_pairs(padding)
        for axis, ((before, after), size) in enumerate(zip(arg, self.shape)):
            if isinstance(size, int) and (size + min(before, 0) + min(after, 0) < 0):
                raise ShapeError(
                    f"pad {(before, after)} of axis {axis} (size {size}) crops more than the "
                    f"axis holds; negative padding may remove at most {size} elements"
                )
        if mode == "constant":
            return self._pad_constant(arg, value)
        if mode not in ("reflect", "replicate", "circular"):
            raise UnknownOption(
                f"unknown padding mode {mode!r}; use 'constant', 'reflect', "
                "'replicate' or 'circular'"
            )
        if value != 0:
            raise InvalidArgument(
                f"padding mode {mode!r} takes no value (got {value}), as in PyTorch"
            )
        x = cast("Tensor", self)
        for axis, (before, after) in enumerate(arg):
            if (before, after) != (0, 0):
                x = x._pad_edge(axis, before, after, mode)
        return x

    def _pad_pairs(self, padding: Any) -> tuple[tuple[int, int], ...]:
        """One (before, after) per axis from any of ``pad``'s three forms."""
        if isinstance(padding, int):
            return ((padding, padding),) * self.ndim
        items = tuple(padding)
        if all(p is not None and not isinstance(p, (tuple, list)) for p in items):  # F.pad's form
            if len(items) % 2 or len(items) > 2 * self.ndim:
                raise ShapeError(
                    f"pad {items} of a {self.ndim}-d tensor: PyTorch's flat form (left, right, "
                    f"top, bottom, ...) needs an even number of values, at most {2 * self.ndim}"
                )
            pairs = tuple((int(items[i]), int(items[i + 1])) for i in range(0, len(items), 2))
            return ((0, 0),) * (self.ndim - len(pairs)) + pairs[::-1]
        if len(items) != self.ndim:
            raise ShapeError(
                f"pad needs one (before, after) per axis of {self.shape}, got {padding}"
            )
        return tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in items)

    def _pad_constant(self, arg: tuple[tuple[int, int], ...], value: float) -> Tensor:
        """Pad by (before, after) per axis with ``value``; negative amounts crop first."""
        if any(b < 0 or a < 0 for b, a in arg):
            cut = tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(arg, self.shape))
            grow = tuple((max(b, 0), max(a, 0)) for b, a in arg)
            return self.shrink(cut)._pad_constant(grow, value)
        if all(p == (0, 0) for p in arg):
            return cast("Tensor", self)
        padded = self._move(Ops.PAD, arg)
        if value == 0:
            return padded
        inside = self.full_like(True, dtypes.bool)._move(Ops.PAD, arg)
        return inside.where(padded, padded.full_like(value))  # keeps the tensor's dtype, as torch

    def _pad_edge(self, axis: int, before: int, after: int, mode: str) -> Tensor:
        """Pad one axis with its own elements (``pad``'s modes but "constant").

        As PyTorch: reflect and replicate pad from the whole axis, then crop the negative
        amounts; circular crops first, then wraps what is left around at most once."""
        size = self.shape[axis]

        def part(start: int, end: int) -> Tensor:
            return self.shrink([(start, end) if i == axis else None for i in range(self.ndim)])

        if mode == "circular":
            x = part(max(-before, 0), size - max(-after, 0))
            n = x.shape[axis]
            if max(before, after) > n:
                raise ShapeError(
                    f"circular padding ({before}, {after}) of axis {axis} (size {size}, {n} after "
                    f"cropping) wraps around more than once; pad each side by at most {n}"
                )
            before, after = max(before, 0), max(after, 0)
            tiled = x.repeat([3 if i == axis else 1 for i in range(x.ndim)])
            return tiled.shrink(
                [(n - before, 2 * n + after) if i == axis else None for i in range(x.ndim)]
            )
        if mode == "reflect" and max(before, after) >= size:
            raise ShapeError(
                f"reflect padding ({before}, {after}) of axis {axis} (size {size}) must be less "
                "than the axis size on each side"
            )
        if mode == "replicate" and size == 0:
            raise ShapeError(
                f"replicate padding of axis {axis}: the axis is empty, there is nothing to repeat"
            )
        b, a = max(before, 0), max(after, 0)
        if mode == "reflect":
            left, right = part(1, b + 1).flip(axis), part(size - 1 - a, size - 1).flip(axis)
        else:
            sized = lambda n: tuple(n if i == axis else s for i, s in enumerate(self.shape))
            left, right = part(0, 1).expand(sized(b)), part(size - 1, size).expand(sized(a))
        x = left.cat(cast("Tensor", self), right, dim=axis)
        return x.shrink(
            [
                (max(-before, 0), x.shape[axis] - max(-after, 0)) if i == axis else None
                for i in range(x.ndim)
            ]
        )

    def shrink(self, ranges: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep ``[start, end)`` of each axis (None keeps the whole axis)."""
        arg = tuple(
            (0, s) if r is None else (_size(r[0]), _size(r[1])) for r, s in zip(ranges, self.shape)
        )
        for (b, e), s in zip(arg, self.shape):  # a symbolic size is checked with its bound value
            if not 0 <= sym_eval(b) <= sym_eval(e) <= sym_eval(s):
                raise ShapeError(f"shrink {arg} does not fit shape {self.shape}")
        if all(r == (0, s) for r, s in zip(arg, self.shape)):
            return cast("Tensor", self)
        return self._move(Ops.SHRINK, arg)

    def flip(self, axis: int | Sequence[int]) -> Tensor:
        """Reverse the order of elements along ``axis`` (one axis or several, each once)."""
        axes = self._distinct_axes((axis,) if isinstance(axis, ONE_INT) else axis)
        return self._move(Ops.FLIP, tuple(i in axes for i in range(self.ndim)))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal ``offset`` above the main one (below it if negative) of the matrices on
        axes ``dim1`` and ``dim2``, as a new last axis (``torch.diagonal``). A view, no copy.

        >>> Tensor([[1, 2, 3], [4, 5, 6]]).diagonal(1).tolist()
        [2, 6]
        """
        a, b = self._axis(dim1), self._axis(dim2)
        if a == b:
            raise InvalidArgument(
                f"diagonal needs two different axes, got dim1={dim1}, dim2={dim2}"
            )
        x = self.permute([i for i in range(self.ndim) if i not in (a, b)] + [a, b])
        batch, (rows, cols) = x.shape[:-2], x.shape[-2:]
        n = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
        r, c = (max(-offset, 0), max(offset, 0)) if n else (0, 0)
        keep = [None] * len(batch)
        square = x.shrink(keep + [(r, r + n), (c, c + n)])  # the diagonal is the main one
        # seen as n rows of n + 1, the flat square has its diagonal (i * (n + 1)) as first column
        rows_of = square.reshape(batch + (n * n,)).pad(keep + [(0, n)]).reshape(batch + (n, n + 1))
        return rows_of.shrink(keep + [None, (0, 1)]).reshape(batch + (n,))

    def diag(self, diagonal: int = 0) -> Tensor:
        """Of a 1-d tensor, the square matrix with it as diagonal ``diagonal`` (above the main
        one, below if negative) and zeros elsewhere; of a matrix, that diagonal (``torch.diag``).

        >>> Tensor([1, 2]).diag().tolist()
        [[1, 0], [0, 2]]
        """
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ShapeError(f"diag takes a 1-d or 2-d tensor, got shape {self.shape}")
        n, k = self.shape[0], abs(diagonal)
        # n rows of n + 1 with the vector as first column, read as n rows of n: the diagonal
        flat = self.reshape(n, 1).pad(((0, 0), (0, n))).reshape(n * (n + 1))
        square = flat.shrink(((0, n * n),)).reshape(n, n)
        return square.pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))

    # ---- indexing --------------------------------------------------------------------------------

    def __getitem__(self, index: Any) -> Tensor:
        """Basic indexing: ints (negative too), slices with any step, None and Ellipsis. Int
        lists, arrays and tensors and bool masks go to ``_getitem_tensor`` (advanced indexing).

        >>> Tensor.arange(12).reshape(3, 4)[1:, ::-2].tolist()
        [[7, 5], [11, 9]]
        """
        if ops.VARIABLES_USED and is_symbolic(self.shape):
            raise ShapeError(
                f"indexing a tensor of symbolic shape {self.shape} is not supported; "
                "use shrink, or index before binding the Variable"
            )
        items = list(index) if isinstance(index, tuple) else [index]
        if any(isinstance(i, (MovementMixin, *ADVANCED_INDEX)) for i in items):
            return self._getitem_tensor(items)
        used = sum(1 for i in items if i is not None and i is not Ellipsis)
        items = self._fill_ellipsis(items, used)
        x = cast("Tensor", self)
        out_shape: list[int] = []
        axis = 0
        for item in items:
            if item is None:
                out_shape.append(1)
                continue
            if not isinstance(item, slice):
                if not hasattr(item, "__index__"):
                    raise InvalidIndex(
                        f"unsupported index {item!r}; use ints, slices, None, ..., "
                        "int lists or tensors, or bool masks"
                    )
                item = operator.index(item)  # (a numpy int too)
            x, size = x._index_axis(axis, item)
            if size is not None:
                out_shape.append(size)
            axis += 1
        return x.reshape(tuple(out_shape))

    def _fill_ellipsis(self, items: list, used: int) -> list:
        """``items`` with the Ellipsis (at most one) replaced by full slices, and full slices
        appended, so that they cover every axis; ``used`` is how many axes the items index."""
        dots = [k for k, i in enumerate(items) if i is Ellipsis]
        if len(dots) > 1:
            raise InvalidIndex(f"an index can only have a single ellipsis ('...'), got {len(dots)}")
        if used > self.ndim:
            hint = " (a 0-d tensor's value is .item())" if self.ndim == 0 else ""
            raise InvalidIndex(
                f"too many indices for tensor of dimension {self.ndim} ({used} given){hint}"
            )
        fill = [slice(None)] * (self.ndim - used)
        return items[: dots[0]] + fill + items[dots[0] + 1 :] if dots else items + fill

    def _index_axis(self, axis: int, item: int | slice) -> tuple[Tensor, int | None]:
        """Apply one index to one axis; returns the tensor and the kept size (None if dropped)."""
        size = self.shape[axis]
        if isinstance(item, int):
            if not -size <= item < size:
                raise InvalidIndex(
                    f"index {item} is out of bounds for dimension {axis} with size {size}"
                )
            i = item % size
            return self.shrink([(i, i + 1) if a == axis else None for a in range(self.ndim)]), None
        start, stop, step = item.indices(size)
        if step < 0:
            flipped = self.flip(axis)
            start, stop = size - 1 - start, size - 1 - stop
            return flipped._strided(axis, start, stop, -step)
        return self._strided(axis, start, stop, step)

    def _strided(self, axis: int, start: int, stop: int, step: int) -> tuple[Tensor, int]:
        """Elements ``start, start+step, ...`` below ``stop`` of ``axis``: shrink, pad, reshape,
        shrink."""
        count = max(0, -(-(stop - start) // step))
        if count == 0:
            return self.shrink([(0, 0) if a == axis else None for a in range(self.ndim)]), 0
        x = self.shrink(
            [
                (start, min(start + count * step, self.shape[axis])) if a == axis else None
                for a in range(self.ndim)
            ]
        )
        if step == 1:
            return x, count
        extra = count * step - x.shape[axis]
        x = x.pad([(0, extra) if a == axis else None for a in range(self.ndim)])
        split = x.shape[:axis] + (count, step) + x.shape[axis + 1 :]
        x = x.reshape(split).shrink([(0, 1) if a == axis + 1 else None for a in range(len(split))])
        return x.reshape(x.shape[:axis] + (count,) + x.shape[axis + 2 :]), count
