"""ONNX's elementwise ops: arithmetic, comparison, logic, bits, and activations without weights.

Each is a line or two of Tensor code. ONNX broadcasts like numpy and requires equal input
types, so the Tensor ops' promotion never changes a result type here; where ONNX keeps the
first input's type (Pow) the result is cast back.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.dtypes import to_dtype
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.tensor import Tensor

# ---- arithmetic ----------------------------------------------------------------------------------


@onnx_op("Add")
def add(n: Node, a: Tensor, b: Tensor) -> Tensor:
    return a + b


@onnx_op("Sub")
def sub(n: Node, a: Tensor, b: Tensor) -> Tensor:
    return a - b


@onnx_op("Mul")
def mul(n: Node, a: Tensor, b: Tensor) -> Tensor:
    return a * b


@onnx_op("Div")
def div(n: Node, a: Tensor, b: Tensor) -> Tensor:
    """Integers divide truncating toward zero (C semantics), floats exactly."""
    if a.dtype.is_int:
        return a.div(b, rounding_mode="trunc").cast(a.dtype)
    return a / b


@onnx_op("Mod")
def mod(n: Node, a: Tensor, b: Tensor) -> Tensor:
    """``fmod=1``: the remainder takes the dividend's sign (C fmod); else the divisor's."""
    out = a.fmod(b) if n.attr("fmod", 0) else a.remainder(b)
    return out.cast(a.dtype)


@onnx_op("Pow")
def pow_(n: Node, a: Tensor, b: Tensor) -> Tensor:
    """The result has the base's type (an int exponent of a float base, or the reverse)."""
    if a.dtype.is_int and b.dtype.is_float:
        return a.cast(b.dtype).pow(b).round().cast(a.dtype)
    if a.dtype.is_int:
        return _int_pow(a, b).cast(a.dtype)
    if (e := _known_exponent(n, b)) is not None and b.ndim <= a.ndim:
        return a.pow(e).cast(a.dtype)
    return a.pow(b.cast(a.dtype) if b.dtype.is_float else b).cast(a.dtype)


def _known_exponent(n: Node, b: Tensor) -> float | None:
    """A float base's exponent as a number when it is one constant (an initializer): ``x ** 2``
    is then ``x * x``, not the general pow's exp2(b * log2|x|) with its sign and nan tests
    (silero-vad's STFT magnitude: 0.04 ms -> a few microseconds)."""
    known = n.known_value(1) if b.numel() == 1 else None
    if known is None or known.dtype.kind not in "fiu":
        return None
    return float(np.asarray(known).reshape(-1)[0])


def _int_pow(a: Tensor, b: Tensor) -> Tensor:
    """Integer power by repeated squaring over the exponent's bits (exact, unlike exp/log)."""
    a, b = a.cast(dtypes.int64), b.cast(dtypes.int64)
    out, base = a.ones_like(), a
    for bit in range(16):  # exponents above 2**16 overflow any base but 0, 1, -1 anyway
        out = ((b.rshift(bit) & 1) == 1).where(out * base, out)
        base = base * base
    return out


@onnx_op("Neg")
def neg(n: Node, x: Tensor) -> Tensor:
    return -x


@onnx_op("Abs")
def abs_(n: Node, x: Tensor) -> Tensor:
    return x.abs()


@onnx_op("Reciprocal")
def reciprocal(n: Node, x: Tensor) -> Tensor:
    return x.reciprocal()


@onnx_op("Sign")
def sign(n: Node, x: Tensor) -> Tensor:
    return x.sign().cast(x.dtype)


def _unary(op_type: str, method: str) -> None:
    onnx_op(op_type)(lambda n, x: getattr(x, method)())


for _op, _method in {
    "Sqrt": "sqrt",
    "Exp": "exp",
    "Log": "log",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Erf": "erf",
    "Softsign": "softsign",
    "IsNaN": "isnan",
    "Not": "logical_not",
    "BitwiseNot": "bitwise_not",
}.items():
    _unary(_op, _method)


@onnx_op("IsInf")
def isinf(n: Node, x: Tensor) -> Tensor:
    return x.isinf(bool(n.attr("detect_positive", 1)), bool(n.attr("detect_negative", 1)))


def _variadic(op_type: str, combine: Any) -> None:
    onnx_op(op_type)(lambda n, *xs: reduce(combine, [x for x in xs if x is not None]))


_variadic("Sum", lambda a, b: a + b)
_variadic("Max", lambda a, b: _nan_or(a, b, a.maximum(b)))
_variadic("Min", lambda a, b: _nan_or(a, b, a.minimum(b)))


def _nan_or(a: Tensor, b: Tensor, out: Tensor) -> Tensor:
    """``out``, with nan wherever ``a`` or ``b`` is nan (ONNX's Max and Min propagate it)."""
    if not out.dtype.is_float:
        return out
    return (a.isnan() | b.isnan()).where(math.nan, out)


@onnx_op("Mean")
def mean(n: Node, *xs: Tensor) -> Tensor:
    return reduce(lambda a, b: a + b, xs) / len(xs)


@onnx_op("Clip")
def clip(n: Node, x: Tensor, lo: Tensor | None = None, hi: Tensor | None = None) -> Tensor:
    """Bounds are attributes before opset 11 and optional inputs after."""
    if n.opset < 11:
        lo_v, hi_v = n.attr("min", -math.inf), n.attr("max", math.inf)
        return x.maximum(lo_v).minimum(hi_v)
    out = x if lo is None else x.maximum(lo.cast(x.dtype))
    return out if hi is None else out.minimum(hi.cast(x.dtype))


# ---- comparison, logic, bits ---------------------------------------------------------------------


@onnx_op("Equal")
def equal(n: Node, a: Any, b: Any) -> Tensor:
    """Strings (numpy object arrays) compare on the host."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return Tensor(np.asarray(np.equal(np.asarray(a, object), np.asarray(b, object)), bool))
    return a == b


for _op, _fn in {
    "Greater": lambda n, a, b: a > b,
    "Less": lambda n, a, b: a < b,
    "GreaterOrEqual": lambda n, a, b: a >= b,
    "LessOrEqual": lambda n, a, b: a <= b,
    "And": lambda n, a, b: a.logical_and(b),
    "Or": lambda n, a, b: a.logical_or(b),
    "Xor": lambda n, a, b: a.logical_xor(b),
    "BitwiseAnd": lambda n, a, b: a.bitwise_and(b),
    "BitwiseOr": lambda n, a, b: a.bitwise_or(b),
    "BitwiseXor": lambda n, a, b: a.bitwise_xor(b),
}.items():
    onnx_op(_op)(_fn)


@onnx_op("BitShift")
def bit_shift(n: Node, x: Tensor, bits: Tensor) -> Tensor:
    """A right shift of a signed type is arithmetic. A shift by a negative amount or by the
    width or more gives what the sign fill alone gives: -1 (right, negative x) or 0."""
    width = x.dtype.itemsize * 8
    outside = (bits < 0) | (bits >= width)
    bits = outside.where(0, bits).cast(bits.dtype)
    right = n.attr("direction") == "RIGHT"
    out = (x.rshift(bits) if right else x.lshift(bits)).cast(x.dtype)
    fill = (x < 0).where(-1, 0) if right and not x.dtype.is_unsigned else x.zeros_like()
    return outside.where(fill.cast(x.dtype), out)


@onnx_op("Where")
def where(n: Node, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return cond.where(a, b)


# ---- activations ---------------------------------------------------------------------------------


@onnx_op("Relu")
def relu(n: Node, x: Tensor) -> Tensor:
    return x.relu()


@onnx_op("LeakyRelu")
def leaky_relu(n: Node, x: Tensor) -> Tensor:
    return x.leaky_relu(n.attr("alpha", 0.01))


@onnx_op("Elu")
def elu(n: Node, x: Tensor) -> Tensor:
    return x.elu(n.attr("alpha", 1.0))


@onnx_op("Selu")
def selu(n: Node, x: Tensor) -> Tensor:
    alpha = n.attr("alpha", 1.67326319217681884765625)
    gamma = n.attr("gamma", 1.05070102214813232421875)
    return (x > 0).where(x, (x.exp() - 1) * alpha) * gamma


@onnx_op("HardSigmoid")
def hard_sigmoid(n: Node, x: Tensor) -> Tensor:
    return (x * n.attr("alpha", 0.2) + n.attr("beta", 0.5)).clip(0, 1)


@onnx_op("Softplus")
def softplus(n: Node, x: Tensor) -> Tensor:
    """log(1 + e^x), without overflow for large x."""
    return x.maximum(0) + (-x.abs()).exp().log1p()


@onnx_op("Mish")
def mish(n: Node, x: Tensor) -> Tensor:
    return x * softplus(n, x).tanh()


@onnx_op("Gelu", since=20)
def gelu(n: Node, x: Tensor) -> Tensor:
    return x.gelu("tanh" if n.attr("approximate", "none") == "tanh" else "none")


# ---- random --------------------------------------------------------------------------------------
# fusegrad's generator (Tensor.manual_seed) draws the numbers; a ``seed`` attribute is not
# honoured, so results differ from onnx's reference (which uses numpy's generator) anyway.


def _random_dtype(n: Node, like: Tensor | None) -> Any:
    code = n.attr("dtype")
    return (
        to_dtype(code) if code is not None else (like.dtype if like is not None else dtypes.float32)
    )


def _uniform(n: Node, shape: tuple, like: Tensor | None = None) -> Tensor:
    low, high = n.attr("low", 0.0), n.attr("high", 1.0)
    return (Tensor.rand(*shape) * (high - low) + low).cast(_random_dtype(n, like))


def _normal(n: Node, shape: tuple, like: Tensor | None = None) -> Tensor:
    out = Tensor.randn(*shape) * n.attr("scale", 1.0) + n.attr("mean", 0.0)
    return out.cast(_random_dtype(n, like))


onnx_op("RandomUniform")(lambda n: _uniform(n, tuple(n.attr("shape"))))
onnx_op("RandomNormal")(lambda n: _normal(n, tuple(n.attr("shape"))))
onnx_op("RandomUniformLike")(lambda n, x: _uniform(n, x.shape, x))
onnx_op("RandomNormalLike")(lambda n, x: _normal(n, x.shape, x))


@onnx_op("Bernoulli", since=15)
def bernoulli(n: Node, p: Tensor) -> Tensor:
    return (Tensor.rand(*p.shape) < p.cast(dtypes.float32)).cast(_random_dtype(n, p))


@onnx_op("Multinomial", since=7)
def multinomial(n: Node, logits: Tensor) -> Tensor:
    """``sample_size`` draws per row from softmax(logits), with replacement."""
    probs = logits.cast(dtypes.float32).softmax(-1)
    out = probs.multinomial(n.attr("sample_size", 1), replacement=True)
    code = n.attr("dtype")
    return out.cast(_random_dtype(n, None) if code is not None else dtypes.int32)
