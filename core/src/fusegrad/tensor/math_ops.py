"""Math methods of ``Tensor``: powers, integer division, bit ops, rounding, activations,
softmax and friends, and statistics (scans and sorting are in ``tensor/scan.py``).

Everything here is built from the primitives of ``tensor.py`` (ALU ops, sum and max reductions,
movement ops), so it fuses into kernels and gets gradients like any other graph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from fusegrad.dtype import DType, dtypes
from fusegrad.errors import FusegradError, InvalidArgument
from fusegrad.helpers import prod
from fusegrad.tensor.base import TensorBase
from fusegrad.uop.ops import Ops

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor

Axis = int | Sequence[int] | None

#: SELU's constants (Klambauer et al., 2017), as PyTorch's
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

# float types hold only integers at and above 2**mantissa_bits: nothing left to round
_MANTISSA_BITS = {dtypes.float16: 10, dtypes.bfloat16: 7, dtypes.float32: 23, dtypes.float64: 52}


def _pow_gradient(grad: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """d x**y / dx = y * x**(y-1) (0 where y = 0) and d x**y / dy = x**y * ln x (0 where x = 0
    and y >= 0), as PyTorch defines them at the edges."""
    dx = (y == 0).where(0.0, y * x._float_pow(y - 1))
    dy = ((x == 0) & (y >= 0)).where(0.0, x._float_pow(y) * x.log())
    return (grad * dx).cast(x.dtype), (grad * dy).cast(y.dtype)


#: (bits of a partial quotient, the integer type of the same size) for ``_fmod_magnitude``: the
#: divisor splits into a high part of p - k significand bits and a low part of k, so that a
#: quotient of k bits times either part is exact (p = 24 bits in float32, 53 in float64)
_FMOD_CHUNK = {dtypes.float32: (12, dtypes.int32), dtypes.float64: (26, dtypes.int64)}


def _fmod_step(r: Tensor, d: Tensor, d_hi: Tensor, d_lo: Tensor) -> Tensor:
    """r - q*d for q = trunc(r / d) where r >= d, exact when q has at most ``_FMOD_CHUNK`` bits:
    q*d_hi and q*d_lo are exact, r - q*d_hi cancels exactly, and the result is representable.
    A q one too large (r / d rounded up to a whole number) leaves r - q*d in [-d, 0): add d."""
    q = (r / d).trunc()
    out = (r - q * d_hi) - q * d_lo
    out = (out < 0).where(out + d, out)
    return (r >= d).where(out, r)


def _fmod_magnitude(a: Tensor, b: Tensor) -> Tensor:
    """fmod(a, b) of a, b >= 0 (float32 or float64), in two exact steps of at most k quotient
    bits each: first by b * 2**k, then by b. Beyond a / b = 2**2k, a - trunc(a/b) * b, rounded."""
    k, bits = _FMOD_CHUNK[a.dtype]
    b_hi = (b.bitcast(bits) & -(1 << k)).bitcast(b.dtype)  # the low k significand bits cleared
    b_lo = b - b_hi
    scale = float(1 << k)
    r = _fmod_step(a, b * scale, b_hi * scale, b_lo * scale)
    r = _fmod_step(r, b, b_hi, b_lo)
    rounded = a - (a / b).trunc() * b
    r = (a >= b * scale * scale).where(rounded, r)
    return b.isnan().where(b, r)


def _fmod_gradient(grad: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """d fmod(a, b) = (1, -trunc(a / b)), as PyTorch's."""
    return grad, -grad * (a / b).trunc()


def _remainder_gradient(grad: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """d (a % b) = (1, -floor(a / b)), the quotient taken as PyTorch takes it: (a - fmod(a, b)) / b
    rounded, which is exact, where floor(a / b) may round up (1000.7 / 0.1 to 10007)."""
    r = a.fmod(b)
    quotient = ((a - r) / b).round() - ((r != 0) & ((r < 0) != (b < 0))).cast(a.dtype)
    return grad, -grad * quotient


class MathMixin(TensorBase):
    """Elementwise math, activations, softmax and statistics."""

    __slots__ = ()

    # ---- powers ----------------------------------------------------------------------------------

    def pow(self, exponent: Tensor | int | float, reverse: bool = False) -> Tensor:
        """``self ** exponent`` with PyTorch's results at the edges: integer tensors to integer
        powers stay (exact) integers, x ** 0 and 1 ** y are 1 even for nan, (-inf) ** 2.5 is inf.

        >>> Tensor([1, 2, 3]).pow(2).tolist()
        [1, 4, 9]
        """
        if not reverse and isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
            if isinstance(exponent, int) and exponent < 0 and not self.dtype.is_float:
                raise InvalidArgument(
                    f"integer tensors to negative integer powers are not allowed (** {exponent} "
                    f"of a {self.dtype.name} tensor), as in PyTorch: cast to float first"
                )
            if float(exponent).is_integer() and abs(exponent) <= 64:
                return self._int_power(exponent)
            if exponent == 0.5:  # as PyTorch: sqrt, so (-inf) ** 0.5 is nan
                return self.sqrt()
            if exponent == -0.5:  # rsqrt's value ((-0.0) ** -0.5 is -inf), pow's gradient
                base, exp = self._operands(exponent)
                return base.rsqrt()._with_gradient(_pow_gradient, (base, exp))
        base, exp = self._operands(exponent, reverse)
        if base.dtype.is_int:
            return base._int_pow_exact(exp)
        if base.dtype == dtypes.bool:
            return base.cast(dtypes.int32)._int_pow_exact(exp.cast(dtypes.int32)).cast(dtypes.bool)
        return base._float_pow(exp)

    def _int_power(self, n: int | float) -> Tensor:
        """x**n for a whole number n, by repeated squaring (exact for integers); for n < 0,
        (1/x)**-n, whose gradient at x = 0 is an infinity like PyTorch's, where that of
        1/(x**-n) would be inf * 0 = nan."""
        exact = isinstance(n, int) or self.dtype.is_float
        x = cast("Tensor", self) if exact else self._float_operand()
        if n < 0:
            x = x.reciprocal()
        k, result, square = abs(int(n)), None, x
        while k:
            if k & 1:
                result = square if result is None else result * square
            k >>= 1
            if k:
                square = square * square
        return x.ones_like() if result is None else result

    def _int_pow_exact(self, exp: Tensor) -> Tensor:
        """Integer x**y (same dtype and shape) by binary exponentiation over the bits of y: exact,
        and wrapping on overflow as the multiply does (as PyTorch). A negative y leaves a
        whole number only for x = 1 and x = -1; every other x gives 0, as in PyTorch."""
        bits = 8 * exp.dtype.itemsize - (0 if exp.dtype.is_unsigned else 1)
        result, square = self.ones_like(), self
        for i in range(bits):
            result = ((exp >> i) & 1).cast(dtypes.bool).where(result * square, result)
            square = square * square
        if exp.dtype.is_unsigned:
            return result
        odd = (exp & 1).cast(dtypes.bool)
        inverse = (self == 1).where(1, (self == -1).where(odd.where(-1, 1), 0)).cast(self.dtype)
        return (exp < 0).where(inverse, result)

    def _float_pow(self, exp: Tensor) -> Tensor:
        """x**y = 2**(y * log2|x|), signed and special-cased as C's ``pow`` (and PyTorch):

        - negative for a negative x (-0.0 and -inf too) and an odd whole y;
        - nan for a finite negative x and a y that is not whole (no real value);
        - 1 for y = 0, for x = 1 and for x = -1 with y = +-inf, even where x or y is nan.

        Its gradient is its own (``_pow_gradient``): through exp2 and log2 it would be
        0 * inf = nan at x = 0."""
        magnitude = (exp * self.abs().log2()).exp2()
        whole = exp.trunc() == exp
        odd = whole & ((exp * 0.5).trunc() != exp * 0.5)
        negative = (self < 0) | (self.reciprocal() < 0)  # 1 / -0.0 is -inf
        result = (negative & odd).where(-magnitude, magnitude)
        no_real = (self < 0) & (self > -math.inf) & whole.logical_not()
        result = no_real.where(math.nan, result)
        one = (exp == 0) | (self == 1) | ((self == -1) & exp.isinf())
        result = one.where(1.0, result)
        return result._with_gradient(_pow_gradient, (self, exp))

    def __pow__(self, x):
        return self.pow(x)

    def __rpow__(self, x):
        return self.pow(x, reverse=True)

    # ---- integer division and remainder ----------------------------------------------------------

    def floor_divide(self, other: Tensor | int | float, reverse: bool = False) -> Tensor:
        """Division rounded down, as Python's ``//`` (and ``torch.floor_divide``).

        >>> (Tensor([-7, 7]) // 2).tolist()
        [-4, 3]
        """
        a, b = self._operands(other, reverse)
        if a.dtype.is_float:
            return (a / b).floor()
        if a.dtype == dtypes.bool:
            raise FusegradError(
                "floor division of bool tensors is not defined; cast them to int first"
            )
        q, r = a._alu(Ops.IDIV, b), a._alu(Ops.MOD, b)
        if a.dtype.is_unsigned:
            return q
        # C truncates: step down one when the remainder is nonzero and the signs differ
        return q - ((r != 0) & ((r < 0) != (b < 0))).cast(q.dtype)

    def remainder(self, other: Tensor | int | float, reverse: bool = False) -> Tensor:
        """The remainder with the sign of the divisor, as Python's ``%`` (and ``torch.remainder``):
        fmod(a, b), plus b where that has the other sign. An integer ``x % 0`` is 0.

        >>> (Tensor([-7, 7]) % 3).tolist()
        [2, 1]
        >>> (Tensor([-7.5, 7.5]) % -2).tolist()
        [-1.5, -0.5]
        """
        a, b = self._operands(other, reverse)
        r = a.fmod(b)
        if a.dtype.is_unsigned:
            return r
        out = ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
        return out._with_gradient(_remainder_gradient, (a, b)) if a.dtype.is_float else out

    mod = remainder

    def fmod(self, other: Tensor | int | float) -> Tensor:
        """The remainder with the sign of the dividend, as C's ``fmod`` (``torch.fmod``): exact
        for floats while |a / b| < 2**24 (2**52 in float64). An integer ``fmod(x, 0)`` is 0.

        >>> Tensor([-7.5, 7.5]).fmod(-2).tolist()
        [-1.5, 1.5]
        """
        a, b = self._operands(other)
        if a.dtype == dtypes.bool:
            raise InvalidArgument(
                "the remainder of bool tensors is not defined (as in PyTorch); cast them to "
                "int first"
            )
        if not a.dtype.is_float:
            return a._alu(Ops.MOD, b)  # C's %, which truncates
        wide = dtypes.float32 if a.dtype.itemsize < 4 else a.dtype  # (halves: exact in float32)
        out = _fmod_magnitude(a.abs().cast(wide), b.abs().cast(wide)).cast(a.dtype).copysign(a)
        return out._with_gradient(_fmod_gradient, (a, b))

    def __floordiv__(self, x):
        return self.floor_divide(x)

    def __rfloordiv__(self, x):
        return self.floor_divide(x, reverse=True)

    def __mod__(self, x):
        return self.remainder(x)

    def __rmod__(self, x):
        return self.remainder(x, reverse=True)

    # ---- bitwise and logical ---------------------------------------------------------------------

    def _bitwise(self, op: Ops, other: Tensor | int | bool, reverse: bool = False) -> Tensor:
        a, b = self._operands(other, reverse)
        if a.dtype.is_float:
            raise InvalidArgument(
                f"bitwise ops and shifts need integer or bool tensors, got {a.dtype.name}; "
                "cast with .cast(dtypes.int32) first"
            )
        return a._alu(op, b)

    def bitwise_and(self, other: Tensor | int | bool, reverse: bool = False) -> Tensor:
        """Elementwise ``&`` of ints or bools."""
        return self._bitwise(Ops.AND, other, reverse)

    def bitwise_or(self, other: Tensor | int | bool, reverse: bool = False) -> Tensor:
        """Elementwise ``|`` of ints or bools."""
        return self._bitwise(Ops.OR, other, reverse)

    def bitwise_xor(self, other: Tensor | int | bool, reverse: bool = False) -> Tensor:
        """Elementwise ``^`` of ints or bools."""
        return self._bitwise(Ops.XOR, other, reverse)

    def bitwise_not(self) -> Tensor:
        """``~x``: logical not for bools, all bits flipped for ints (``x ^ -1``)."""
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self._bitwise(Ops.XOR, -1 if not self.dtype.is_unsigned else int(self.dtype.max))

    def lshift(self, bits: Tensor | int, reverse: bool = False) -> Tensor:
        """``x << bits``."""
        return self._bitwise(Ops.SHL, bits, reverse)

    def rshift(self, bits: Tensor | int, reverse: bool = False) -> Tensor:
        """``x >> bits`` (arithmetic: the sign is kept for signed ints)."""
        return self._bitwise(Ops.SHR, bits, reverse)

    def __and__(self, x):
        return self.bitwise_and(x)

    def __rand__(self, x):
        return self.bitwise_and(x, True)

    def __or__(self, x):
        return self.bitwise_or(x)

    def __ror__(self, x):
        return self.bitwise_or(x, True)

    def __xor__(self, x):
        return self.bitwise_xor(x)

    def __rxor__(self, x):
        return self.bitwise_xor(x, True)

    def __invert__(self):
        return self.bitwise_not()

    def __lshift__(self, x):
        return self.lshift(x)

    def __rlshift__(self, x):
        return self.lshift(x, True)

    def __rshift__(self, x):
        return self.rshift(x)

    def __rrshift__(self, x):
        return self.rshift(x, True)

    def _as_bool(self, other: Tensor | Any) -> tuple[Tensor, Tensor]:
        other = other if hasattr(other, "uop") else self.full_like(bool(other), dtypes.bool)
        return self.bool()._operands(other.bool())

    def logical_and(self, other: Tensor | bool) -> Tensor:
        a, b = self._as_bool(other)
        return a._alu(Ops.AND, b)

    def logical_or(self, other: Tensor | bool) -> Tensor:
        a, b = self._as_bool(other)
        return a._alu(Ops.OR, b)

    def logical_xor(self, other: Tensor | bool) -> Tensor:
        a, b = self._as_bool(other)
        return a._alu(Ops.CMPNE, b)

    # ---- rounding and tests ----------------------------------------------------------------------

    def trunc(self) -> Tensor:
        """Round towards zero; floats too large to have a fraction are kept as they are."""
        if not self.dtype.is_float:
            return cast("Tensor", self)
        limit = 2.0 ** _MANTISSA_BITS[self.dtype]
        small = self.abs() < limit  # false for inf and nan, which pass through
        whole = self.cast(dtypes.int64 if self.dtype == dtypes.float64 else dtypes.int32).cast(
            self.dtype
        )
        whole = (whole == 0).where(self * 0, whole)  # -0.7 truncates to -0.0, as in C
        return small.where(whole, self.detach())  # (a step function: no gradient there either)

    def floor(self) -> Tensor:
        """Round down: trunc(x) - 1 where that moved x up."""
        if not self.dtype.is_float:
            return cast("Tensor", self)
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self) -> Tensor:
        """Round up: trunc(x) + 1 where that moved x down."""
        if not self.dtype.is_float:
            return cast("Tensor", self)
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def round(self) -> Tensor:
        """Round to the nearest integer, halves to even (as ``torch.round``).

        >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist()
        [0.0, 2.0, 2.0, -0.0]
        """
        if not self.dtype.is_float:
            return cast("Tensor", self)
        t = self.trunc()
        frac = (self - t).abs()
        step = (self < 0).where(-1.0, 1.0).cast(self.dtype)
        odd = (t * 0.5).trunc() != t * 0.5
        up = (frac > 0.5) | ((frac == 0.5) & odd)
        return up.where(t + step, t)

    def sign(self) -> Tensor:
        """-1, 0 or 1 by the sign of x; +-inf give +-1 and nan 0, as PyTorch's."""
        if self.dtype == dtypes.bool:
            return cast("Tensor", self)
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def isnan(self) -> Tensor:
        """True where x is nan (the only value unequal to itself)."""
        return self != self

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """True where x is +inf (if ``detect_positive``) or -inf (if ``detect_negative``)."""
        pos = (self == math.inf) if detect_positive else self.full_like(False, dtypes.bool)
        return pos | (self == -math.inf) if detect_negative else pos

    def isfinite(self) -> Tensor:
        """True where x is neither inf nor nan."""
        return (self - self) == 0 if self.dtype.is_float else self.full_like(True, dtypes.bool)

    def isclose(
        self, other: Tensor | float, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
    ) -> Tensor:
        """True where x equals ``other`` (equal infinities too) or, both finite apart,
        |x - other| <= atol + rtol * |other|, as ``torch.isclose``; nan is close to nan only
        with ``equal_nan``.

        >>> Tensor([1.0, 1.0 + 1e-6, 1.1, float("inf")]).isclose(1.0).tolist()
        [True, True, False, False]
        """
        if rtol < 0 or atol < 0:
            raise InvalidArgument(f"isclose needs rtol and atol >= 0, got rtol={rtol}, atol={atol}")
        a, b = self._operands(other)
        if a.dtype == dtypes.bool:  # (as PyTorch: a bool difference has no magnitude)
            a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
        error = (a - b).abs()
        close = (a == b) | (error.isfinite() & (error <= atol + (b * rtol).abs()))
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def clip(
        self, min_: Tensor | float | None = None, max_: Tensor | float | None = None
    ) -> Tensor:
        """Limit values to ``[min_, max_]`` (either may be None)."""
        if min_ is None and max_ is None:
            raise InvalidArgument("clip needs min_ or max_ (or both)")
        x = cast("Tensor", self)
        if min_ is not None:  # where, not maximum: at a bound the gradient goes to x, as torch's
            x = (x < min_).where(min_, x)
        return x if max_ is None else (x > max_).where(max_, x)

    clamp = clip

    def lerp(self, end: Tensor | float, weight: Tensor | float) -> Tensor:
        """Linear interpolation: ``x + weight * (end - x)``."""
        return self + (end - self) * weight

    # ---- special functions and activations -------------------------------------------------------

    def erf(self) -> Tensor:
        """The error function (Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7)."""
        x = self._float_operand()
        # erf is odd: f(|x|) mirrored with where, since sign(x) * f(|x|) has no slope at 0
        negative = x < 0
        ax = negative.where(-x, x)
        t = (1 + 0.3275911 * ax).reciprocal()
        poly = t * (
            0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
        )
        y = 1 - poly * (-(ax * ax)).exp()
        return negative.where(-y, y)

    def gelu(self, approximate: str = "tanh") -> Tensor:
        """GELU; ``approximate="tanh"`` (tinygrad's, the default) or ``"none"`` (exact, erf)."""
        x = self._float_operand()
        if approximate == "none":
            return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
        if approximate != "tanh":
            raise FusegradError(f"gelu approximate must be 'tanh' or 'none', got {approximate!r}")
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())

    def quick_gelu(self) -> Tensor:
        """x * sigmoid(1.702 x)"""
        return self * (self * 1.702).sigmoid()

    def silu(self) -> Tensor:
        """x * sigmoid(x)"""
        return self * self.sigmoid()

    swish = silu

    def relu6(self) -> Tensor:
        """min(max(x, 0), 6)"""
        return self.hardtanh(0, 6)

    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        """x where x > 0, else neg_slope * x."""
        x = cast("Tensor", self)
        return (x > 0).where(x, x * neg_slope)

    def elu(self, alpha: float = 1.0) -> Tensor:
        """x where x > 0, else alpha * (e**x - 1); e**x of the negative part only, so that a
        large x (e**x = inf) leaves no 0 * inf = nan in the gradient."""
        x = cast("Tensor", self)
        positive = x > 0
        return positive.where(x, alpha * (positive.where(0.0, x).exp() - 1))

    def celu(self, alpha: float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha * (e**(x/alpha) - 1))"""
        x = cast("Tensor", self)
        positive = x > 0
        return positive.where(x, alpha * ((positive.where(0.0, x) / alpha).exp() - 1))

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + e**(beta x)) / beta, and x itself where beta x > threshold."""
        bx = self._float_operand() * beta
        # log(1 + e**y) without overflow; maximum, not relu, gives slope 1/2 at 0 as it should
        stable = bx.maximum(0) + (1 + (-bx.abs()).exp()).log()
        return (bx > threshold).where(self._float_operand(), stable / beta)

    def mish(self) -> Tensor:
        """x * tanh(softplus(x))"""
        return self * self.softplus().tanh()

    def hardsigmoid(self) -> Tensor:
        """relu6(x + 3) / 6"""
        return (self._float_operand() + 3).relu6() / 6

    def hardswish(self) -> Tensor:
        """x * relu6(x + 3) / 6"""
        return self * self.hardsigmoid()

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x limited to [min_val, max_val]; unlike clip, no gradient at the bounds (torch's)."""
        x = (self <= min_val).where(min_val, cast("Tensor", self))
        return (x >= max_val).where(max_val, x)

    def softsign(self) -> Tensor:
        """x / (1 + |x|)"""
        return self / (1 + self.abs())

    def selu(self) -> Tensor:
        """scale * elu(x, alpha), with the constants of Klambauer et al. that keep activations
        at mean 0 and variance 1."""
        return SELU_SCALE * self._float_operand().elu(SELU_ALPHA)

    # ---- softmax family --------------------------------------------------------------------------

    def _shifted(self, axis: int) -> tuple[Tensor, Tensor]:
        """(x - max(x), max(x)) along ``axis``; the shift keeps exp from overflowing.

        The max is a constant to the gradient (its share cancels out exactly, as in PyTorch's
        rule). An all -inf row is shifted by 0, so it stays -inf rather than nan; a row holding
        +inf is nan throughout, as in PyTorch."""
        x = self._float_operand()
        m = x._max(axis, keepdim=True).detach()  # (an empty row has no max, and an empty softmax)
        m = (m == -math.inf).where(0.0, m)
        return x - m, m

    def softmax(self, axis: int = -1) -> Tensor:
        """e**x / sum(e**x) along ``axis``: one kernel for the max, one for the sum, one to
        divide."""
        e = self._shifted(axis)[0].exp()
        return e / e.sum(axis, keepdim=True)

    def softmin(self, axis: int = -1) -> Tensor:
        """softmax(-x) along ``axis``: the smallest values weigh most."""
        return (-self._float_operand()).softmax(axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        """x - logsumexp(x) along ``axis``."""
        s = self._shifted(axis)[0]
        return s - s.exp().sum(axis, keepdim=True).log()

    def logsumexp(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """log(sum(e**x)) over ``axis``, computed stably as m + log(sum(e**(x - m))).

        The max m is a constant to the gradient, which is then softmax(x). (PyTorch's is
        e**(x - logsumexp(x)): where the log of the count rounds away, as for 4 equal values
        of 1e30, its gradient sums to 4 instead of 1.)"""
        x = self._float_operand()
        m = x._max(axis, keepdim=True).detach()  # an empty axis: -inf, then 0; logsumexp -inf
        m = m.isinf().where(0.0, m)
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.squeeze_axes(self._resolve_axes(axis))

    def squeeze_axes(self, axes: Sequence[int]) -> Tensor:
        """Drop the given size-1 axes."""
        keep = {self._axis(a) for a in axes}
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in keep))

    # ---- logical reductions ----------------------------------------------------------------------

    def any(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """True where some element over ``axis`` is nonzero (nan is), False over no elements, as
        ``torch.any`` (which answers uint8 for uint8 input).

        >>> Tensor([[0.0, 2.0], [0.0, 0.0]]).any(1).tolist()
        [True, False]
        """
        nonzero = cast("Tensor", self) if self.dtype == dtypes.bool else self != 0
        out = nonzero._max(axis, keepdim)
        return out.cast(dtypes.uint8) if self.dtype == dtypes.uint8 else out

    def all(self, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """True where every element over ``axis`` is nonzero, True over no elements: not any(x ==
        0).

        >>> Tensor([[1, 2], [0, 3]]).all(1).tolist()
        [True, False]
        """
        zero = self.logical_not() if self.dtype == dtypes.bool else self == 0
        out = zero._max(axis, keepdim).logical_not()
        return out.cast(dtypes.uint8) if self.dtype == dtypes.uint8 else out

    # ---- arg reductions --------------------------------------------------------------------------

    def _positions(self, axis: int) -> Tensor:
        """0, 1, ... n-1 along ``axis``, shaped to broadcast against this tensor."""
        n = self.shape[axis]
        shape = tuple(n if i == axis else 1 for i in range(self.ndim))
        return type(self).arange(n, device=self.device).reshape(shape)

    def _arg_first(self, hit: Tensor, axis: int, keepdim: bool) -> Tensor:
        """The first index along ``axis`` where ``hit`` is true: n - max(where(hit, n - i, 0))."""
        n = self.shape[axis]
        score = hit.where(n - self._positions(axis), 0)
        return (n - score._max(axis, keepdim)).cast(dtypes.int32)

    def _is_best(self, best: Tensor) -> Tensor:
        """Where this tensor holds ``best`` (its max or min along an axis): a nan is the best of a
        row holding one (max and min propagate it), so argmax points at the first nan, as
        PyTorch's."""
        hit = self == best
        return hit | self.isnan() if self.dtype.is_float else hit

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index of the largest value (the first one on ties, as PyTorch).

        >>> Tensor([1, 3, 3, 2]).argmax().item()
        1
        """
        if axis is None:
            out = self.flatten().argmax(0)
            return out.reshape((1,) * self.ndim) if keepdim else out
        axis = self._axis(axis)
        if self.ndim == 0:  # the one element is the largest
            return self.zeros_like(dtypes.int32)
        self._require_elements("argmax", axis)
        return self._arg_first(self._is_best(self.max(axis, keepdim=True)), axis, keepdim)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index of the smallest value (the first one on ties)."""
        if axis is None:
            out = self.flatten().argmin(0)
            return out.reshape((1,) * self.ndim) if keepdim else out
        axis = self._axis(axis)
        if self.ndim == 0:
            return self.zeros_like(dtypes.int32)
        self._require_elements("argmin", axis)
        return self._arg_first(self._is_best(self.min(axis, keepdim=True)), axis, keepdim)

    # ---- products and statistics -----------------------------------------------------------------

    def prod(
        self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None
    ) -> Tensor:
        """The product over ``axis``, multiplying halves pairwise (exact for integers).

        >>> Tensor([1, 2, 3, 4]).prod().item()
        24
        """
        axes = self._resolve_axes(axis)
        x = self if dtype is None else self.cast(dtype)
        if dtype is None and (x.dtype == dtypes.bool or (x.dtype.is_int and x.dtype.itemsize < 8)):
            x = x.cast(dtypes.int64)
        rest = [i for i in range(x.ndim) if i not in axes]
        kept = tuple(x.shape[i] for i in rest)
        count = prod(x.shape[a] for a in axes)
        if count == 0:
            return type(self).full(
                kept
                if not keepdim
                else tuple(1 if i in axes else s for i, s in enumerate(self.shape)),
                1,
                x.dtype,
                self.device,
            )
        x = x.permute(rest + list(axes)).reshape(kept + (count,))
        level = 0
        while x.shape[-1] > 1:
            n = x.shape[-1]
            if n % 2:
                x = x.pad([None] * len(kept) + [(0, 1)], value=1)
            x = x.reshape(kept + (2, (n + 1) // 2))
            x = x[..., 0, :] * x[..., 1, :]
            level += 1
            if level % 4 == 0 and x.shape[-1] > 1:
                x = x.contiguous()  # bound the loads per element to 16 per kernel
        out = x.reshape(kept)
        if keepdim:
            out = out.reshape(tuple(1 if i in axes else s for i, s in enumerate(self.shape)))
        return out

    def var(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """The variance over ``axis``, dividing by ``n - correction`` (Bessel's by default)."""
        x = self._float_operand()
        n = prod(self.shape[a] for a in self._resolve_axes(axis))
        deviation = x - x.mean(axis, keepdim=True)
        return (deviation * deviation).sum(axis, keepdim) / max(0, n - correction)

    def std(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """The standard deviation: sqrt(var)."""
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(
        self, axis: Axis = None, keepdim: bool = False, correction: int = 1
    ) -> tuple[Tensor, Tensor]:
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(
        self, axis: Axis = None, keepdim: bool = False, correction: int = 1
    ) -> tuple[Tensor, Tensor]:
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def _vector_norm(self, p: float, axis: int) -> Tensor:
        """The p-norm along ``axis`` (kept), as ``torch.linalg.vector_norm``: p = 0 counts the
        nonzero elements, +-inf takes the largest or smallest |x|. The 2-norm of zeros has
        gradient 0 (PyTorch's), not the nan of sqrt'(0) * 0."""
        x = self._float_operand()
        if p == 2:
            squares = (x * x).sum(axis, keepdim=True)
            zero = squares == 0
            return zero.where(0.0, zero.where(1.0, squares).sqrt())
        if p == 0:
            return (x != 0).sum(axis, keepdim=True).cast(x.dtype)
        if p in (math.inf, -math.inf):
            return x.abs()._max(axis, True) if p > 0 else x.abs()._min(axis, True)
        return (x.abs() ** p).sum(axis, keepdim=True) ** (1 / p)

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        """x / max(||x||_p, eps) along ``dim``, as ``F.normalize``.

        >>> Tensor([[3.0, 4.0]]).normalize().tolist()
        [[0.6000000238418579, 0.800000011920929]]
        """
        norm = self._vector_norm(p, self._axis(dim))
        return self._float_operand() / norm.clip(eps)
