"""PyTorch's convenience methods of ``Tensor``: shape queries (size, dim), ``*_as`` and ``new_*``
constructors, axis moves (t, mT, movedim, narrow, select, rot90), comparisons by name (eq, lt),
matrix products with PyTorch's shape rules (mm, bmm, addmm, outer, kron), nan-aware reductions
(nansum, nanmean, amax) and small elementwise functions (atan2, hypot, expm1, xlogy).

Each is a short composition of the methods in the other mixins, so the gradients come from
theirs; where the composition's derivative would be wrong at an edge (atan2 and hypot at 0,
expm1 where it cancels) the function carries PyTorch's derivative (``_with_gradient``).
Model code written for PyTorch then runs unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np

from fusegrad.dtype import DType, dtypes, to_dtype
from fusegrad.errors import InvalidIndex, ShapeError
from fusegrad.tensor.base import TensorBase
from fusegrad.tensor.movement import ONE_INT, broadcast_shapes
from fusegrad.tensor.scan import ValuesIndices

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor


def _axes(dims: int | Sequence[int]) -> tuple[int, ...]:
    return (dims,) if isinstance(dims, ONE_INT) else tuple(dims)


def _size(size: tuple) -> tuple[int, ...]:
    """``new_zeros(2, 3)`` and ``new_zeros((2, 3))`` alike."""
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size


def _atan2_gradient(grad: Tensor, y: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """d atan2(y, x) = (x dy - y dx) / (x**2 + y**2), PyTorch's (nan at the origin)."""
    scale = grad / (x * x + y * y)
    return scale * x, -scale * y


def _hypot_gradient(grad: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """d hypot(a, b) = (a da + b db) / hypot(a, b), PyTorch's (nan at the origin)."""
    scale = grad / (a * a + b * b).sqrt()
    return scale * a, scale * b


def _xlogy_gradient(grad: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """d xlogy(x, y) = ln(y) dx + x / y dy, PyTorch's (dx 0 where x = 0 and y <= 0)."""
    dx = ((x == 0) & (y <= 0)).where(0.0, grad * y.log())
    return dx, grad * x / y


def _expm1_gradient(grad: Tensor, x: Tensor) -> tuple[Tensor]:
    """d expm1(x) = e**x."""
    return (grad * x.exp(),)


class AliasMixin(TensorBase):
    """PyTorch's convenience methods, each a composition of fusegrad's own."""

    __slots__ = ()

    device: str

    # ---- shape queries and constructors ----------------------------------------------------------

    def size(self, dim: int | None = None) -> Any:
        """The shape, or the size of axis ``dim``.

        >>> Tensor.zeros(2, 3).size(), Tensor.zeros(2, 3).size(-1)
        ((2, 3), 3)
        """
        return self.shape if dim is None else self.shape[self._axis(dim)]

    def dim(self) -> int:
        """The number of axes (``ndim``)."""
        return self.ndim

    def expand_as(self, other: Tensor) -> Tensor:
        """``expand`` to ``other``'s shape."""
        return self.expand(other.shape)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        """``expand`` to ``shape``, as ``torch.broadcast_to``."""
        return self.expand(tuple(shape))

    def type_as(self, other: Tensor) -> Tensor:
        """Cast to ``other``'s dtype."""
        return self.cast(other.dtype)

    def view_as(self, other: Tensor) -> Tensor:
        """``view`` with ``other``'s shape."""
        return self.reshape(other.shape)

    def reshape_as(self, other: Tensor) -> Tensor:
        """``reshape`` to ``other``'s shape."""
        return self.reshape(other.shape)

    def new_full(
        self,
        size: Sequence[int],
        fill_value: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """A tensor of ``size`` filled with ``fill_value``, with this one's dtype and device
        unless given.

        >>> Tensor([1, 2]).new_full((2,), 7.9).tolist()
        [7, 7]
        """
        dtype = to_dtype(dtype) if dtype is not None else self.dtype
        out = self.full(tuple(size), fill_value, dtype, device or self.device)
        return out.requires_grad_(requires_grad)

    def new_zeros(
        self,
        *size: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """Zeros of ``size``, with this tensor's dtype and device unless given."""
        return self.new_full(_size(size), 0, dtype, device, requires_grad)

    def new_ones(
        self,
        *size: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """Ones of ``size``, with this tensor's dtype and device unless given."""
        return self.new_full(_size(size), 1, dtype, device, requires_grad)

    def new_empty(
        self,
        *size: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """Uninitialised memory of ``size``, with this tensor's dtype and device unless given."""
        dtype = to_dtype(dtype) if dtype is not None else self.dtype
        return self.empty(
            _size(size),
            dtype=dtype,
            device=device or self.device,
            requires_grad=requires_grad,
        )

    def new_tensor(
        self,
        data: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """A new tensor (a copy, cut off from gradients) of ``data``, with this tensor's dtype and
        device unless given, as PyTorch's.

        >>> Tensor([1.0]).new_tensor([2, 3]).tolist()
        [2.0, 3.0]
        """
        if hasattr(data, "uop"):
            data = data.numpy()
        dtype = to_dtype(dtype) if dtype is not None else self.dtype
        out = type(self)(data, device=device or self.device, dtype=dtype)
        return out.requires_grad_(requires_grad)

    # ---- moving axes -----------------------------------------------------------------------------

    def t(self) -> Tensor:
        """The transpose of a matrix; 0-d and 1-d tensors are their own (PyTorch refuses more axes).

        >>> Tensor([[1, 2]]).t().tolist()
        [[1], [2]]
        """
        if self.ndim > 2:
            raise ShapeError(
                f"t() transposes tensors of at most 2 axes, this one has shape "
                f"{self.shape}; use transpose(dim0, dim1) or mT"
            )
        return self.transpose(0, 1) if self.ndim == 2 else cast("Tensor", self)

    @property
    def mT(self) -> Tensor:  # noqa: N802
        """The last two axes swapped (a batch of matrices, each transposed)."""
        if self.ndim < 2:
            raise ShapeError(f"mT needs at least 2 axes, got shape {self.shape}")
        return self.transpose(-2, -1)

    def ravel(self) -> Tensor:
        """All elements in one axis."""
        return self.reshape(-1)

    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
        """Move the axes ``source`` to the positions ``destination``; the others keep their order.

        >>> Tensor.zeros(2, 3, 4).movedim(0, -1).shape
        (3, 4, 2)
        """
        src = [self._axis(a) for a in _axes(source)]
        dst = [self._axis(a) for a in _axes(destination)]
        if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ShapeError(
                f"movedim needs as many distinct source axes as destination axes, "
                f"got {source} and {destination}"
            )
        rest = iter(a for a in range(self.ndim) if a not in src)
        moved = dict(zip(dst, src))
        order = [moved[i] if i in moved else next(rest) for i in range(self.ndim)]
        return self.permute(order)

    moveaxis = movedim

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        """``transpose(axis0, axis1)``."""
        return self.transpose(axis0, axis1)

    swapdims = swapaxes

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """``length`` elements of axis ``dim`` from ``start`` (negative: from the end), a view.

        >>> Tensor([1, 2, 3, 4]).narrow(0, -3, 2).tolist()
        [2, 3]
        """
        axis = self._axis(dim)
        n = self.shape[axis]
        if not -n <= start <= n:
            raise InvalidIndex(f"narrow start {start} is out of range for axis {dim} of size {n}")
        start = start + n if start < 0 else start
        if length < 0 or start + length > n:
            raise ShapeError(
                f"narrow({dim}, {start}, {length}) reaches past the end of axis {dim} "
                f"of size {n}: use a length of at most {n - start}"
            )
        ranges = [(start, start + length) if a == axis else None for a in range(self.ndim)]
        return self.shrink(ranges)

    def select(self, dim: int, index: int) -> Tensor:
        """Element ``index`` of axis ``dim``, that axis removed: ``x.select(1, 0)`` is ``x[:,
        0]``."""
        axis = self._axis(dim)
        n = self.shape[axis]
        if not -n <= index < n:
            raise InvalidIndex(f"select index {index} is out of range for axis {dim} of size {n}")
        return self[(slice(None),) * axis + (index,)]

    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
        """Rotate by ``k`` quarter turns in the plane of ``dims``, from the first axis towards the
        second, as ``torch.rot90``."""
        if len(dims) != 2 or self._axis(dims[0]) == self._axis(dims[1]):
            raise ShapeError(f"rot90 needs two different axes, got dims={tuple(dims)}")
        a, b = dims
        k %= 4
        if k == 1:
            return self.flip(b).transpose(a, b)
        if k == 2:
            return self.flip((a, b))
        if k == 3:
            return self.flip(a).transpose(a, b)
        return cast("Tensor", self)

    def flipud(self) -> Tensor:
        """Reverse the first axis."""
        if self.ndim < 1:
            raise ShapeError("flipud needs at least 1 axis, got a 0-d tensor")
        return self.flip(0)

    def fliplr(self) -> Tensor:
        """Reverse the second axis."""
        if self.ndim < 2:
            raise ShapeError(f"fliplr needs at least 2 axes, got shape {self.shape}")
        return self.flip(1)

    # ---- comparisons by name ---------------------------------------------------------------------

    def eq(self, other: Any) -> Tensor:
        """``self == other``."""
        return self == other

    def ne(self, other: Any) -> Tensor:
        """``self != other``."""
        return self != other

    def lt(self, other: Any) -> Tensor:
        """``self < other``."""
        return self < other

    def le(self, other: Any) -> Tensor:
        """``self <= other``."""
        return self <= other

    def gt(self, other: Any) -> Tensor:
        """``self > other``."""
        return self > other

    def ge(self, other: Any) -> Tensor:
        """``self >= other``."""
        return self >= other

    def equal(self, other: Tensor) -> bool:
        """Whether both have the same shape and equal elements (nan equals nothing).

        >>> Tensor([1, 2]).equal(Tensor([1.0, 2.0]))
        True
        """
        return self.shape == other.shape and bool((self == other).all().item())

    def allclose(
        self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
    ) -> bool:
        """Whether every element ``isclose`` to ``other``'s."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    # ---- matrix products -------------------------------------------------------------------------

    def mm(self, other: Tensor) -> Tensor:
        """The product of two matrices (no broadcasting, as ``torch.mm``)."""
        if self.ndim != 2 or other.ndim != 2:
            raise ShapeError(
                f"mm multiplies two matrices, got shapes {self.shape} and {other.shape}; "
                "use matmul for vectors and batches"
            )
        return self.matmul(other)

    def bmm(self, other: Tensor) -> Tensor:
        """Matrix products of two batches of the same size (no broadcasting, as ``torch.bmm``)."""
        if self.ndim != 3 or other.ndim != 3 or self.shape[0] != other.shape[0]:
            raise ShapeError(
                f"bmm needs two 3-d tensors with the same batch size, got shapes "
                f"{self.shape} and {other.shape}; use matmul to broadcast"
            )
        return self.matmul(other)

    def outer(self, other: Tensor) -> Tensor:
        """The outer product of two vectors: ``out[i, j] = self[i] * other[j]``."""
        if self.ndim != 1 or other.ndim != 1:
            raise ShapeError(f"outer needs two vectors, got shapes {self.shape} and {other.shape}")
        return self.unsqueeze(1) * other.unsqueeze(0)

    def inner(self, other: Tensor) -> Tensor:
        """Sums of products over the last axes; the result has the other axes of both, in order."""
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        if self.shape[-1] != other.shape[-1]:
            raise ShapeError(
                f"inner needs equal last axes, got shapes {self.shape} and {other.shape}"
            )
        a = self.reshape(*self.shape[:-1], *(1,) * (other.ndim - 1), self.shape[-1])
        return (a * other).sum(-1)

    def _scaled_sum(self, product: Tensor, beta: float, alpha: float) -> Tensor:
        """``beta * self + alpha * product``; ``self`` is ignored where beta is 0 (its nans too)."""
        product = product if alpha == 1 else product * alpha
        if beta == 0:
            return product
        return product + (self if beta == 1 else self * beta)

    def addmm(self, mat1: Tensor, mat2: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
        """``beta * self + alpha * (mat1 @ mat2)``, as ``torch.addmm``."""
        return self._scaled_sum(mat1.mm(mat2), beta, alpha)

    def addmv(self, mat: Tensor, vec: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
        """``beta * self + alpha * (mat @ vec)``, as ``torch.addmv``."""
        if mat.ndim != 2 or vec.ndim != 1:
            raise ShapeError(
                f"addmv needs a matrix and a vector, got shapes {mat.shape} and {vec.shape}"
            )
        return self._scaled_sum(mat.matmul(vec), beta, alpha)

    def baddbmm(self, batch1: Tensor, batch2: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
        """``beta * self + alpha * (batch1 @ batch2)``, as ``torch.baddbmm``."""
        return self._scaled_sum(batch1.bmm(batch2), beta, alpha)

    def addcmul(self, tensor1: Tensor, tensor2: Tensor, value: float = 1) -> Tensor:
        """``self + value * tensor1 * tensor2``."""
        return self + value * tensor1 * tensor2

    def addcdiv(self, tensor1: Tensor, tensor2: Tensor, value: float = 1) -> Tensor:
        """``self + value * tensor1 / tensor2``."""
        return self + value * tensor1 / tensor2

    def trace(self) -> Tensor:
        """The sum of a matrix's diagonal."""
        if self.ndim != 2:
            raise ShapeError(f"trace needs a matrix, got shape {self.shape}")
        return self.diagonal().sum()

    def cross(self, other: Tensor, dim: int = -1) -> Tensor:
        """The cross product of 3-vectors along axis ``dim`` (the last by default, as
        ``torch.linalg.cross``), broadcasting the other axes."""
        a, b = self._operands(other)
        axis = a._axis(dim)
        if a.shape[axis] != 3:
            raise ShapeError(
                f"cross needs size 3 along axis {dim}, got shapes {self.shape} and {other.shape}"
            )
        (a1, a2, a3), (b1, b2, b3) = (tuple(t.select(axis, i) for i in range(3)) for t in (a, b))
        first = a2 * b3 - a3 * b2
        return first.stack(a3 * b1 - a1 * b3, a1 * b2 - a2 * b1, dim=axis)

    def kron(self, other: Tensor) -> Tensor:
        """The Kronecker product: each element of ``self`` times all of ``other``, in blocks."""
        n = max(self.ndim, other.ndim)
        a = self.reshape((1,) * (n - self.ndim) + self.shape)
        b = other.reshape((1,) * (n - other.ndim) + other.shape)
        pairs = [s for pair in zip(a.shape, (1,) * n) for s in pair]
        out = a.reshape(pairs) * b.reshape([s for pair in zip((1,) * n, b.shape) for s in pair])
        return out.reshape([x * y for x, y in zip(a.shape, b.shape)])

    # ---- reductions ------------------------------------------------------------------------------

    def amax(self, dim: int | Sequence[int] = (), keepdim: bool = False) -> Tensor:
        """The largest value over ``dim`` (every axis if empty); ties share the gradient equally."""
        return self.max(dim if dim != () else None, keepdim)

    def amin(self, dim: int | Sequence[int] = (), keepdim: bool = False) -> Tensor:
        """The smallest value over ``dim`` (every axis if empty); ties share the gradient
        equally."""
        return self.min(dim if dim != () else None, keepdim)

    def aminmax(self, *, dim: int | None = None, keepdim: bool = False) -> tuple[Tensor, Tensor]:
        """``(amin, amax)`` over ``dim`` (every axis if None)."""
        axes = () if dim is None else dim
        return self.amin(axes, keepdim), self.amax(axes, keepdim)

    def nansum(
        self,
        dim: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """``sum`` counting nans as 0."""
        x = self.isnan().where(0, self) if self.dtype.is_float else self
        return x.sum(dim, keepdim, dtype=dtype)

    def nanmean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The mean of the elements that are not nan (nan where all are)."""
        x = self._float_operand()
        count = x.isnan().logical_not().sum(dim, keepdim)
        return x.nansum(dim, keepdim) / count

    def nan_to_num(
        self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
    ) -> Tensor:
        """nan, inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (the largest and
        smallest finite values of the dtype by default); a replaced element has no gradient.

        >>> Tensor([float("nan"), -float("inf"), 1.0]).nan_to_num(neginf=-9.0).tolist()
        [0.0, -9.0, 1.0]
        """
        if not self.dtype.is_float:
            return cast("Tensor", self)
        big = float(np.finfo(self.dtype.np).max)
        x = self.isnan().where(nan, self)
        x = (x == math.inf).where(big if posinf is None else posinf, x)
        return (x == -math.inf).where(-big if neginf is None else neginf, x)

    def median(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The lower of the two middle values: of all elements (a 0-d tensor) if ``dim`` is None,
        else ``(values, indices)`` along ``dim``, as ``torch.median``; nan where there is one.

        >>> Tensor([4.0, 1.0, 3.0, 2.0]).median().item()
        2.0
        """
        if dim is None:
            return self.reshape(-1)._median(0, False, skip_nan=False)[0]
        return self._median(dim, keepdim, skip_nan=False)

    def nanmedian(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """``median`` of the elements that are not nan (nan where all are)."""
        if dim is None:
            return self.reshape(-1)._median(0, False, skip_nan=True)[0]
        return self._median(dim, keepdim, skip_nan=True)

    def _median(self, dim: int, keepdim: bool, skip_nan: bool) -> ValuesIndices:
        """Sort along ``dim`` with nans as inf (so they sort last), then pick the middle of the
        numbers (``skip_nan``) or, in a row with a nan, the first nan."""
        axis = self._axis(dim)
        n = self.shape[axis]
        if n == 0:
            raise InvalidIndex(f"median over axis {dim} of shape {self.shape}: the axis is empty")
        nans = self.isnan()
        count = n - nans.sum(axis, keepdim=True)  # the numbers in each row
        k = (count - 1).maximum(0) // 2 if skip_nan else (count < n).where(count, (n - 1) // 2)
        no_median = (count == 0) if skip_nan else (count < n)
        if self._selectable(axis):  # (nans rank above inf there, as here)
            values, indices = self._rank_select(axis, k.cast(dtypes.int32))
        else:
            keys = nans.where(math.inf, self) if self.dtype.is_float else self
            ordered, order = keys.sort(axis)
            values, indices = ordered.gather(axis, k), order.gather(axis, k)
        if self.dtype.is_float:
            values = no_median.where(math.nan, values).cast(self.dtype)
        if not keepdim:
            values, indices = values.squeeze(axis), indices.squeeze(axis)
        return ValuesIndices(values, indices)

    # ---- elementwise -----------------------------------------------------------------------------

    def atan2(self, other: Tensor | float) -> Tensor:
        """The angle of the point (other, self) in (-pi, pi], as ``torch.atan2(self, other)``:
        atan of the smaller over the larger of |x| and |y|, moved to its octant.

        >>> round(Tensor([1.0]).atan2(-1.0).item(), 6)
        2.356194
        """
        y, x = self._operands(other)
        y, x = y._float_operand(), x._float_operand()
        ay, ax = y.abs(), x.abs()
        big, small = ay.maximum(ax), ay.minimum(ax)
        ratio = (big == 0).where(0.0, (small == math.inf).where(1.0, small / big))
        t = ratio.atan()
        t = (ay > ax).where(math.pi / 2 - t, t)
        t = x.signbit().where(math.pi - t, t)
        out = (x.isnan() | y.isnan()).where(math.nan, t.copysign(y))
        return out.detach()._with_gradient(_atan2_gradient, (y, x))

    def hypot(self, other: Tensor | float) -> Tensor:
        """sqrt(a**2 + b**2) without overflow: max * sqrt(1 + (min / max)**2); inf if either is."""
        a, b = self._operands(other)
        a, b = a._float_operand(), b._float_operand()
        big, small = a.abs().maximum(b.abs()), a.abs().minimum(b.abs())
        ratio = (big == 0).where(0.0, small / big)
        out = (big == 0).where(0.0, big * (1 + ratio * ratio).sqrt())
        out = ((a.abs() == math.inf) | (b.abs() == math.inf)).where(math.inf, out)
        return out.detach()._with_gradient(_hypot_gradient, (a, b))

    def expm1(self) -> Tensor:
        """e**x - 1, accurate near 0: (u - 1) * x / ln(u) for u = e**x (Kahan), which cancels the
        rounding of u.

        >>> Tensor([1e-10]).expm1().item() * 1e10, Tensor([1e-10]).exp().item() - 1
        (1.000000013351432, 0.0)
        """
        x = self._float_operand()
        u = x.exp()
        near = (x.abs() < 1) & (u != 1)
        kahan = (u - 1) * x / near.where(u, math.e).log()
        out = near.where(kahan, (u == 1).where(x, u - 1))
        return out.detach()._with_gradient(_expm1_gradient, (x,))

    def frac(self) -> Tensor:
        """The fractional part, x - trunc(x), with x's sign."""
        return self - self.trunc()

    def sgn(self) -> Tensor:
        """``sign`` (for real numbers, PyTorch's sgn is sign)."""
        return self.sign()

    def signbit(self) -> Tensor:
        """Whether the sign bit is set: true for negative numbers, -0.0 and negative nans."""
        if self.dtype.is_float:
            bits = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]
            return self.bitcast(bits) < 0
        if self.dtype == dtypes.bool or self.dtype.is_unsigned:
            return self.full_like(False, dtypes.bool)
        return self < 0

    def heaviside(self, values: Tensor | float) -> Tensor:
        """0 where x < 0, ``values`` where x == 0, 1 where x > 0 (no gradient, as in PyTorch)."""
        x, v = self._operands(values)
        return (x == 0).where(v, (x > 0).cast(x.dtype)).detach()

    def xlogy(self, other: Tensor | float) -> Tensor:
        """x * ln(y), 0 where x is 0 (unless y is nan): an entropy term that stays finite."""
        x, y = self._operands(other)
        x, y = x._float_operand(), y._float_operand()
        out = x * ((x == 0) & y.isnan().logical_not()).where(1.0, y).log()
        return out.detach()._with_gradient(_xlogy_gradient, (x, y))

    def deg2rad(self) -> Tensor:
        """Degrees to radians."""
        return self._float_operand() * (math.pi / 180)

    def rad2deg(self) -> Tensor:
        """Radians to degrees."""
        return self._float_operand() * (180 / math.pi)

    def float_power(self, exponent: Tensor | float) -> Tensor:
        """``self ** exponent`` in float64, as ``torch.float_power``."""
        if not isinstance(exponent, (int, float)):
            exponent = exponent.cast(dtypes.float64)
        return self.cast(dtypes.float64) ** exponent

    def true_divide(self, other: Tensor | float) -> Tensor:
        """``div`` (true division)."""
        return self.div(other)

    # ---- indexing --------------------------------------------------------------------------------

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        """The elements at ``index`` (a vector) along axis ``dim``."""
        if index.ndim > 1:
            raise InvalidIndex(f"index_select takes a 0-d or 1-d index, got shape {index.shape}")
        axis = self._axis(dim)
        return self[(slice(None),) * axis + (index.reshape(-1),)]

    def take_along_dim(self, indices: Tensor, dim: int | None = None) -> Tensor:
        """``gather`` with the other axes broadcast (both flattened if ``dim`` is None)."""
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        axis = self._axis(dim)
        if indices.ndim != self.ndim:
            raise ShapeError(
                f"take_along_dim needs indices with as many axes as the input, got "
                f"shapes {indices.shape} and {self.shape}"
            )
        common = broadcast_shapes(
            *(s[:axis] + (1,) + s[axis + 1 :] for s in (self.shape, indices.shape))
        )

        def along(t: Any) -> Tensor:  # ``t`` broadcast to ``common`` except along ``axis``
            return t.expand(common[:axis] + t.shape[axis : axis + 1] + common[axis + 1 :])

        return along(self).gather(axis, along(indices))

    @classmethod
    def tril_indices(
        cls,
        row: int,
        col: int,
        offset: int = 0,
        dtype: DType | str = dtypes.int64,
        device: str | None = None,
    ) -> Self:
        """The (row, column) coordinates of the lower triangle of a ``row`` x ``col`` matrix, a
        (2, N) tensor, as ``torch.tril_indices``."""
        return cls(np.stack(np.tril_indices(row, offset, col)), device=device, dtype=dtype)

    @classmethod
    def triu_indices(
        cls,
        row: int,
        col: int,
        offset: int = 0,
        dtype: DType | str = dtypes.int64,
        device: str | None = None,
    ) -> Self:
        """The (row, column) coordinates of the upper triangle of a ``row`` x ``col`` matrix."""
        return cls(np.stack(np.triu_indices(row, offset, col)), device=device, dtype=dtype)
