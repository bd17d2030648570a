"""exp2 and log2 of float32 made of plain arithmetic, for targets whose math functions are scalar
library calls that keep the compiler from vectorising a loop (C's ``exp2f`` without
``-ffast-math``). Both split the argument into an exponent, handled exactly with integer bit
operations, and a reduced part, given by a polynomial; special values are selected at the end.

The polynomials are Cephes' (S. L. Moshier, ``exp2f.c`` and ``logf.c``). Measured over every
float32 input against float64 libm: at most 1.22 ulp for exp2 and 1.38 ulp for log2, subnormal
results and inputs included (libm's float32 functions: below 1 ulp). Every operation is written
out, so the result does not depend on the compiler contracting ``a*b + c`` into an FMA or not;
on a target with a native MULACC the polynomials are evaluated with it (one rounding a step:
the bounds above hold, and an exp costs a sixth fewer operations).
"""

from __future__ import annotations

from fusegrad.dtype import DType, dtypes
from fusegrad.uop.ops import Ops, UOp

F32, I32, U32 = dtypes.float32, dtypes.int32, dtypes.uint32
#: 2**f - 1 = f * EXP2_POLY(f) for f in [-1/2, 1/2], highest degree first
EXP2_POLY = (
    1.535336188319500e-4,
    1.339887440266574e-3,
    9.618437357674640e-3,
    5.550332471162809e-2,
    2.402264791363012e-1,
    6.931472028550421e-1,
)
#: ln(1+r) = r - r**2/2 + r**3 * LOG_POLY(r) for 1+r in [sqrt(1/2), sqrt(2)), highest degree first
LOG_POLY = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)
#: adding 1.5 * 2**23 to a float32 of magnitude below 2**22 rounds it to an integer, which then
#: sits in the low bits of the sum's mantissa
ROUNDING_MAGIC, ROUNDING_MAGIC_BITS = 12582912.0, 0x4B400000
#: the bits of float32 sqrt(1/2): log2 reduces its argument to [sqrt(1/2), sqrt(2))
SQRT_HALF_BITS = 0x3F3504F3
#: log2(e) - 1: multiplying by it and then adding the operand loses less than multiplying by log2(e)
LOG2E_MINUS_1 = 0.44269504088896340736
SMALLEST_NORMAL = 2.0**-126


def _c(dtype: DType, value: float) -> UOp:
    return UOp.const(dtype, value)


def _bitcast(x: UOp, dtype: DType) -> UOp:
    return UOp(Ops.BITCAST, dtype, (x,))


def _horner(x: UOp, coefficients: tuple[float, ...], fma: bool) -> UOp:
    """c0*x**n + ... + cn, as ((c0*x + c1)*x + ...) + cn; each step a MULACC with ``fma``."""
    result = _c(F32, coefficients[0])
    for c in coefficients[1:]:
        result = UOp(Ops.MULACC, F32, (result, x, _c(F32, c))) if fma else result * x + c
    return result


def _power_of_two(n: UOp) -> UOp:
    """2**n as a float32, for an int32 n in [-126, 127]: n + 127 is its biased exponent."""
    return _bitcast(UOp(Ops.SHL, U32, ((n + 127).cast(U32), _c(U32, 23))), F32)


def exp2_f32(x: UOp, fma: bool = False) -> UOp:
    """2**x = 2**n * 2**f with n the integer nearest x and f = x - n in [-1/2, 1/2].

    x is first clamped to [-160, 130] (past both ends the result is 0 or inf anyway; NaN fails
    both comparisons and stays NaN), so that n fits the rounding trick. 2**n is applied as
    2**(n//2) * 2**(n - n//2), two normal numbers: the product overflows to inf for n >= 128
    and rounds once to a subnormal or 0 for n < -126, with no special case. n//2 is an
    arithmetic shift (floor), one instruction where C's truncating division takes three.
    """
    clamped = (x.lt(-160.0)).where(_c(F32, -160.0), x)
    clamped = (_c(F32, 130.0).lt(clamped)).where(_c(F32, 130.0), clamped)
    shifted = clamped + ROUNDING_MAGIC
    f = clamped - (shifted - ROUNDING_MAGIC)  # exact: f is what rounding to n removed
    # n from the sum's bits, not by casting to int: a NaN cast to int is undefined in C
    n = _bitcast(shifted, I32) - ROUNDING_MAGIC_BITS
    fraction = _horner(f, EXP2_POLY, fma) * f + 1.0
    half = UOp(Ops.SHR, I32, (n, _c(I32, 1)))
    return fraction * _power_of_two(half) * _power_of_two(n - half)


def log2_f32(x: UOp, fma: bool = False) -> UOp:
    """log2(x) = e + log2(m) with x = m * 2**e and m in [sqrt(1/2), sqrt(2)).

    Subnormal x are scaled by 2**23 first, so their exponent is in the bits. Subtracting the bits
    of sqrt(1/2) makes the top 9 bits of the difference e (the sign bit too: e may be
    negative); subtracting just those from x's bits leaves m. Zero, negative, inf and NaN
    inputs get their results from selects at the end.
    """
    tiny = x.lt(SMALLEST_NORMAL)
    scaled = tiny.where(x * 2.0**23, x)
    bits = _bitcast(scaled, U32)
    offset = bits - SQRT_HALF_BITS  # wraps, as unsigned arithmetic does
    exponent = UOp(Ops.SHR, I32, (_bitcast(offset, I32), _c(I32, 23)))  # arithmetic shift
    m = _bitcast(bits - (offset & 0xFF800000), F32)
    e = exponent.cast(F32) - tiny.where(_c(F32, 23.0), _c(F32, 0.0))
    r = m - 1.0  # exact: m is within a factor of 2 of 1
    r2 = r * r
    ln_rest = r * r2 * _horner(r, LOG_POLY, fma) - r2 * 0.5  # ln(1+r) = r + ln_rest
    # (r + ln_rest) * log2(e), with the multiplication by 1 done exactly
    result = ln_rest * LOG2E_MINUS_1 + r * LOG2E_MINUS_1 + ln_rest + r + e
    result = x.ne(0.0).where(result, _c(F32, -float("inf")))  # log2(+-0) = -inf
    result = x.lt(0.0).where(_c(F32, float("nan")), result)  # log2(x < 0) = NaN
    result = x.ne(float("inf")).where(result, _c(F32, float("inf")))
    return x.ne(x).where(x, result)  # NaN in, NaN out


FLOAT32_MATH = {Ops.EXP2: exp2_f32, Ops.LOG2: log2_f32}
