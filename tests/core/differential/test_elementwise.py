"""Elementwise ops against torch: unary math and activations, binary arithmetic, comparisons,
bitwise and logical ops, and the ops of three tensors (where, lerp, clip).

A new op is one line: ``*unary("name")`` when ``x.name()`` and torch's ``name(x)`` agree, with
``low``/``high`` for its domain, ``dtypes`` for more than float32, ``ref=`` for torch's spelling.
"""

from __future__ import annotations

import pytest

from .harness import (
    DEVICES,
    SPECIAL,
    F,
    binary,
    bool_,
    case,
    check,
    f16,
    f32,
    f64,
    floats,
    i8,
    i32,
    i64,
    ints,
    mask,
    params,
    torch,
    u8,
    unary,
    values,
)

# ---- known differences from torch: each a bug to fix, and an xfail(strict) until then -----------

HUGE_COS = "cos(x) is sin(pi/2 - x), and pi/2 rounds away for |x| > 2**24: cos(1e30) -0.791, torch -0.612"
SIGN_OF_INF = "sign(x) adds x * 0 to keep nan, which makes sign(+-inf) nan (torch +-1); sign(nan) nan, torch 0"
CLAMPS_NAN = "a where(x > limit) clamp maps nan to the limit: relu(nan) 0, hardtanh(nan) -0.5; torch nan"
POW_OF_INF = "(-inf) ** 2.5 and (-inf) ** 1.5 are nan (a negative base to a fractional power); torch inf"
POW_SPECIAL = ("pow at IEEE's special cases: (-inf) ** y nan (torch 0 or inf), 1 ** inf and 1 ** nan "
               "and (-1) ** inf nan (torch 1), (-0.0) ** -1 inf (torch -inf)")
ROUNDING_GRADIENT = ("trunc/floor/ceil/round keep floats of |x| >= 2**23 as they are (where(small, "
                     "rounded, x)), so their gradient there is 1, not 0")
MAXIMUM_NAN = "on CPU maximum(nan, y) and minimum(nan, y) are y (the C comparison drops nan); torch nan"
FLOOR_DIVIDE_INF = ("floor(a / b): inf // 2.0 is inf (torch nan, as Python and numpy), -0.5 // inf is "
                    "-0.0 (torch -1.0)")
MOD_INF = ("a - trunc(a / b) * b: 2.5 % inf and fmod(2.5, inf) nan (torch 2.5); 1e30 % 3.5 is 0 (torch "
           "2.5); 1e30 % 1e-30 -inf (torch nan)")
LE_NAN = "a <= b is not (a > b), so x <= nan and x >= nan are True; torch False"
BOOL_0D = "Tensor(np.array(True)) raises DTypeError 'cannot make a tensor from bool np.True_'"
NOT_INF = tuple(v for v in SPECIAL if abs(v) != float("inf"))  # torch's gelu(inf) is nan

# ---- one tensor ----------------------------------------------------------------------------------

FLOAT_OUT = (f32, f16, i32)  # an int input gives a float result, as in torch

UNARY = [
    *unary("exp", low=-4, high=4, dtypes=FLOAT_OUT),
    *unary("exp2", low=-4, high=4, dtypes=(f32, f16)),
    *unary("log", low=0.01, high=10, dtypes=(f32, f16, f64)),
    *unary("log2", low=0.01, high=10, dtypes=(f32, f16)),
    *unary("sqrt", low=0, high=10, dtypes=FLOAT_OUT),
    *unary("rsqrt", low=0.2, high=10),
    *unary("reciprocal", low=0.1, high=5, dtypes=FLOAT_OUT),
    *unary("sin", low=-6, high=6, dtypes=FLOAT_OUT),
    *unary("cos", low=-6, high=6, dtypes=(f32, f16), xfail={"special": HUGE_COS}),
    *unary("tan", low=-1.2, high=1.2, xfail={"special": HUGE_COS}),
    *unary("tanh", low=-4, high=4, dtypes=(f32, f16)),
    *unary("sigmoid", low=-6, high=6, dtypes=FLOAT_OUT),
    *unary("erf"),
    *unary("abs", dtypes=(f32, f16, i32, i8, i64, u8), kinks=True),
    *unary("neg", dtypes=(f32, f16, f64, i32, i8, i64)),
    *unary("square", dtypes=(f32, i32)),
    *unary("sign", dtypes=(f32, i32, i8), xfail={"special": SIGN_OF_INF}),
    *unary("floor", dtypes=(f32, f16, f64)),
    *unary("ceil", dtypes=(f32, f16, f64)),
    *unary("trunc", dtypes=(f32, f64)),
    *unary("round", low=-4, high=4, dtypes=(f32, f16)),
    *unary("isnan", grad=False),
    *unary("isinf", grad=False),
    *unary("isfinite", grad=False),
    *unary("logical_not", dtypes=(f32, i32, bool_)),
    *unary("bitwise_not", low=-50, high=50, dtypes=(i32, u8, i8, bool_)),
    # activations
    *unary("relu", dtypes=(f32, f16, i32, i8), kinks=True, xfail={"special": CLAMPS_NAN}),
    *unary("relu6", low=-2, high=8, dtypes=(f32, i32), kinks=True, xfail={"special": CLAMPS_NAN}),
    *unary("leaky_relu", 0.1, kinks=True),
    *unary("elu", 0.7, kinks=True),
    *unary("celu", 1.5, kinks=True),
    *unary("gelu", ours=lambda x: x.gelu(), ref=lambda x: F.gelu(x, approximate="tanh"), low=-4, high=4),
    *unary("gelu", "none", tag="exact", ref=F.gelu, low=-4, high=4, kinks=True, special=NOT_INF),
    *unary("quick_gelu", ref=lambda x: x * torch.sigmoid(1.702 * x), low=-4, high=4),
    *unary("silu", low=-4, high=4, dtypes=(f32, f16)),
    *unary("swish", ref=F.silu, low=-4, high=4),
    *unary("mish", low=-6, high=6, kinks=True),
    *unary("softplus", low=-30, high=30, kinks=True),
    *unary("softplus", 2, 5, tag="beta", low=-6, high=6),
    *unary("hardswish", low=-5, high=5, kinks=True),
    *unary("hardsigmoid", low=-5, high=5, kinks=True, xfail={"special": CLAMPS_NAN}),
    *unary("hardtanh", -0.5, 2, kinks=True, xfail={"special": CLAMPS_NAN}),
    *unary("softsign", low=-5, high=5),
    *unary("clip", -1, 2, ref=lambda x: torch.clamp(x, -1, 2), dtypes=(f32, i32, u8), kinks=True),
    *unary("clamp", 0.5, ref=lambda x: torch.clamp(x, min=0.5), tag="min"),
    # with a Python number
    *unary("pow", ours=lambda x: x**3, ref=lambda x: x**3, tag="int", dtypes=(f32, i32, i8)),
    *unary("pow", ours=lambda x: x**-2, ref=lambda x: x**-2, tag="neg_int", low=0.5),
    *unary("pow", ours=lambda x: x**2.5, ref=lambda x: x**2.5, tag="float", low=0, xfail={"special": POW_OF_INF}),
    *unary("pow", ours=lambda x: x**0.5, ref=lambda x: x**0.5, tag="half", low=0.1),
    *unary("pow", ours=lambda x: x**1.5, ref=lambda x: x**1.5, tag="neg_base", grad=False, xfail={"special": POW_OF_INF}),
    *unary("pow", ours=lambda x: x.abs() ** 2.5, ref=lambda x: x.abs() ** 2.5, tag="abs", kinks=True),
    *unary("pow", ours=lambda x: 2**x, ref=lambda x: 2**x, tag="reverse", dtypes=(f32, i32)),
    *unary("add", ours=lambda x: 2.5 + x, ref=lambda x: 2.5 + x, tag="scalar"),
    *unary("sub", ours=lambda x: 2 - x, ref=lambda x: 2 - x, tag="reverse", dtypes=(f32, i32)),
    *unary("mul", ours=lambda x: x * x * x, ref=lambda x: x * x * x, tag="self"),
    *unary("div", ours=lambda x: 1.5 / x, ref=lambda x: 1.5 / x, tag="reverse", low=0.5),
    *unary("div", ours=lambda x: x / 2, ref=lambda x: x / 2, tag="scalar", dtypes=(f32, i32)),
    *unary(
        "floor_divide",
        ours=lambda x: x // 3,
        ref=lambda x: torch.div(x, 3, rounding_mode="floor"),
        low=-20,
        high=20,
        dtypes=(i32, i8, f32),
    ),
    *unary(
        "floor_divide",
        ours=lambda x: x // -4,
        ref=lambda x: torch.div(x, -4, rounding_mode="floor"),
        tag="neg",
        low=-20,
        high=20,
        dtypes=(i32, f32),
    ),
    *unary("remainder", ours=lambda x: x % 3, ref=lambda x: x % 3, low=-20, high=20, dtypes=(i32, i8, i64)),
    *unary("remainder", ours=lambda x: x % -3, ref=lambda x: x % -3, tag="neg", low=-20, high=20, dtypes=(i32,)),
    *unary("remainder", ours=lambda x: x % 2.5, ref=lambda x: x % 2.5, tag="float", low=-20, high=20),
    *unary("lshift", ours=lambda x: x << 2, ref=lambda x: x << 2, low=-20, high=20, dtypes=(i32, u8)),
    *unary("rshift", ours=lambda x: x >> 1, ref=lambda x: x >> 1, low=-20, high=20, dtypes=(i32, u8)),
    # chosen values
    case("round-halves", lambda x: x.round(), values(-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 2.4999, -0.6)),
    case("round-huge", lambda x: x.round(), values(1e10 + 0.5, -3e9, 1e30, 8388609.0), xfail=ROUNDING_GRADIENT),
    case("trunc-huge", lambda x: x.trunc(), values(3e9, -3e9, 1e30, -0.7, 0.7, 8388609.0), xfail=ROUNDING_GRADIENT),
    case("floor-huge", lambda x: x.floor(), values(3e9, -3e9, 1e30, -0.7, 0.7, -8388609.0), xfail=ROUNDING_GRADIENT),
    case("ceil-huge", lambda x: x.ceil(), values(3e9, -3e9, 1e30, -0.7, 0.7, -8388609.0), xfail=ROUNDING_GRADIENT),
]

# ---- two tensors ---------------------------------------------------------------------------------

ARITHMETIC = (f32, i32, f16, i64, i8)
COMPARED = (f32, i32, u8, bool_)
NONZERO = (0.5, 3.0)  # a divisor's range


def floor_div(a, b):
    return torch.div(a, b, rounding_mode="floor")


BINARY = [
    *binary("add", lambda a, b: a + b, dtypes=ARITHMETIC),
    *binary("sub", lambda a, b: a - b, dtypes=ARITHMETIC),
    *binary("mul", lambda a, b: a * b, dtypes=ARITHMETIC),
    *binary("div", lambda a, b: a / b, b=NONZERO, dtypes=(f32, f16, f64)),
    *binary("div", lambda a, b: a / b, tag="int", a=(-9, 9), b=(1, 5), dtypes=(i32,)),
    *binary("maximum", lambda a, b: a.maximum(b), ref=torch.maximum, kind="ties", dtypes=ARITHMETIC, xfail={"special": {"CPU": MAXIMUM_NAN}}),
    *binary("minimum", lambda a, b: a.minimum(b), ref=torch.minimum, kind="ties", dtypes=ARITHMETIC, xfail={"special": {"CPU": MAXIMUM_NAN}}),
    *binary("pow", lambda a, b: a**b, tag="tensor", a=(0.5, 3), b=(-2, 2), xfail={"special": POW_SPECIAL}),
    *binary("pow", lambda a, b: a ** b.abs(), tag="int", a=(-4, 4), b=(-3, 3), dtypes=(i32,)),
    *binary("floor_divide", lambda a, b: a // b, ref=floor_div, b=NONZERO, xfail={"special": FLOOR_DIVIDE_INF}),
    *binary("floor_divide", lambda a, b: a // b, ref=floor_div, tag="int", a=(-20, 20), b=(1, 5), dtypes=(i32, i8)),
    *binary("remainder", lambda a, b: a % b, a=(-9, 9), b=NONZERO, xfail={"special": MOD_INF}),
    *binary("remainder", lambda a, b: a % b, tag="int", a=(-20, 20), b=(1, 5), dtypes=(i32, i64)),
    *binary("fmod", lambda a, b: a.fmod(b), ref=torch.fmod, a=(-9, 9), b=NONZERO, xfail={"special": MOD_INF}),
    *binary("bitwise_and", lambda a, b: a & b, a=(-50, 50), b=(-50, 50), dtypes=(i32, u8, bool_)),
    *binary("bitwise_or", lambda a, b: a | b, a=(-50, 50), b=(-50, 50), dtypes=(i32, u8, bool_)),
    *binary("bitwise_xor", lambda a, b: a ^ b, a=(-50, 50), b=(-50, 50), dtypes=(i32, u8, bool_)),
    *binary("lshift", lambda a, b: a << b, a=(-20, 20), b=(0, 3), dtypes=(i32,)),
    *binary("rshift", lambda a, b: a >> b, a=(-20, 20), b=(0, 3), dtypes=(i32,)),
    *binary("logical_and", lambda a, b: a.logical_and(b), ref=torch.logical_and, kind="ties", dtypes=(i32, f32, bool_)),
    *binary("logical_or", lambda a, b: a.logical_or(b), ref=torch.logical_or, kind="ties", dtypes=(i32, f32, bool_)),
    *binary("logical_xor", lambda a, b: a.logical_xor(b), ref=torch.logical_xor, kind="ties", dtypes=(f32, i32, bool_)),
    *binary("lt", lambda a, b: a < b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("gt", lambda a, b: a > b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("le", lambda a, b: a <= b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED, xfail={"special": LE_NAN}),
    *binary("ge", lambda a, b: a >= b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED, xfail={"special": LE_NAN}),
    *binary("eq", lambda a, b: a == b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("ne", lambda a, b: a != b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("lerp", lambda a, b: a.lerp(b, 0.3), ref=lambda a, b: torch.lerp(a, b, 0.3)),
    case("add-mixed_dtypes", lambda a, b: a + b, ints(3, 4), floats(4)),
    case("lt-mixed_dtypes", lambda a, b: a < b, ints(3, 4, low=-3, high=3), values(-1.5, 0.0, 2.0, 0.5)),
    case("eq-mixed_dtypes", lambda a, b: a == b, ints(3, 4, low=-3, high=3), values(-1.0, 0.0, 2.0, 0.5)),
    case("floor_divide-neg_divisor", lambda a, b: a // b, ints(3, 8), values(-4, -3, -2, -1, 1, 2, 3, 4, dtype=i32), ref=floor_div),
    case("remainder-neg_divisor", lambda a, b: a % b, ints(3, 8), values(-4, -3, -2, -1, 1, 2, 3, 4, dtype=i32)),
    case("pow-special_base", lambda a, b: a**b, values(0, 0, 0, -2, -2, -8, 1, 4), values(2, 0, -1, 3, 2, 1 / 3, 0, 0.5), grad=False),
]

# ---- three tensors -------------------------------------------------------------------------------

TERNARY = [
    case("where-2d", lambda c, a, b: c.where(a, b), mask(3, 4), floats(3, 4), floats(4), ref=torch.where),
    case("where-bcast", lambda c, a, b: c.where(a, b), mask(3, 1), floats(4), floats(3, 4).T, ref=torch.where),
    case("where-0d", lambda c, a, b: c.where(a, b), mask(), floats(3, 4), floats(), ref=torch.where, xfail=BOOL_0D),
    case("where-0d_cond", lambda c, a, b: c.where(a, b), mask(1, 1).T, floats(3, 4), floats(), ref=torch.where),
    case("where-scalar", lambda c, a: c.where(a, 0.0), mask(3, 4), floats(1, 4), ref=lambda c, a: torch.where(c, a, 0.0)),
    case("where-scalar_first", lambda c, a: c.where(2.5, a), mask(3, 4), floats(3, 4), ref=lambda c, a: torch.where(c, 2.5, a)),
    case("where-int", lambda c, a, b: c.where(a, b), mask(3, 4), ints(3, 4), ints(3, 1), ref=torch.where),
    case("where-f16", lambda c, a, b: c.where(a, b), mask(4), floats(3, 4, dtype=f16), floats(dtype=f16), ref=torch.where),
    case("where-empty", lambda c, a, b: c.where(a, b), mask(0, 4), floats(0, 4), floats(4), ref=torch.where),
    case("where-from_comparison", lambda a: (a > 0).where(a, a * 0.1), floats(4, 3), ref=lambda a: torch.where(a > 0, a, a * 0.1)),
    case("lerp-tensor", lambda a, b, w: a.lerp(b, w), floats(3, 4), floats(4), floats(3, 1), ref=torch.lerp),
    case("lerp-sigmoid", lambda a, b: a.lerp(b, b.sigmoid()), floats(4, 1, 3), floats(5, 1), ref=lambda a, b: torch.lerp(a, b, b.sigmoid())),
    case("clip-tensors", lambda a, lo, hi: a.clip(lo, hi), floats(3, 4), floats(4, high=-1), floats(3, 1, low=1), ref=torch.clamp),
    case("clip-min_tensor", lambda a, lo: a.clip(lo), floats(3, 4), floats(4), ref=lambda a, lo: torch.clamp(a, lo)),
    case("clip-special", lambda a: a.clip(-1, 1.5), values(*SPECIAL), ref=lambda a: torch.clamp(a, -1, 1.5), grad=False),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(UNARY))
def test_unary(c, device, request):
    check(c, device, request)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(BINARY))
def test_binary(c, device, request):
    check(c, device, request)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(TERNARY))
def test_ternary(c, device, request):
    check(c, device, request)
