"""Sampling methods of ``Tensor`` after PyTorch's: bernoulli, randperm, and erfinv (the inverse
error function, which turns uniform samples into normal ones: sqrt(2) * erfinv(2u - 1)).

Random numbers come from the seeded generator ``rand`` uses (``Tensor.manual_seed``), so a
seed gives the same samples on every device.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fusegrad.dtype import DType, dtypes, to_dtype
from fusegrad.errors import InvalidArgument, ShapeError
from fusegrad.tensor.base import TensorBase

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor

#: erfinv(x) = x * P(w - 2.5) for w = -ln((1 - x)(1 + x)) < 5, else x * Q(sqrt(w) - 3): the
#: single-precision approximation of M. Giles, "Approximating the erfinv function" (GPU Computing
#: Gems, 2011), highest degree first. Measured against float64: within 4 float32 ulps.
ERFINV_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
ERFINV_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)


def _horner(x: Tensor, coefficients: tuple[float, ...]) -> Tensor:
    """c0*x**n + ... + cn as ((c0*x + c1)*x + ...) + cn."""
    out = coefficients[0] * x + coefficients[1]
    for c in coefficients[2:]:
        out = out * x + c
    return out


def _erfinv(x: Tensor) -> Tensor:
    """Giles' approximation; +-inf at +-1 (where w is inf), nan beyond (where the log is)."""
    w = -((1 - x) * (1 + x)).log()
    central = _horner(w - 2.5, ERFINV_CENTRAL)
    tail = _horner(w.sqrt() - 3, ERFINV_TAIL)
    y = (w < 5).where(central, tail) * x
    return (x.abs() == 1).where(x * math.inf, y)


def _erfinv_gradient(grad: Tensor, x: Tensor) -> tuple[Tensor]:
    """d erfinv(x) = sqrt(pi) / 2 * e**(erfinv(x)**2), PyTorch's."""
    y = _erfinv(x)
    return (grad * (math.sqrt(math.pi) / 2) * (y * y).exp(),)


class RandomMixin(TensorBase):
    """bernoulli, randperm and erfinv."""

    __slots__ = ()

    def bernoulli(self, p: float | None = None, *, generator: Any = None) -> Tensor:
        """1 with probability p, else 0, in this tensor's shape and dtype, as
        ``torch.bernoulli``: p is each element of this tensor, or the number ``p`` if given.

        >>> Tensor.manual_seed(0)
        >>> Tensor([0.0, 1.0]).bernoulli().tolist()
        [0.0, 1.0]
        """
        if generator is not None:
            raise InvalidArgument(
                "bernoulli: generator objects are not supported; seed with "
                "Tensor.manual_seed instead"
            )
        if p is not None and not 0 <= p <= 1:
            raise InvalidArgument(f"bernoulli needs a probability p in [0, 1], got p={p}")
        prob = self if p is None else p
        u = type(self).rand(self.shape, dtype=dtypes.float32, device=self.device)
        return (u < prob).cast(self.dtype)

    @classmethod
    def randperm(
        cls,
        n: int,
        *,
        dtype: DType | str = dtypes.int64,
        device: str | None = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """A random permutation of 0..n-1, from ``Tensor.manual_seed``'s generator.

        >>> sorted(Tensor.randperm(4).tolist())
        [0, 1, 2, 3]
        """
        if n < 0:
            raise ShapeError(f"randperm needs n >= 0, got {n}")
        dtype = to_dtype(dtype)
        order = cls._generator().permutation(n)
        return cls(order.astype(dtype.np), device=device, dtype=dtype).requires_grad_(requires_grad)

    def erfinv(self) -> Tensor:
        """The inverse error function: erfinv(erf(x)) = x; +-inf at +-1, nan outside [-1, 1].
        Float32 accurate (within 4 ulps; float64 inputs get that accuracy too).

        >>> round(Tensor([0.5]).erfinv().item(), 6)
        0.476936
        """
        x = self._float_operand()
        wide = x.cast(dtypes.float32) if x.dtype.itemsize < 4 else x
        out = _erfinv(wide)._with_gradient(_erfinv_gradient, (wide,))
        return out.cast(x.dtype)
