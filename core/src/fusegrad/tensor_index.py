"""Joining, splitting, gathering and indexing methods of ``Tensor``: cat, stack, split, roll,
tril, gather, scatter, indexing with int tensors and bool masks, ``__setitem__``, einsum.

All of them are graphs of the primitives in ``tensor.py``; gathers and tensor indexing compare
indices with ``arange`` and sum (a one-hot reduce), which fuses into one kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fusegrad.dtype import dtypes, promote_types
from fusegrad.errors import FusegradError, ShapeError

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor


def _tuple(x: int | Sequence[int], n: int, name: str) -> tuple[int, ...]:
    """An int repeated ``n`` times, or a sequence of exactly ``n`` ints."""
    if isinstance(x, int):
        return (x,) * n
    if len(x) != n:
        raise ShapeError(f"{name} needs {n} values (one per spatial axis), got {tuple(x)}")
    return tuple(x)


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "uop")


class IndexMixin:
    """Joining, splitting, gathering, scattering and advanced indexing."""

    __slots__ = ()

    # ---- joining and splitting -------------------------------------------------------------------

    def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along ``dim``: each is padded into place and the pads are added.

        >>> Tensor([1, 2]).cat(Tensor([3]), dim=0).tolist()
        [1, 2, 3]
        """
        tensors = [self, *others]
        dim = self._axis(dim)
        for t in others:
            if t.ndim != self.ndim or any(
                a != b
                for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=False))
                if i != dim
            ):
                raise ShapeError(
                    f"cat along dim {dim}: shape {t.shape} does not match {self.shape}"
                )
        dtype = functools.reduce(promote_types, (t.dtype for t in tensors))
        tensors = [t.cast(dtype) for t in tensors]
        work = [t.cast(dtypes.uint8) for t in tensors] if dtype == dtypes.bool else tensors
        total, start, out = sum(t.shape[dim] for t in work), 0, None
        for t in work:
            size = t.shape[dim]
            placed = t.pad(
                [(start, total - start - size) if i == dim else None for i in range(t.ndim)]
            )
            out = placed if out is None else out + placed
            start += size
        return out.cast(dtype)

    def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along a new axis ``dim``."""
        dim = self._axis(dim, self.ndim + 1)
        return self.unsqueeze(dim).cat(*(t.unsqueeze(dim) for t in others), dim=dim)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Pieces of ``sizes`` along ``dim`` (an int: equal pieces, the last may be smaller)."""
        dim = self._axis(dim)
        n = self.shape[dim]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise FusegradError(f"split size must be positive, got {sizes}")
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
        n = self.shape[self._axis(dim)]
        return self.split(max(1, -(-n // chunks)), dim)

    def repeat(self, *repeats: int | Sequence[int]) -> Tensor:
        """Tile the whole tensor ``repeats`` times along each axis, as ``torch.Tensor.repeat``."""
        reps = (
            tuple(repeats[0]) if len(repeats) == 1 and not isinstance(repeats[0], int) else repeats
        )
        if len(reps) < self.ndim:
            raise ShapeError(
                f"repeat needs at least {self.ndim} counts for shape {self.shape}, got {reps}"
            )
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
        reps = tuple(reps[0]) if len(reps) == 1 and not isinstance(reps[0], int) else reps
        return self.repeat((1,) * (self.ndim - len(reps)) + tuple(reps))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
        """Repeat each element ``repeats`` times along ``dim`` (the flattened tensor if None)."""
        x = self.flatten() if dim is None else self
        dim = 0 if dim is None else x._axis(dim)
        shape = x.shape[: dim + 1] + (repeats,) + x.shape[dim + 1 :]
        out = x.unsqueeze(dim + 1).expand(shape)
        return out.reshape(x.shape[:dim] + (x.shape[dim] * repeats,) + x.shape[dim + 1 :])

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Rotate elements along ``dims`` by ``shifts`` (the flattened tensor if no dims)."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        x = self
        for shift, dim in zip(shifts, dims, strict=False):
            dim = x._axis(dim)
            n = x.shape[dim]
            if n == 0 or shift % n == 0:
                continue
            s = shift % n
            twice = x.repeat([2 if i == dim else 1 for i in range(x.ndim)])
            x = twice.shrink([(n - s, 2 * n - s) if i == dim else None for i in range(x.ndim)])
        return x

    @staticmethod
    def meshgrid(*tensors: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids from 1-d tensors (``indexing="xy"`` swaps the first two axes)."""
        if indexing not in ("ij", "xy"):
            raise FusegradError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
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

        >>> Tensor([0, 2]).one_hot(3).tolist()
        [[1, 0, 0], [0, 0, 1]]
        """
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1
        return (self.unsqueeze(-1) == type(self).arange(num_classes, device=self.device)).cast(
            dtypes.int32
        )

    def _along(self, dim: int, sizes: tuple[int, ...]) -> Tensor:
        """(*sizes, n) with [p, j] = self[p with p[dim] = j]: the ``dim`` axis copied to the end."""
        x = self.unsqueeze(-1).transpose(dim, -1)
        return x.expand(sizes + (self.shape[dim],))

    def _pick(self, mask: Tensor, values: Tensor, axis: int = -1) -> Tensor:
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
        if index.ndim != self.ndim:
            raise ShapeError(
                f"gather index must have {self.ndim} dims like the input, got {index.shape}"
            )
        x = self.shrink([None if i == dim else (0, s) for i, s in enumerate(index.shape)])
        n = self.shape[dim]
        mask = index.unsqueeze(-1) == type(self).arange(n, device=self.device)
        return self._pick(mask, x._along(dim, index.shape))

    def _scatter_parts(
        self, dim: int, index: Tensor, src: Tensor | float
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(mask, values, region): mask[q, k] is true when ``index`` sends src[q with dim k] to q."""
        dim = self._axis(dim)
        region = tuple(self.shape[i] if i == dim else s for i, s in enumerate(index.shape))
        if not _is_tensor(src):
            src = index.full_like(src, self.dtype)
        src = src.cast(self.dtype).shrink([(0, s) for s in index.shape])
        n, k = self.shape[dim], index.shape[dim]
        rows = self._positions_at(dim, n)
        sent = (
            index.unsqueeze(-1)
            .transpose(dim, -1)
            .expand(region[:dim] + (n,) + region[dim + 1 :] + (k,))
        )
        mask = sent == rows
        values = src.unsqueeze(-1).transpose(dim, -1).expand(mask.shape)
        return mask, values, region

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
        """Write ``src`` into a copy of this tensor at ``index`` along ``dim``, as ``torch.scatter``."""
        if reduce is not None:
            return self.scatter_reduce(dim, index, src, {"add": "sum", "multiply": "prod"}[reduce])
        mask, values, region = self._scatter_parts(dim, index, src)
        hit = self._fit(mask._max(-1, False), region, False)  # (an empty index: no hit)
        return hit.where(self._fit(self._pick(mask, values), region, 0), self)

    def scatter_reduce(
        self, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True
    ) -> Tensor:
        """Combine ``src`` into this tensor at ``index`` with ``reduce`` (sum, prod, mean, amax, amin)."""
        mask, values, region = self._scatter_parts(dim, index, src)
        hit = self._fit(mask._max(-1, False), region, False)
        if reduce in ("sum", "mean"):
            total = self._fit(self._pick(mask, values), region, 0)
            if reduce == "sum":
                return (total + self).cast(self.dtype) if include_self else hit.where(total, self)
            count = self._fit(mask.sum(-1), region, 0) + (1 if include_self else 0)
            total = total + self if include_self else total
            mean = (
                total / count.maximum(1)
                if self.dtype.is_float
                else total.floor_divide(count.maximum(1))
            )
            return hit.where(mean.cast(self.dtype), self)
        if reduce in ("amax", "amin", "prod"):
            fill = {"amax": self.dtype.min, "amin": self.dtype.max, "prod": 1}[reduce]
            chosen = mask.where(values, values.full_like(fill))
            part = (
                chosen._max(-1, False)
                if reduce == "amax"
                else chosen._min(-1, False)
                if reduce == "amin"
                else chosen.prod(-1)
            )
            part = self._fit(part.cast(self.dtype), region, fill)
            if include_self:
                part = {"amax": self.maximum, "amin": self.minimum, "prod": self.mul}[reduce](part)
            return hit.where(part.cast(self.dtype), self)
        raise FusegradError(
            f"scatter_reduce reduce must be sum, prod, mean, amax or amin, got {reduce!r}"
        )

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """``value`` where ``mask`` is true, else this tensor (keeping its dtype)."""
        return mask.where(value, self).cast(self.dtype)

    def embedding(self, weight: Tensor) -> Tensor:
        """Rows of ``weight`` picked by this index tensor: shape ``self.shape + weight.shape[1:]``."""
        vocab = weight.shape[0]
        mask = self.unsqueeze(-1) == type(self).arange(vocab, device=self.device)  # (..., V)
        rows = mask.reshape(mask.shape + (1,) * (weight.ndim - 1))
        return weight._pick(rows, weight.reshape((1,) * self.ndim + weight.shape), axis=self.ndim)

    # ---- tensor indexing -------------------------------------------------------------------------

    def _getitem_tensor(self, index: Any) -> Tensor:
        """Indexing where some items are int tensors, int lists or bool masks (numpy rules)."""
        items = list(index) if isinstance(index, tuple) else [index]
        expanded: list[Any] = []
        for item in items:
            if isinstance(item, (list, tuple)) or (_is_tensor(item) and item.dtype == dtypes.bool):
                arr = np.asarray(item.numpy() if _is_tensor(item) else item)
                if (
                    arr.dtype == np.bool_
                ):  # a mask: its coordinates, one int index per axis it spans
                    expanded += [
                        type(self)(c.astype(np.int32), device=self.device) for c in arr.nonzero()
                    ]
                    continue
                item = type(self)(arr.astype(np.int32), device=self.device)
            expanded.append(item)
        dots = [k for k, i in enumerate(expanded) if i is Ellipsis]
        if dots:
            at = dots[0]
            real = sum(1 for i in expanded if i is not None and i is not Ellipsis)
            expanded[at : at + 1] = [slice(None)] * (self.ndim - real)
        # basic indexing first, tracking which axes of the result the tensor indices land on
        basic, where, axis = [], [], 0
        for item in expanded:
            if _is_tensor(item):
                where.append((axis, item))
                basic.append(slice(None))
                axis += 1
            else:
                basic.append(item)
                axis += 0 if isinstance(item, int) else 1
        x = self[tuple(basic)]
        return x._take(where)

    def _take(self, picks: list[tuple[int, Tensor]]) -> Tensor:
        """Index axes with int tensors; their broadcast shape goes where numpy puts it."""
        axes = [a for a, _ in picks]
        from fusegrad.tensor import broadcast_shapes

        bshape = broadcast_shapes(*(t.shape for _, t in picks))
        rest = [i for i in range(self.ndim) if i not in axes]
        x = self.permute(rest + axes)  # (*R, *N)
        nb, nr, nk = len(bshape), len(rest), len(axes)
        x = x.reshape((1,) * nb + x.shape)
        mask = None
        for j, (a, idx) in enumerate(picks):
            n = self.shape[a]
            idx = idx._broadcast_to(bshape) if idx.shape != bshape else idx
            idx = (idx < 0).where(idx + n, idx)
            hot_shape = [1] * nk
            hot_shape[j] = n
            hot = idx.reshape(bshape + (1,) * (nr + nk)) == type(self).arange(
                n, device=self.device
            ).reshape((1,) * (nb + nr) + tuple(hot_shape))
            mask = hot if mask is None else mask & hot
        out = self._pick(mask, x, axis=tuple(range(nb + nr, nb + nr + nk)))  # (*B, *R)
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
        value = value if _is_tensor(value) else type(self).full((), value, self.dtype, self.device)
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
        self.uop = hit.where(new, self).cast(self.dtype).uop

    # ---- einsum and linear -----------------------------------------------------------------------

    @staticmethod
    def einsum(formula: str, *operands: Tensor) -> Tensor:
        """Sum of products over named axes: ``Tensor.einsum("ij,jk->ik", a, b)`` is ``a @ b``."""
        formula = formula.replace(" ", "")
        inputs, _, output = formula.partition("->")
        names = inputs.split(",")
        if len(names) != len(operands):
            raise FusegradError(
                f"einsum {formula!r} names {len(names)} operands, got {len(operands)}"
            )
        if "->" not in formula:
            letters = "".join(names)
            output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
        order = sorted(set("".join(names)), key=lambda c: (c not in output, output.find(c), c))
        sizes: dict[str, int] = {}
        product = None
        for name, t in zip(names, operands, strict=False):
            if len(name) != t.ndim or len(set(name)) != len(name):
                raise FusegradError(
                    f"einsum term {name!r} does not fit shape {t.shape} (repeats unsupported)"
                )
            for c, s in zip(name, t.shape, strict=False):
                if sizes.setdefault(c, s) != s and s != 1 and sizes[c] != 1:
                    raise ShapeError(f"einsum axis {c!r} has sizes {sizes[c]} and {s}")
                sizes[c] = max(sizes[c], s)
            present = [c for c in order if c in name]
            moved = t.permute([name.index(c) for c in present])
            moved = moved.reshape(
                tuple(moved.shape[present.index(c)] if c in name else 1 for c in order)
            )
            product = moved if product is None else product * moved
        summed = tuple(range(len(output), len(order)))
        return product.sum(summed) if summed else product.expand(tuple(sizes[c] for c in order))

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """``x @ weight + bias`` with ``weight`` shaped (in, out), as tinygrad (PyTorch's is transposed)."""
        out = self * weight if weight.ndim == 1 else self.matmul(weight)
        return out + bias if bias is not None else out
