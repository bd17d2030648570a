"""PyTorch's stacking, splitting and accumulating methods of ``Tensor``: hstack, vstack, dstack,
column_stack, tensor_split, tensordot, diff, index_add, index_fill and scatter_add.

Each is a composition of ``cat``, ``shrink``, ``matmul`` and one-hot sums, so the gradients
come from theirs. ``index_add`` sums ``source`` into the rows ``index`` names by comparing
``index`` with every row number: repeated indices add up, as in PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from fusegrad.dtype import dtypes
from fusegrad.errors import InvalidArgument, ShapeError
from fusegrad.helpers import prod
from fusegrad.tensor import bounds
from fusegrad.tensor.base import TensorBase, is_tensor
from fusegrad.tensor.index import PAIRED_IDS, _paired_rows

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor


def _nonempty(name: str, tensors: Sequence[Tensor]) -> list[Tensor]:
    """The tensors of a join given as one sequence (PyTorch's form), at least one of them."""
    if is_tensor(tensors) or not isinstance(tensors, (list, tuple)):
        raise TypeError(
            f"{name} takes a sequence of tensors, e.g. {name}([a, b]), got {type(tensors).__name__}"
        )
    if not tensors:
        raise ShapeError(f"{name} needs at least one tensor, got an empty sequence")
    return list(tensors)


def _at_least(t: Tensor, ndim: int) -> Tensor:
    """``torch.atleast_{ndim}d``: 0-d to (1,)*ndim, (n,) to (1, n) or (1, n, 1), (m, n) to
    (m, n, 1)."""
    if t.ndim >= ndim:
        return t
    if t.ndim == 0:
        return t.reshape((1,) * ndim)
    if t.ndim == 1:
        return t.reshape((1, t.shape[0], 1)[:ndim])
    return t.unsqueeze(-1)


def _pair(dims: Any) -> list[int]:
    return [dims] if isinstance(dims, int) else [int(d) for d in dims]


#: an index_fill compares every row with every index up to this many pairs (one vectorised
#: reduction); past it, it looks each row up in the sorted index (``_index_hit``)
INDEX_COMPARED = 1 << 22


class JoinMixin(TensorBase):
    """hstack/vstack/dstack/column_stack, tensor_split, tensordot, diff, index_add/fill."""

    __slots__ = ()

    # ---- stacking --------------------------------------------------------------------------------

    @staticmethod
    def hstack(tensors: Sequence[Tensor]) -> Tensor:
        """Join along the columns: the first axis of 1-d (and 0-d) tensors, else the second.

        >>> Tensor.hstack([Tensor([1, 2]), Tensor([3])]).tolist()
        [1, 2, 3]
        """
        parts = [_at_least(t, 1) for t in _nonempty("hstack", tensors)]
        return parts[0].cat(*parts[1:], dim=0 if parts[0].ndim == 1 else 1)

    @staticmethod
    def vstack(tensors: Sequence[Tensor]) -> Tensor:
        """Join along the rows, 1-d tensors (n,) taken as rows (1, n).

        >>> Tensor.vstack([Tensor([1, 2]), Tensor([3, 4])]).tolist()
        [[1, 2], [3, 4]]
        """
        parts = [_at_least(t, 2) for t in _nonempty("vstack", tensors)]
        return parts[0].cat(*parts[1:], dim=0)

    @staticmethod
    def dstack(tensors: Sequence[Tensor]) -> Tensor:
        """Join along the third axis (depth), each made at least 3-d as ``torch.atleast_3d``."""
        parts = [_at_least(t, 3) for t in _nonempty("dstack", tensors)]
        return parts[0].cat(*parts[1:], dim=2)

    @staticmethod
    def column_stack(tensors: Sequence[Tensor]) -> Tensor:
        """Join as columns: 0-d and 1-d tensors become (n, 1) columns, others join on axis 1.

        >>> Tensor.column_stack([Tensor([1, 2]), Tensor([3, 4])]).tolist()
        [[1, 3], [2, 4]]
        """
        parts = [t.reshape(-1, 1) if t.ndim <= 1 else t for t in _nonempty("column_stack", tensors)]
        return parts[0].cat(*parts[1:], dim=1)

    # ---- splitting -------------------------------------------------------------------------------

    def tensor_split(
        self, indices_or_sections: int | Sequence[int] | Tensor, dim: int = 0
    ) -> tuple[Tensor, ...]:
        """Views along ``dim``: an int n gives n pieces as equal as can be (the first ones one
        longer), a list of indices cuts before each, as ``torch.tensor_split`` (a piece may be
        empty; indices past the end are clamped, negative ones count from it).

        >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).tensor_split(3)]
        [[1, 2], [3, 4], [5]]
        """
        if self.ndim == 0:
            raise ShapeError("tensor_split needs a tensor with at least one axis, got a 0-d one")
        axis = self._axis(dim)
        n = self.shape[axis]
        cuts = indices_or_sections
        if is_tensor(cuts):
            if not cuts.dtype.is_int or cuts.ndim > 1:
                raise InvalidArgument(
                    f"tensor_split takes a 0-d or 1-d integer tensor, got a "
                    f"{cuts.ndim}-d {cuts.dtype.name} one"
                )
            cuts = cuts.tolist()
        if isinstance(cuts, int):
            if cuts <= 0:
                raise InvalidArgument(f"tensor_split needs a number of sections > 0, got {cuts}")
            sizes = [n // cuts + (i < n % cuts) for i in range(cuts)]
            cuts = [sum(sizes[:i]) for i in range(1, cuts)]
        bounds = [0, *(slice(c).indices(n)[1] for c in cuts), n]
        return tuple(
            self.shrink([(a, max(a, b)) if i == axis else None for i in range(self.ndim)])
            for a, b in zip(bounds, bounds[1:])
        )

    # ---- products and differences ----------------------------------------------------------------

    def tensordot(self, other: Tensor, dims: int | Sequence[Any] = 2) -> Tensor:
        """Sum the products over the last ``dims`` axes of this tensor and the first ``dims`` of
        ``other`` (or over the axes listed in ``dims = (ours, theirs)``), as ``torch.tensordot``.

        >>> Tensor.ones(2, 3).tensordot(Tensor.ones(3, 4), dims=1).shape
        (2, 4)
        """
        if isinstance(dims, int):
            if dims < 0:
                raise InvalidArgument(f"tensordot needs dims >= 0, got dims={dims}")
            if dims > min(self.ndim, other.ndim):
                raise ShapeError(
                    f"tensordot dims={dims} is more than the axes of shapes "
                    f"{self.shape} and {other.shape}"
                )
            ours, theirs = list(range(self.ndim - dims, self.ndim)), list(range(dims))
        else:
            ours, theirs = (_pair(d) for d in dims)
            ours = [self._axis(d) for d in ours]
            theirs = [other._axis(d) for d in theirs]
        if len(ours) != len(theirs):
            raise ShapeError(f"tensordot needs as many axes from each, got {ours} and {theirs}")
        for a, b in zip(ours, theirs):
            if self.shape[a] != other.shape[b]:
                raise ShapeError(
                    f"tensordot contracts axes of different sizes: {self.shape[a]} "
                    f"(axis {a} of {self.shape}) and {other.shape[b]} (axis {b} of "
                    f"{other.shape})"
                )
        free_a = [i for i in range(self.ndim) if i not in ours]
        free_b = [i for i in range(other.ndim) if i not in theirs]
        k = prod(self.shape[i] for i in ours)
        left = self.permute(*free_a, *ours).reshape(prod(self.shape[i] for i in free_a), k)
        right = other.permute(*theirs, *free_b).reshape(k, prod(other.shape[i] for i in free_b))
        return left.matmul(right).reshape(
            *(self.shape[i] for i in free_a), *(other.shape[i] for i in free_b)
        )

    def diff(
        self, n: int = 1, dim: int = -1, prepend: Tensor | None = None, append: Tensor | None = None
    ) -> Tensor:
        """The ``n``-th forward difference along ``dim``, after joining ``prepend`` and
        ``append`` to it, as ``torch.diff`` (bools: whether neighbours differ).

        >>> Tensor([1, 4, 9, 16]).diff().tolist()
        [3, 5, 7]
        """
        if self.ndim == 0:
            raise ShapeError("diff needs a tensor with at least one axis, got a 0-d one")
        if n < 0:
            raise InvalidArgument(f"diff order n must be >= 0, got {n}")
        axis = self._axis(dim)
        parts = [p for p in (prepend, cast("Tensor", self), append) if p is not None]
        for p in parts:
            if p.ndim != self.ndim:
                raise ShapeError(
                    f"diff: prepend and append need {self.ndim} axes like the "
                    f"input, got shape {p.shape}"
                )
        x = parts[0].cat(*parts[1:], dim=axis)
        for _ in range(n):
            size = x.shape[axis]
            if size == 0:
                break
            later = x.shrink([(1, size) if i == axis else None for i in range(x.ndim)])
            earlier = x.shrink([(0, size - 1) if i == axis else None for i in range(x.ndim)])
            x = later != earlier if x.dtype == dtypes.bool else (later - earlier).cast(x.dtype)
        return x

    # ---- accumulating at indices -----------------------------------------------------------------

    def _checked_index(self, name: str, axis: int, index: Tensor) -> int:
        """The length of ``axis``, once ``index`` is known to follow PyTorch's rules for an index
        into it (its values checked at the next read)."""
        if not is_tensor(index) or not index.dtype.is_int:
            raise InvalidArgument(
                f"{name} needs an integer index tensor, got "
                f"{getattr(index, 'dtype', type(index).__name__)}"
            )
        if index.ndim > 1:
            raise ShapeError(f"{name} index must be 0-d or 1-d, got shape {index.shape}")
        n = self.shape[axis] if self.ndim else 1
        bounds.check_later(name, index, 0, n, f"dim {axis} (size {n})")
        return n

    def _index_hit(self, name: str, axis: int, index: Tensor) -> Tensor:
        """(n,) bool: whether row j of ``axis`` is among ``index``. Past ``INDEX_COMPARED``
        comparisons of every row with every index, each row is looked up in the sorted index
        instead (a bisection, ``searchsorted``): filling 1,000 rows of 2**20 compared 2**30
        pairs, 301 ms."""
        n, k = self._checked_index(name, axis, index), index.numel()
        positions = type(self).arange(n, device=self.device)
        if n * k <= INDEX_COMPARED:
            return (positions.reshape(n, 1) == index.reshape(1, -1)).any(1)
        keys = index.reshape(-1).sort()[0]
        found = keys.searchsorted(positions).clip(0, k - 1)  # (int32)
        return keys._gathered(0, found) == positions

    def index_add(self, dim: int, index: Tensor, source: Tensor, alpha: float = 1) -> Tensor:
        """This tensor plus ``alpha * source`` added at the positions ``index`` along ``dim``
        (repeated indices add up), as ``torch.index_add``.

        >>> Tensor([0, 0, 0]).index_add(0, Tensor([2, 0, 2]), Tensor([1, 2, 3])).tolist()
        [2, 0, 4]
        """
        if self.ndim == 0:  # (PyTorch's: as the one-element vector it is)
            one = source.reshape(-1) if source.numel() == 1 else source
            return self.reshape(1).index_add(dim, index.reshape(-1), one, alpha).reshape(())
        axis = self._axis(dim)
        n, k = self._checked_index("index_add", axis, index), index.numel()
        expected = self.shape[:axis] + (k,) + self.shape[axis + 1 :]
        if source.shape != expected:
            raise ShapeError(
                f"index_add: source of shape {source.shape} should have shape "
                f"{expected} ({k} indices along dim {dim} of {self.shape})"
            )
        if source.dtype != self.dtype:
            raise InvalidArgument(
                f"index_add: source of dtype {source.dtype.name} into a "
                f"{self.dtype.name} tensor; cast it first, as PyTorch requires"
            )
        if n >= PAIRED_IDS * k and k > 0:  # each index's sum taken per index: k*k, not n*k
            rows = source.transpose(axis, 0).reshape(k, -1)
            spread = _paired_rows(rows, index.reshape(1, k), n, selected=True)
            moved = list(self.shape)
            moved[0], moved[axis] = moved[axis], moved[0]
            added = spread.reshape(moved).transpose(axis, 0)
        else:
            hit = type(self).arange(n, device=self.device).reshape(n, 1) == index.reshape(1, -1)
            src = source.transpose(axis, -1).unsqueeze(-2)  # (..., 1, k) against hit (n, k)
            added = hit.where(src, 0).sum(-1, dtype=self.dtype).transpose(axis, -1)
        return (self + (added * alpha if alpha != 1 else added)).cast(self.dtype)

    def index_fill(self, dim: int, index: Tensor, value: float | Tensor) -> Tensor:
        """``value`` at the positions ``index`` along ``dim``, as ``torch.index_fill``.

        >>> Tensor([1, 2, 3]).index_fill(0, Tensor([0, 2]), -1).tolist()
        [-1, 2, -1]
        """
        axis = self._axis(dim)
        if is_tensor(value) and value.ndim != 0:
            raise ShapeError(
                f"index_fill value must be a number or a 0-d tensor, got shape {value.shape}"
            )
        hit = self._index_hit("index_fill", axis, index)  # (n,)
        hit = hit.reshape(tuple(-1 if i == axis else 1 for i in range(self.ndim)))
        return hit.where(value, cast("Tensor", self)).cast(self.dtype)

    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        """``src`` added into this tensor at ``index`` along ``dim``:
        ``scatter_reduce(dim, index, src, "sum")``."""
        return self.scatter_reduce(dim, index, src, "sum")
