"""Special functions of ``Tensor``: inverse trigonometric and hyperbolic functions, log1p, log10,
copysign, logaddexp and logsigmoid.

Each is built from the primitives (EXP2, LOG2, SQRT, RECIP, comparisons, bit casts) by a formula
that keeps float32 results within a few units in the last place over the whole range: a rational
approximation for atan, series or rewritten forms where the textbook formula cancels (sinh and
asinh near 0, acosh near 1) or overflows before its result does (sinh(89), asinh(1e30)). Half
floats are computed in float32 and rounded back, as PyTorch does on the CPU; integer and bool
inputs give floats, as in PyTorch.

Autograd does not differentiate the approximations: each function carries its derivative
(``DERIVATIVES``), PyTorch's formula, so the gradients agree with PyTorch's at the edges too
(asin'(1) is inf, atanh'(2) is -1/3).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from fusegrad.dtype import dtypes
from fusegrad.tensor.base import TensorBase

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor

#: atan(r) = r + r * z * P(z) / Q(z), z = r**2, for |r| <= 0.66: Cephes' ``atan.c`` (S. L.
#: Moshier), highest degree first, Q monic. Measured against float64: 1.25 ulp in float32, 1 ulp
#: in float64.
ATAN_P = (
    -8.750608600031904122785e-1,
    -1.615753718733365076637e1,
    -7.500855792314704667340e1,
    -1.228866684490136173410e2,
    -6.485021904942025371773e1,
)
ATAN_Q = (
    1.0,
    2.485846490142306297962e1,
    1.650270098316988542046e2,
    4.328810604912902668951e2,
    4.853903996359136964868e2,
    1.945506571482613964425e2,
)
#: above tan(3pi/8), atan(x) = pi/2 - atan(1/x); above 0.66, pi/4 + atan((x-1)/(x+1))
TAN_3PI_8 = 2.41421356237309504880
#: from here on asinh(x) and acosh(x) are ln(2x) to every bit of float64, and x*x may overflow
HUGE = 1e10
#: below this |x|, sinh(x) is its Taylor series to x**9 (relative error below 3e-11): the
#: difference of exponentials would cancel
SINH_SERIES = 0.5
#: the integer type whose bits ``copysign`` moves, by float size
_BITS = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def _horner(x: Tensor, coefficients: Sequence[float]) -> Tensor:
    """c0*x**n + ... + cn as ((c0*x + c1)*x + ...) + cn."""
    out = coefficients[0] * x + coefficients[1]
    for c in coefficients[2:]:
        out = out * x + c
    return out


def _log1p(u: Tensor) -> Tensor:
    """ln(1 + u) accurate for small u: ln(w) * u / (w - 1), w = 1 + u rounded, whose factor
    u / (w - 1) undoes the rounding of w (Goldberg's trick); u itself where w rounds to 1."""
    w = 1 + u
    out = (w == 1).where(u, w.log() * (u / (w - 1)))
    return (u == math.inf).where(u, out)


def _atan(x: Tensor) -> Tensor:
    """atan, odd: |x| reduced to |r| <= 0.66 (``TAN_3PI_8``), then the rational approximation."""
    a = x.abs()
    big, mid = a > TAN_3PI_8, a > 0.66
    r = big.where(-a.reciprocal(), mid.where((a - 1) / (a + 1), a))
    offset = big.where(a.full_like(math.pi / 2), mid.where(a.full_like(math.pi / 4), 0.0))
    z = r * r
    y = offset + (r + r * (z * _horner(z, ATAN_P) / _horner(z, ATAN_Q)))
    return (x < 0).where(-y, y)


def _asin(x: Tensor) -> Tensor:
    """asin(x) = atan(x / sqrt(1 - x**2)), with (1 - x)(1 + x): exact factors near |x| = 1."""
    return _atan(x / ((1 - x) * (1 + x)).sqrt())


def _acos(x: Tensor) -> Tensor:
    """acos(x) = 2 atan(sqrt((1 - x) / (1 + x))): no cancellation near 1, pi at -1."""
    return 2 * _atan(((1 - x) / (1 + x)).sqrt())


def _half_exp(a: Tensor) -> Tensor:
    """e**a / 2 as (e**(a/2) / 2) * e**(a/2): finite wherever the result is (e**89 is not)."""
    h = (a * 0.5).exp()
    return (h * 0.5) * h


def _sinh(x: Tensor) -> Tensor:
    """sinh(x) = (e**|x| - e**-|x|) / 2 signed, its Taylor series below ``SINH_SERIES``."""
    half = _half_exp(x.abs())
    big = half - 0.25 / half
    z = x * x
    series = x + x * z * _horner(z, (1 / 362880, 1 / 5040, 1 / 120, 1 / 6))
    return (x.abs() < SINH_SERIES).where(series, (x < 0).where(-big, big))


def _cosh(x: Tensor) -> Tensor:
    """cosh(x) = (e**|x| + e**-|x|) / 2."""
    half = _half_exp(x.abs())
    return half + 0.25 / half


def _asinh(x: Tensor) -> Tensor:
    """asinh(|x|) = log1p(|x| + x**2 / (1 + sqrt(1 + x**2))), ln(2|x|) when huge; odd."""
    a = x.abs()
    y = (a > HUGE).where(a.log() + math.log(2), _log1p(a + a * a / (1 + (1 + a * a).sqrt())))
    return (x < 0).where(-y, y)


def _acosh(x: Tensor) -> Tensor:
    """acosh(x) = log1p(t + sqrt(t (t + 2))), t = x - 1 (exact near 1); ln(2x) when huge; nan
    below 1 (where t (t + 2) could overflow to a finite-looking inf)."""
    t = x - 1
    y = (x > HUGE).where(x.log() + math.log(2), _log1p(t + (t * (t + 2)).sqrt()))
    return (x < 1).where(math.nan, y)


def _atanh(x: Tensor) -> Tensor:
    """atanh(x) = (log1p(x) - log1p(-x)) / 2: 1 + x and 1 - x are exact near -1 and 1."""
    return 0.5 * (_log1p(x) - _log1p(-x))


#: d f(x) / dx of each function, as PyTorch computes it (so its values at the edges are theirs)
DERIVATIVES: dict[str, Callable[[Tensor], Tensor]] = {
    "log1p": lambda x: (1 + x).reciprocal(),
    "atan": lambda x: (1 + x * x).reciprocal(),
    "asin": lambda x: (1 - x * x).rsqrt(),
    "acos": lambda x: -(1 - x * x).rsqrt(),
    "sinh": lambda x: x.cosh(),
    "cosh": lambda x: x.sinh(),
    "asinh": lambda x: (x * x + 1).rsqrt(),
    "acosh": lambda x: (x * x - 1).rsqrt(),
    "atanh": lambda x: (1 - x * x).reciprocal(),
}


def _derivative_gradient(grad: Tensor, x: Tensor, name: str) -> tuple[Tensor]:
    """g * f'(x), f' from ``DERIVATIVES`` by the function's ``name``."""
    return (grad * DERIVATIVES[name](x),)


def _copysign_gradient(grad: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, None]:
    """d copysign(a, b) / da = copysign(a, b) / a, 0 where a = 0 (PyTorch's); nothing to b."""
    return grad * (a == 0).where(0.0, a.copysign(b) / a), None


class SpecialMixin(TensorBase):
    """Inverse trigonometric and hyperbolic functions, log1p, log10, copysign, logaddexp."""

    __slots__ = ()

    def _special(self, name: str, fn: Callable[[Tensor], Tensor]) -> Tensor:
        """``fn`` of this tensor as a float (halves in float32), with the derivative ``name``."""
        x = self._float_operand()
        wide = x.cast(dtypes.float32) if x.dtype.itemsize < 4 else x
        out = fn(wide)._with_gradient(_derivative_gradient, (wide,), (name,))
        return out.cast(x.dtype)

    def log1p(self) -> Tensor:
        """ln(1 + x), accurate where x is tiny.

        >>> Tensor([1e-10]).log1p().item() * 1e10, (1 + Tensor([1e-10])).log().item()
        (1.000000013351432, 0.0)
        """
        return self._special("log1p", _log1p)

    def log10(self) -> Tensor:
        """The base-10 logarithm: log2(x) * log10(2)."""
        return self.log2() * math.log10(2)

    def atan(self) -> Tensor:
        """The arctangent, in (-pi/2, pi/2).

        >>> round(Tensor([1.0]).atan().item(), 6)
        0.785398
        """
        return self._special("atan", _atan)

    def asin(self) -> Tensor:
        """The arcsine, in [-pi/2, pi/2]; nan outside [-1, 1]."""
        return self._special("asin", _asin)

    def acos(self) -> Tensor:
        """The arccosine, in [0, pi]; nan outside [-1, 1]."""
        return self._special("acos", _acos)

    def sinh(self) -> Tensor:
        """The hyperbolic sine, (e**x - e**-x) / 2."""
        return self._special("sinh", _sinh)

    def cosh(self) -> Tensor:
        """The hyperbolic cosine, (e**x + e**-x) / 2."""
        return self._special("cosh", _cosh)

    def asinh(self) -> Tensor:
        """The inverse hyperbolic sine, ln(x + sqrt(x**2 + 1))."""
        return self._special("asinh", _asinh)

    def acosh(self) -> Tensor:
        """The inverse hyperbolic cosine, ln(x + sqrt(x**2 - 1)); nan below 1."""
        return self._special("acosh", _acosh)

    def atanh(self) -> Tensor:
        """The inverse hyperbolic tangent, ln((1 + x) / (1 - x)) / 2; +-inf at +-1, nan beyond."""
        return self._special("atanh", _atanh)

    def copysign(self, other: Tensor | float) -> Tensor:
        """|x| with the sign bit of ``other`` (so -0.0 counts as negative), as ``torch.copysign``.

        >>> Tensor([1.0, -2.0, 3.0]).copysign(Tensor([-0.0, 1.0, -1.0])).tolist()
        [-1.0, 2.0, -3.0]
        """
        a, b = self._operands(other)
        a, b = a._float_operand(), b._float_operand()
        bits = _BITS[a.dtype.itemsize]
        out = ((a.bitcast(bits) & bits.max) | (b.bitcast(bits) & bits.min)).bitcast(a.dtype)
        return out._with_gradient(_copysign_gradient, (a, b))

    def logaddexp(self, other: Tensor | float) -> Tensor:
        """ln(e**a + e**b) = max(a, b) + log1p(e**-|a - b|), without overflow.

        >>> round(Tensor([1000.0]).logaddexp(1000.0).item(), 3)
        1000.693
        """
        a, b = self._operands(other)
        a, b = a._float_operand(), b._float_operand()
        difference = (a == b).where(0.0, a - b)  # equal infinities: no inf - inf
        return a.maximum(b) + (-difference.abs()).exp().log1p()

    def logsigmoid(self) -> Tensor:
        """ln(sigmoid(x)) = min(x, 0) - log1p(e**-|x|): finite for every finite x."""
        x = self._float_operand()
        return x.minimum(0) - (-x.abs()).exp().log1p()
