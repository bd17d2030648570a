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
    inf,
    ints,
    mask,
    nan,
    params,
    torch,
    u8,
    unary,
    values,
)

# ---- known differences from torch: each a bug to fix, and an xfail(strict) until then -----------

FLOOR_DIVIDE_INF = (
    "floor(a / b): inf // 2.0 is inf (torch nan, as Python and numpy), -0.5 // inf is "
    "-0.0 (torch -1.0)"
)
MOD_INF = (
    "fmod and % are exact only while |a / b| < 2**24: beyond, a - trunc(a / b) * b rounds, so "
    "1e30 % 3.5 is 0 (torch 1.0) and 2.5 % 1e-30 is 0 (torch 3.2e-31)"
)
WGSL_I64_SHIFT = "the WGSL renderer writes an int64 shift as x >> u32(62li), which naga rejects"
NOT_INF = tuple(v for v in SPECIAL if abs(v) != float("inf"))  # torch's gelu(inf) is nan
#: where activations saturate (e**-x overflows below -88.7 in float32)
EXTREME = (-inf, -1e30, -400.0, -100.0, -88.8, -3.5, 0.0, 3.5, 88.8, 100.0, 400.0, 1e30, inf)
#: bases and exponents of pow's special cases (C's pow; torch's sqrt and rsqrt for +-0.5)
POW_EDGES = (-inf, -1e30, -2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 1e30, inf, nan)
POW_EXPONENTS = (0.3, -0.3, 2.5, -1.0, -2.0, 2, 3, 0, 0.5, -0.5, inf, -inf, nan)

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
    *unary("cos", low=-6, high=6, dtypes=(f32, f16)),
    *unary("tan", low=-1.2, high=1.2),
    *unary("tanh", low=-4, high=4, dtypes=(f32, f16)),
    *unary("sigmoid", low=-6, high=6, dtypes=FLOAT_OUT),
    *unary("erf"),
    # inverse trigonometric and hyperbolic, log1p and log10: ints give floats
    *unary("atan", low=-5, high=5, dtypes=(f32, f16, f64, i32)),
    *unary("asin", low=-1, high=1, dtypes=(f32, f16, f64, i32)),
    *unary("acos", low=-1, high=1, dtypes=(f32, f16, f64, i32)),
    *unary("sinh", low=-5, high=5, dtypes=(f32, f16, f64, i32)),
    *unary("cosh", low=-5, high=5, dtypes=(f32, f16, f64, i32)),
    *unary("asinh", low=-5, high=5, dtypes=(f32, f16, f64, i32)),
    *unary("acosh", low=1, high=6, dtypes=(f32, f16, f64, i32)),
    *unary("atanh", low=-1, high=1, dtypes=(f32, f16, f64, i32)),
    *unary("log1p", low=-0.9, high=5, dtypes=(f32, f16, f64, i32)),
    *unary("log10", low=0.01, high=10, dtypes=(f32, f16, f64, i32)),
    *unary("abs", dtypes=(f32, f16, i32, i8, i64, u8), kinks=True),
    *unary("neg", dtypes=(f32, f16, f64, i32, i8, i64)),
    *unary("square", dtypes=(f32, i32)),
    *unary("sign", dtypes=(f32, i32, i8)),
    *unary("floor", dtypes=(f32, f16, f64)),
    *unary("ceil", dtypes=(f32, f16, f64)),
    *unary("trunc", dtypes=(f32, f64)),
    *unary("round", low=-4, high=4, dtypes=(f32, f16)),
    *unary("isnan", grad=False, dtypes=(f32, f16, i32, u8, bool_)),
    *unary("isinf", grad=False, dtypes=(f32, f16, i32, u8, bool_)),
    *unary("isfinite", grad=False, dtypes=(f32, f16, i32, u8, bool_)),
    *unary("logical_not", dtypes=(f32, i32, bool_)),
    *unary("bitwise_not", low=-50, high=50, dtypes=(i32, u8, i8, bool_)),
    # PyTorch's convenience methods (tensor/aliases.py)
    *unary("expm1", low=-4, high=4, dtypes=(f32, f64, i32)),
    case(
        "expm1-tiny",
        lambda x: x.expm1(),
        values(1e-10, -1e-7, 3e-5, -2e-3, 0.3, -0.7),
        tol={"rtol": 1e-6, "atol": 0},
    ),
    *unary("frac", low=-5, high=5, dtypes=(f32, f64)),
    *unary("sgn", grad=False, dtypes=(f32, i32)),  # torch: no gradient to compare
    *unary("signbit", grad=False, dtypes=(f32, f16, f64, i32, u8)),
    *unary("deg2rad", low=-400, high=400, dtypes=(f32, f64)),
    *unary("rad2deg", dtypes=(f32, f64)),
    *unary("nan_to_num", dtypes=(f32, f64, f16, i32)),
    *unary("nan_to_num", 1.5, 9.0, -9.0, tag="values", dtypes=(f32, f64)),
    *unary("float_power", 2.5, low=0, high=3, dtypes=(f32, i32)),
    # activations
    *unary("relu", dtypes=(f32, f16, i32, i8), kinks=True),
    *unary("relu6", low=-2, high=8, dtypes=(f32, i32), kinks=True),
    *unary("leaky_relu", 0.1, kinks=True),
    *unary("elu", 0.7, kinks=True),
    *unary("celu", 1.5, kinks=True),
    *unary(
        "gelu", ours=lambda x: x.gelu(), ref=lambda x: F.gelu(x, approximate="tanh"), low=-4, high=4
    ),
    *unary("gelu", "none", tag="exact", ref=F.gelu, low=-4, high=4, kinks=True, special=NOT_INF),
    *unary("quick_gelu", ref=lambda x: x * torch.sigmoid(1.702 * x), low=-4, high=4),
    *unary("silu", low=-4, high=4, dtypes=(f32, f16)),
    *unary("swish", ref=F.silu, low=-4, high=4),
    *unary("mish", low=-6, high=6, kinks=True),
    *unary("softplus", low=-30, high=30, kinks=True),
    *unary("softplus", 2, 5, tag="beta", low=-6, high=6),
    *unary("hardswish", low=-5, high=5, kinks=True),
    *unary("hardsigmoid", low=-5, high=5, kinks=True),
    *unary("hardtanh", -0.5, 2, kinks=True),
    *unary("softsign", low=-5, high=5),
    *unary("selu", dtypes=(f32, f16, f64), kinks=True),
    *unary("logsigmoid", low=-30, high=30, dtypes=(f32, f16, f64), kinks=True),
    *unary("clip", -1, 2, ref=lambda x: torch.clamp(x, -1, 2), dtypes=(f32, i32, u8), kinks=True),
    *unary("clamp", 0.5, ref=lambda x: torch.clamp(x, min=0.5), tag="min"),
    # with a Python number
    *unary("pow", ours=lambda x: x**3, ref=lambda x: x**3, tag="int", dtypes=(f32, i32, i8)),
    *unary("pow", ours=lambda x: x**-2, ref=lambda x: x**-2, tag="neg_int", low=0.5),
    *unary("pow", ours=lambda x: x**2.5, ref=lambda x: x**2.5, tag="float", low=0),
    *unary("pow", ours=lambda x: x**0.5, ref=lambda x: x**0.5, tag="half", low=0.1),
    *unary("pow", ours=lambda x: x**1.5, ref=lambda x: x**1.5, tag="neg_base", grad=False),
    *unary(
        "pow", ours=lambda x: x.abs() ** 2.5, ref=lambda x: x.abs() ** 2.5, tag="abs", kinks=True
    ),
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
    *unary(
        "remainder",
        ours=lambda x: x % 3,
        ref=lambda x: x % 3,
        low=-20,
        high=20,
        dtypes=(i32, i8, i64),
    ),
    *unary(
        "remainder",
        ours=lambda x: x % -3,
        ref=lambda x: x % -3,
        tag="neg",
        low=-20,
        high=20,
        dtypes=(i32,),
    ),
    *unary(
        "remainder", ours=lambda x: x % 2.5, ref=lambda x: x % 2.5, tag="float", low=-20, high=20
    ),
    # (torch has no gradient of % for its divisor)
    *unary(
        "remainder",
        ours=lambda x: 100.5 % x,
        ref=lambda x: 100.5 % x,
        tag="reverse",
        low=-20,
        high=20,
        dtypes=(f32, i32),
        grad=False,
    ),
    case(
        "remainder-reverse_int", lambda x: 7 % x, values(-4, -3, -2, -1, 1, 2, 3, 5, 9, dtype=i32)
    ),
    *unary("fmod", -3.5, low=-20, high=20, dtypes=(f32, i32, f64), xfail={"special": MOD_INF}),
    *unary(
        "lshift", ours=lambda x: x << 2, ref=lambda x: x << 2, low=-20, high=20, dtypes=(i32, u8)
    ),
    *unary(
        "rshift", ours=lambda x: x >> 1, ref=lambda x: x >> 1, low=-20, high=20, dtypes=(i32, u8)
    ),
    # chosen values
    case(
        "round-halves",
        lambda x: x.round(),
        values(-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 2.4999, -0.6),
    ),
    case("round-huge", lambda x: x.round(), values(1e10 + 0.5, -3e9, 1e30, 8388609.0)),
    case("trunc-huge", lambda x: x.trunc(), values(3e9, -3e9, 1e30, -0.7, 0.7, 8388609.0)),
    case("floor-huge", lambda x: x.floor(), values(3e9, -3e9, 1e30, -0.7, 0.7, -8388609.0)),
    case("ceil-huge", lambda x: x.ceil(), values(3e9, -3e9, 1e30, -0.7, 0.7, -8388609.0)),
    # where activations saturate or overflow, values and gradients (finite where torch's are)
    case("tanh-extreme", lambda x: x.tanh(), values(*EXTREME)),
    case("sigmoid-extreme", lambda x: x.sigmoid(), values(*EXTREME)),
    case(
        "gelu-extreme",
        lambda x: x.gelu(),
        values(*EXTREME),
        ref=lambda x: F.gelu(x, approximate="tanh"),
    ),
    case(
        "gelu-exact_extreme", lambda x: x.gelu("none"), values(*EXTREME[:-1]), ref=F.gelu
    ),  # gelu(inf): torch nan
    case(
        "quick_gelu-extreme",
        lambda x: x.quick_gelu(),
        values(*EXTREME),
        ref=lambda x: x * torch.sigmoid(1.702 * x),
    ),
    case("silu-extreme", lambda x: x.silu(), values(*EXTREME), ref=F.silu),
    case("softplus-extreme", lambda x: x.softplus(), values(*EXTREME), ref=F.softplus),
    case("mish-extreme", lambda x: x.mish(), values(*EXTREME), ref=F.mish),
    # powers at IEEE's edges, values and gradients; integers exact
    *(case(f"pow-edges_{e}", lambda x, e=e: x**e, values(*POW_EDGES)) for e in POW_EXPONENTS),
    case(
        "pow-int64_exact",
        lambda a, b: a**b,
        values(3, -3, 2, 7, 1, -1, 0, 5, dtype=i64),
        values(39, 40, 62, 22, -5, -3, 0, -1, dtype=i64),
        xfail={"WEBGPU": WGSL_I64_SHIFT},
    ),
    case("pow-int_const_20", lambda x: x**20, values(3, -3, 2, 0, 1, -1, dtype=i64)),
    case("pow-int_const_29", lambda x: x**29, values(-2, 0, 2, 1, dtype=i32)),
    case("pow-int_base_float_exp", lambda x: x**1.5, values(1, 2, 3, 4, dtype=i32)),
    case("pow-int_base_whole_float_exp", lambda x: x**2.0, values(1, -2, 3, 4, dtype=i32)),
    case("pow-reverse_int_neg", lambda x: 2**x, values(-1, 2, 0, 5, -3, dtype=i32)),
    # the inverse and hyperbolic functions far out and at their edges, values and gradients
    case("atan-large", lambda x: x.atan(), floats(3, 4, low=300, high=303)),
    case("asin-outside", lambda x: x.asin(), floats(3, 4, low=300, high=303)),
    case("acos-outside", lambda x: x.acos(), floats(3, 4, low=-303, high=-300)),
    case(
        "asin-edges", lambda x: x.asin(), values(-1.0, -0.999999, -1e-20, 0.999999, 1.0), grad=False
    ),
    case("sinh-large", lambda x: x.sinh(), floats(3, 4, low=80, high=89)),
    case("sinh-small", lambda x: x.sinh(), values(1e-30, -1e-8, 1e-4, -0.3, 0.49, 0.51)),
    case("cosh-large", lambda x: x.cosh(), floats(3, 4, low=-89, high=-80)),
    case("asinh-large", lambda x: x.asinh(), values(-1e30, -300.0, 1e5, 1e12, 3e38)),
    case("asinh-small", lambda x: x.asinh(), values(1e-30, -1e-8, 1e-4, -0.3)),
    case("acosh-large", lambda x: x.acosh(), values(1e30, 3e38, 1e12, 300.0)),
    case("acosh-below_one", lambda x: x.acosh(), floats(3, 4, low=-303, high=-300)),
    case("acosh-near_one", lambda x: x.acosh(), values(1.0, 1.0000001, 1.001, 1.5), grad=False),
    case("atanh-outside", lambda x: x.atanh(), floats(3, 4, low=300, high=303)),
    case(
        "atanh-edges", lambda x: x.atanh(), values(-1.0, -0.99, -1e-8, 1e-30, 0.99, 1.0), grad=False
    ),
    case(
        "log1p-small", lambda x: x.log1p(), values(1e-30, -1e-8, 1e-4, -0.5, -1.0, 1e30), grad=False
    ),
    case("logsigmoid-extreme", lambda x: x.logsigmoid(), values(*EXTREME), ref=F.logsigmoid),
    case("selu-extreme", lambda x: x.selu(), values(*EXTREME), ref=F.selu),
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
    *binary(
        "maximum", lambda a, b: a.maximum(b), ref=torch.maximum, kind="ties", dtypes=ARITHMETIC
    ),
    *binary(
        "minimum", lambda a, b: a.minimum(b), ref=torch.minimum, kind="ties", dtypes=ARITHMETIC
    ),
    *binary("pow", lambda a, b: a**b, tag="tensor", a=(0.5, 3), b=(-2, 2)),
    *binary("pow", lambda a, b: a ** b.abs(), tag="int", a=(-4, 4), b=(-3, 3), dtypes=(i32,)),
    *binary(
        "floor_divide",
        lambda a, b: a // b,
        ref=floor_div,
        b=NONZERO,
        xfail={"special": FLOOR_DIVIDE_INF},
    ),
    *binary(
        "floor_divide",
        lambda a, b: a // b,
        ref=floor_div,
        tag="int",
        a=(-20, 20),
        b=(1, 5),
        dtypes=(i32, i8),
    ),
    *binary("remainder", lambda a, b: a % b, a=(-9, 9), b=NONZERO, xfail={"special": MOD_INF}),
    *binary("remainder", lambda a, b: a % b, tag="int", a=(-20, 20), b=(1, 5), dtypes=(i32, i64)),
    *binary(
        "fmod",
        lambda a, b: a.fmod(b),
        ref=torch.fmod,
        a=(-9, 9),
        b=NONZERO,
        xfail={"special": MOD_INF},
    ),
    *binary(
        "fmod",
        lambda a, b: a.fmod(b),
        ref=torch.fmod,
        tag="neg",
        a=(-9, 9),
        b=(-3, -0.5),
        dtypes=(f32, f64, f16),
        xfail={"special": MOD_INF},
    ),
    *binary(
        "fmod",
        lambda a, b: a.fmod(b),
        ref=torch.fmod,
        tag="int",
        a=(-20, 20),
        b=(1, 5),
        dtypes=(i32, i64, i8, u8),
    ),
    *binary(
        "remainder",
        lambda a, b: a % b,
        tag="neg",
        a=(-9, 9),
        b=(-3, -0.5),
        dtypes=(f32, f64, f16),
        xfail={"special": MOD_INF},
    ),
    *binary(
        "mod",
        lambda a, b: a.mod(b),
        ref=torch.remainder,
        a=(-20, 20),
        b=(1, 5),
        dtypes=(i32, f32),
        special=False,
    ),
    *binary(
        "copysign", lambda a, b: a.copysign(b), ref=torch.copysign, dtypes=(f32, f64, f16, i32)
    ),
    *binary("logaddexp", lambda a, b: a.logaddexp(b), ref=torch.logaddexp, dtypes=(f32, f64, f16)),
    *binary(
        "isclose",
        lambda a, b: a.isclose(b),
        ref=torch.isclose,
        kind="ties",
        dtypes=(f32, i32, bool_),
    ),
    *binary("bitwise_and", lambda a, b: a & b, a=(-50, 50), b=(-50, 50), dtypes=(i32, u8, bool_)),
    *binary("bitwise_or", lambda a, b: a | b, a=(-50, 50), b=(-50, 50), dtypes=(i32, u8, bool_)),
    *binary("bitwise_xor", lambda a, b: a ^ b, a=(-50, 50), b=(-50, 50), dtypes=(i32, u8, bool_)),
    *binary("lshift", lambda a, b: a << b, a=(-20, 20), b=(0, 3), dtypes=(i32,)),
    *binary("rshift", lambda a, b: a >> b, a=(-20, 20), b=(0, 3), dtypes=(i32,)),
    *binary(
        "logical_and",
        lambda a, b: a.logical_and(b),
        ref=torch.logical_and,
        kind="ties",
        dtypes=(i32, f32, bool_),
    ),
    *binary(
        "logical_or",
        lambda a, b: a.logical_or(b),
        ref=torch.logical_or,
        kind="ties",
        dtypes=(i32, f32, bool_),
    ),
    *binary(
        "logical_xor",
        lambda a, b: a.logical_xor(b),
        ref=torch.logical_xor,
        kind="ties",
        dtypes=(f32, i32, bool_),
    ),
    *binary("lt", lambda a, b: a < b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("gt", lambda a, b: a > b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("le", lambda a, b: a <= b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("ge", lambda a, b: a >= b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("eq", lambda a, b: a == b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("ne", lambda a, b: a != b, kind="ties", a=(-2, 2), b=(-2, 2), dtypes=COMPARED),
    *binary("lerp", lambda a, b: a.lerp(b, 0.3), ref=lambda a, b: torch.lerp(a, b, 0.3)),
    # PyTorch's convenience methods (tensor/aliases.py)
    *binary("atan2", lambda a, b: a.atan2(b), ref=torch.atan2, dtypes=(f32, f64, i32)),
    *binary("hypot", lambda a, b: a.hypot(b), ref=torch.hypot, dtypes=(f32, f64)),
    *binary(
        "xlogy",
        lambda a, b: a.xlogy(b),
        ref=torch.xlogy,
        kind="ties",
        a=(0, 2),
        b=(1, 3),
        dtypes=(f32, f64),
    ),
    *binary(
        "heaviside",
        lambda a, b: a.heaviside(b),
        ref=torch.heaviside,
        kind="ties",
        grad=False,
        dtypes=(f32, i32),
    ),
    *binary(
        "float_power", lambda a, b: a.float_power(b), ref=torch.float_power, a=(0.5, 3), b=(-2, 2)
    ),
    *binary(
        "true_divide",
        lambda a, b: a.true_divide(b),
        ref=torch.true_divide,
        b=NONZERO,
        dtypes=(f32, i32),
    ),
    *(
        c
        for op in ("eq", "ne", "lt", "le", "gt", "ge")
        for c in binary(
            f"{op}_method",
            lambda a, b, op=op: getattr(a, op)(b),
            kind="ties",
            a=(-2, 2),
            b=(-2, 2),
            dtypes=COMPARED,
        )
    ),
    *(
        case(f"{op}_method-scalar", lambda a, op=op: getattr(a, op)(0.5), floats(3, 4))
        for op in ("eq", "ne", "lt", "le", "gt", "ge")
    ),
    case(
        "atan2-zeros",
        lambda a, b: a.atan2(b),
        values(0.0, -0.0, 0.0, -0.0, 1.0, -1.0),
        values(0.0, 0.0, -0.0, -0.0, -0.0, 0.0),
        ref=torch.atan2,
        grad=False,
    ),
    case(
        "atan2-scalar",
        lambda a: a.atan2(-2.0),
        floats(3, 4),
        ref=lambda a: torch.atan2(a, torch.tensor(-2.0)),
    ),
    case(
        "hypot-large",
        lambda a, b: a.hypot(b),
        values(3e30, -1e-30, 3e20, 0.0),
        values(4e30, 1e-30, 0.0, 0.0),
        ref=torch.hypot,
        grad=False,
    ),
    case(
        "xlogy-zeros",
        lambda a, b: a.xlogy(b),
        values(0.0, 0.0, 0.0, 2.0, 1.0),
        values(0.0, nan, inf, 0.0, nan),
        ref=torch.xlogy,
        grad=False,
    ),
    case("xlogy-scalar", lambda a: a.xlogy(2.0), floats(3, 4), ref=lambda a: torch.xlogy(a, 2.0)),
    case("add-mixed_dtypes", lambda a, b: a + b, ints(3, 4), floats(4)),
    case(
        "lt-mixed_dtypes",
        lambda a, b: a < b,
        ints(3, 4, low=-3, high=3),
        values(-1.5, 0.0, 2.0, 0.5),
    ),
    case(
        "eq-mixed_dtypes",
        lambda a, b: a == b,
        ints(3, 4, low=-3, high=3),
        values(-1.0, 0.0, 2.0, 0.5),
    ),
    case(
        "floor_divide-neg_divisor",
        lambda a, b: a // b,
        ints(3, 8),
        values(-4, -3, -2, -1, 1, 2, 3, 4, dtype=i32),
        ref=floor_div,
    ),
    case(
        "remainder-neg_divisor",
        lambda a, b: a % b,
        ints(3, 8),
        values(-4, -3, -2, -1, 1, 2, 3, 4, dtype=i32),
    ),
    case(
        "fmod-neg_divisor",
        lambda a, b: a.fmod(b),
        ints(3, 8),
        values(-4, -3, -2, -1, 1, 2, 3, 4, dtype=i32),
        ref=torch.fmod,
    ),
    case(
        "remainder-exact",
        lambda a, b: a % b,
        values(1000.7, -1000.7, 123456.78, 5e6 + 0.3, -0.0, 7.0),
        values(0.1, 0.1, -7.3, 3.7, 2.0, -3.5),
        tol={"rtol": 0, "atol": 0},
    ),
    case(
        "fmod-exact",
        lambda a, b: a.fmod(b),
        values(1000.7, -1000.7, 123456.78, 5e6 + 0.3, 2.5, -2.5),
        values(0.1, 0.1, -7.3, 3.7, inf, -inf),
        ref=torch.fmod,
        tol={"rtol": 0, "atol": 0},
    ),
    case(
        "remainder-mixed",
        lambda a, b: a % b,
        ints(3, 4, low=-20, high=20),
        values(2.5, -1.5, 3.0, -4.0),
    ),
    case(
        "copysign-zeros",
        lambda a, b: 1 / a.copysign(b),
        values(0.0, -0.0, 0.0, -0.0, 2.0),
        values(1.0, 1.0, -0.0, -1.0, -0.0),
        grad=False,
    ),
    case(
        "copysign-scalar",
        lambda a: a.copysign(-1.0),
        floats(3, 4),
        ref=lambda a: torch.copysign(a, -1.0),
    ),
    case(
        "logaddexp-large",
        lambda a, b: a.logaddexp(b),
        values(1.0, 2000.0, 30000.0, -100.0, -200.0),
        values(-1.0, 2.0, 3.0, -1.0, 2.0),
        ref=torch.logaddexp,
    ),
    case("isclose-near", lambda a: a.isclose(a + 1e-6), floats(3, 4)),
    case("isclose-far", lambda a: a.isclose(a + 1e-6, atol=0.0), floats(3, 4)),
    case("isclose-rtol", lambda a: a.isclose(a * 1.001, rtol=0.01), floats(3, 4)),
    case(
        "isclose-tiny", lambda a, b: a.isclose(b), values(1e-7, 1e-8, 1e-9), values(0.0, 0.0, 0.0)
    ),
    case(
        "isclose-equal_nan",
        lambda a, b: a.isclose(b, equal_nan=True),
        values(*SPECIAL, shape=(16, 1)),
        values(*SPECIAL, shape=(1, 16)),
    ),
    case(
        "isclose-scalar",
        lambda a: a.isclose(1.0),
        values(1.0, 1.0 + 1e-7, 2.0, inf, -inf, nan),
        ref=lambda a: a.isclose(torch.tensor(1.0)),
    ),
    case(
        "pow-special_base",
        lambda a, b: a**b,
        values(0, 0, 0, -2, -2, -8, 1, 4),
        values(2, 0, -1, 3, 2, 1 / 3, 0, 0.5),
        grad=False,
    ),
    case(
        "pow-edges_tensor",
        lambda a, b: a**b,
        values(*POW_EDGES, shape=(11, 1)),
        values(*POW_EXPONENTS, 1.0, 3.0, -3.0, shape=(1, 16)),
    ),
    case(
        "div-trunc",
        lambda a, b: a.div(b, rounding_mode="trunc"),
        floats(3, 4, low=-9, high=9),
        floats(4, low=0.5),
        ref=lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    ),
    case(
        "div-trunc_int",
        lambda a, b: a.div(b, rounding_mode="trunc"),
        ints(3, 4),
        values(-3, -2, 2, 5, dtype=i32),
        ref=lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    ),
    case(
        "div-floor_int",
        lambda a, b: a.div(b, rounding_mode="floor"),
        ints(3, 4),
        values(-3, -2, 2, 5, dtype=i32),
        ref=lambda a, b: torch.div(a, b, rounding_mode="floor"),
    ),
]

# ---- three tensors -------------------------------------------------------------------------------

TERNARY = [
    case(
        "where-2d",
        lambda c, a, b: c.where(a, b),
        mask(3, 4),
        floats(3, 4),
        floats(4),
        ref=torch.where,
    ),
    case(
        "where-bcast",
        lambda c, a, b: c.where(a, b),
        mask(3, 1),
        floats(4),
        floats(3, 4).T,
        ref=torch.where,
    ),
    case(
        "where-0d", lambda c, a, b: c.where(a, b), mask(), floats(3, 4), floats(), ref=torch.where
    ),
    case(
        "where-0d_cond",
        lambda c, a, b: c.where(a, b),
        mask(1, 1).T,
        floats(3, 4),
        floats(),
        ref=torch.where,
    ),
    case(
        "where-scalar",
        lambda c, a: c.where(a, 0.0),
        mask(3, 4),
        floats(1, 4),
        ref=lambda c, a: torch.where(c, a, 0.0),
    ),
    case(
        "where-scalar_first",
        lambda c, a: c.where(2.5, a),
        mask(3, 4),
        floats(3, 4),
        ref=lambda c, a: torch.where(c, 2.5, a),
    ),
    case(
        "where-int",
        lambda c, a, b: c.where(a, b),
        mask(3, 4),
        ints(3, 4),
        ints(3, 1),
        ref=torch.where,
    ),
    case(
        "where-f16",
        lambda c, a, b: c.where(a, b),
        mask(4),
        floats(3, 4, dtype=f16),
        floats(dtype=f16),
        ref=torch.where,
    ),
    case(
        "where-empty",
        lambda c, a, b: c.where(a, b),
        mask(0, 4),
        floats(0, 4),
        floats(4),
        ref=torch.where,
    ),
    case(
        "where-from_comparison",
        lambda a: (a > 0).where(a, a * 0.1),
        floats(4, 3),
        ref=lambda a: torch.where(a > 0, a, a * 0.1),
    ),
    # a comparison has no gradient: only the other factor's reaches x
    case("lt-times", lambda a: a * (a < 0), floats(4), ref=lambda a: a * (a < 0)),
    case(
        "ne-times", lambda a: a * (a != 0), values(0.0, 1.5, -2.0, 0.0), ref=lambda a: a * (a != 0)
    ),
    case(
        "where-clone_permute",
        lambda a: (a > 0.5).where(4, 2).clone().permute(1, 0),
        floats(3, 4),
        ref=lambda a: torch.where(a > 0.5, 4, 2).clone().permute(1, 0),
    ),
    case(
        "lerp-tensor",
        lambda a, b, w: a.lerp(b, w),
        floats(3, 4),
        floats(4),
        floats(3, 1),
        ref=torch.lerp,
    ),
    case(
        "addcmul-bcast",
        lambda a, b, c: a.addcmul(b, c, value=0.5),
        floats(3, 4),
        floats(4),
        floats(3, 1),
    ),
    case(
        "addcmul-default",
        lambda a, b, c: a.addcmul(b, c),
        floats(3, 4).T,
        floats(3, 4),
        floats(3, 4),
    ),
    case(
        "addcdiv-bcast",
        lambda a, b, c: a.addcdiv(b, c, value=-2),
        floats(3, 4),
        floats(4),
        floats(3, 1, low=0.5),
    ),
    case(
        "lerp-sigmoid",
        lambda a, b: a.lerp(b, b.sigmoid()),
        floats(4, 1, 3),
        floats(5, 1),
        ref=lambda a, b: torch.lerp(a, b, b.sigmoid()),
    ),
    case(
        "clip-tensors",
        lambda a, lo, hi: a.clip(lo, hi),
        floats(3, 4),
        floats(4, high=-1),
        floats(3, 1, low=1),
        ref=torch.clamp,
    ),
    case(
        "clip-min_tensor",
        lambda a, lo: a.clip(lo),
        floats(3, 4),
        floats(4),
        ref=lambda a, lo: torch.clamp(a, lo),
    ),
    case(
        "clip-special",
        lambda a: a.clip(-1, 1.5),
        values(*SPECIAL),
        ref=lambda a: torch.clamp(a, -1, 1.5),
        grad=False,
    ),
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


# erfinv: Giles' float32 approximation (within 4 ulps); the tails and tiny values too
ERFINV = [
    *unary("erfinv", low=-0.99, high=0.99),
    case(
        "erfinv-tails",
        lambda x: x.erfinv(),
        values(-0.9999, -0.999, 0.9999999, 1e-30, 1e-8, 0.95, -0.3),
    ),
    case("erfinv-int", lambda x: x.erfinv(), ints(3, 4, low=-1, high=1)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(ERFINV))
def test_erfinv(c, device, request):
    check(c, device, request)
