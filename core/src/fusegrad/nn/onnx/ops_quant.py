"""Type conversion (Cast, CastLike) and quantization (QuantizeLinear, DequantizeLinear, the
QLinear ops, DynamicQuantizeLinear).

Narrow types (float8, int4, float4...) reach an op as uint8 codes, one per element (a stored
sub-byte value is ``Packed``; the runner hands ops its lazily unpacked codes, see dtypes.py);
``Node``'s ``input_types`` and ``output_types`` say which type a code means. Decoding is
arithmetic (the integer types) or a gather from the type's table of values, so it fuses into the
kernel that reads it. Encoding is lazy Tensor code on the device too, so it fuses and runs under
TinyJit: float8 and float4e2m1 round to nearest even, saturating or not (``encode_float8``);
int4/uint4/int2/uint2 truncate and wrap as onnx's casts do (``encode_int``); float8e8m0 keeps
the exponent, rounded as ``round_mode`` says (``encode_e8m0``). Strings are numpy object arrays
and convert on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx import dtypes as onnx_dtypes
from fusegrad.nn.onnx.dtypes import (
    FLOAT8,
    NARROW,
    SUB_BYTE,
    decode_table,
    encode,
    host_tensor,
    to_dtype,
)
from fusegrad.nn.onnx.errors import OnnxUnsupported
from fusegrad.nn.onnx.ops_nn import conv
from fusegrad.nn.onnx.ops_shape import _axis
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor

STRING = TensorProto.STRING
FLOAT8E8M0 = getattr(TensorProto, "FLOAT8E8M0", -1)
#: the signed sub-byte integer types (their codes are two's complement)
SIGNED = (TensorProto.INT4, getattr(TensorProto, "INT2", -1))


def decode(x: Tensor, elem_type: int) -> Tensor:
    """A narrow type's codes as float32 values, lazily: integers by sign extension, the float
    types by a gather from their table of values."""
    if elem_type in SUB_BYTE and elem_type != TensorProto.FLOAT4E2M1:
        value = x.cast(dtypes.int32)
        if elem_type in SIGNED:
            half = 1 << (SUB_BYTE[elem_type] - 1)
            value = (value ^ half) - half  # two's complement: the top bit weighs -half
        return value.cast(dtypes.float32)
    table = Tensor(decode_table(elem_type), device=x.device)
    return table[x.cast(dtypes.int32)]


def encode_tensor(
    x: Tensor, elem_type: int, saturate: bool = True, round_mode: str = "up"
) -> Tensor:
    """Values as a narrow type's uint8 codes, with Tensor ops (lazy, on x's device)."""
    if elem_type in (*FLOAT8, TensorProto.FLOAT4E2M1):
        return encode_float8(x, elem_type, saturate)
    if elem_type == FLOAT8E8M0:
        return encode_e8m0(x, saturate, round_mode)
    return encode_int(x, elem_type)


def encode_int(x: Tensor, elem_type: int) -> Tensor:
    """Values as int4/uint4/int2/uint2 codes, as onnx's Cast (ml_dtypes) converts: a float
    truncates toward zero, then every integer keeps its low bits (two's complement wrap); a
    float beyond int32, an infinity or nan gives code 0."""
    mask = (1 << SUB_BYTE[elem_type]) - 1
    if x.dtype.is_float:
        x = x.cast(dtypes.float64 if x.dtype == dtypes.float64 else dtypes.float32).trunc()
        x = (x.abs() < 2**31).where(x, 0).cast(dtypes.int32)  # nan fails the comparison
    elif x.dtype == dtypes.bool:
        x = x.cast(dtypes.int32)
    return (x & mask).cast(dtypes.uint8)


def encode_e8m0(x: Tensor, saturate: bool, round_mode: str) -> Tensor:
    """Values as float8e8m0 codes (a float32's biased exponent), as onnx's to_float8e8m0: the
    mantissa rounds the exponent "up" (any fraction), to "nearest" (even) or "down"; nan and
    infinities give 255; with ``saturate`` the largest exponent, 254, never rounds up to 255."""
    bits = x.cast(dtypes.float32).bitcast(dtypes.uint32)
    exponent = ((bits >> 23) & 0xFF).cast(dtypes.int32)
    if round_mode == "up":
        round_up = (bits & 0x7FFFFF) != 0
    elif round_mode == "nearest":  # guard bit set, and a round/sticky bit or an odd exponent
        round_up = ((bits & 0x400000) != 0) & (((bits & 0x3FFFFF) != 0) | (exponent > 0))
    elif round_mode == "down":
        round_up = exponent < 0  # never
    else:
        raise OnnxUnsupported(f"round_mode {round_mode!r} is none of {ROUND_MODES} (ONNX's)")
    if saturate:
        round_up = round_up & (exponent != 254)
    code = (exponent == 255).where(255, exponent + round_up.cast(dtypes.int32))
    return code.cast(dtypes.uint8)


def encode_float8(x: Tensor, elem_type: int, saturate: bool) -> Tensor:
    """Float values as float8 (or float4e2m1) codes, lazily (so it fuses and runs under
    TinyJit): the magnitude rounds to the nearer of the two neighbouring codes, ties to the
    even code, and the sign bit is added. The codes of the special cases (nan, overflow, the
    tie at the top) come from the host encoder once, so the rules are exactly onnx's."""
    table = decode_table(elem_type)
    sign = len(table) // 2  # the sign bit
    saturate = saturate and elem_type in FLOAT8  # onnx saturates float8 only
    finite = [c for c in range(sign) if np.isfinite(table[c])]
    values, codes = table[finite], np.array(finite)
    top, below = float(values[-1]), float(values[-2])
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, top + (top - below) / 2])
    nan_code, nnan_code, inf_code, ninf_code, tie_code = (
        int(c) for c in encode(specials, elem_type, saturate)
    )
    fnuz = elem_type in (TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2FNUZ)
    work = dtypes.float64 if x.dtype == dtypes.float64 else dtypes.float32
    x = x.cast(work)
    a = x.abs()
    table_t = Tensor(values.astype(work.np), device=x.device)
    below_count = (a.unsqueeze(-1) > table_t).cast(dtypes.int32).sum(-1)  # values below a
    hi = below_count.clip(0, len(values) - 1)
    lo = (below_count - 1).clip(0, len(values) - 1)
    vhi, vlo = table_t[hi], table_t[lo]
    code_t = Tensor(codes.astype(np.int32), device=x.device)
    chi, clo = code_t[hi], code_t[lo]
    up = ((vhi - a) < (a - vlo)) | (((vhi - a) == (a - vlo)) & ((chi & 1) == 0))
    code = up.where(chi, clo)
    threshold = top + (top - below) / 2
    code = (a > top).where(int(codes[-1]), code)  # saturated (or about to overflow)
    negative = x.signbit() & (code != 0) if fnuz else x.signbit()  # fnuz has no -0
    code = negative.where(code | sign, code)
    if not saturate:  # beyond the top's rounding range: the inf code, or nan where none
        tie_overflows = (tie_code & (sign - 1)) != int(codes[-1])
        over = (a >= threshold) if tie_overflows else (a > threshold)
        code = over.where(x.signbit().where(ninf_code, inf_code), code)
    nan = x.signbit().where(nnan_code, nan_code)
    return x.isnan().where(nan, code).cast(dtypes.uint8)


def cast_value(x: Any, source: int, to: int, saturate: bool = True, round_mode: str = "up") -> Any:
    """``x`` (of ONNX type ``source``, 0 if unknown) converted to ONNX type ``to``."""
    if isinstance(x, np.ndarray) and x.dtype == object:  # strings
        if to == STRING:
            return x
        numbers = x.astype(np.float32 if to in NARROW else helper.tensor_dtype_to_np_dtype(to))
        return cast_value(host_tensor(numbers), 0, to, saturate, round_mode)
    if source in NARROW:
        x = decode(x, source)
    if to == STRING:
        return x.numpy().astype(np.str_).astype(object)
    if to in NARROW:
        return encode_tensor(x, to, saturate, round_mode)
    return x.cast(to_dtype(to))


#: the rounding modes of a cast to float8e8m0 (Cast and CastLike from opset 25)
ROUND_MODES = ("up", "nearest", "down")


@onnx_check("Cast")
@onnx_check("CastLike")
def check_round_mode(n: Node) -> str | None:
    mode = n.attr("round_mode", "up")
    if mode in ROUND_MODES:
        return None
    return f"attribute round_mode={mode!r} is none of {ROUND_MODES} (ONNX's); fix the attribute"


@onnx_op("Cast")
def cast(n: Node, x: Any) -> Any:
    return cast_value(
        x, n.input_type(0), n.attr("to"), bool(n.attr("saturate", 1)), n.attr("round_mode", "up")
    )


@onnx_op("CastLike", since=15)
def cast_like(n: Node, x: Any, like: Any) -> Any:
    to = n.input_type(1)
    if not to:
        to = STRING if isinstance(like, np.ndarray) else onnx_dtypes.from_numpy_dtype(like.dtype.np)
    return cast_value(
        x, n.input_type(0), to, bool(n.attr("saturate", 1)), n.attr("round_mode", "up")
    )


# ---- quantization ------------------------------------------------------------------------------

#: the integer range of each quantized type
RANGES: dict[int, tuple[int, int]] = {
    TensorProto.UINT8: (0, 255),
    TensorProto.INT8: (-128, 127),
    TensorProto.UINT16: (0, 65535),
    TensorProto.INT16: (-32768, 32767),
    TensorProto.UINT4: (0, 15),
    TensorProto.INT4: (-8, 7),
    TensorProto.INT32: (-(2**31), 2**31 - 1),
    **(
        {TensorProto.UINT2: (0, 3), TensorProto.INT2: (-2, 1)}
        if hasattr(TensorProto, "INT2")
        else {}
    ),
}


def _as_float(x: Tensor, elem_type: int) -> Tensor:
    return decode(x, elem_type) if elem_type in NARROW else x.cast(dtypes.float32)


def _per_axis(n: Node, param: Tensor, x: Tensor) -> Tensor:
    """A scale or zero point shaped to broadcast against x: a scalar, one per slice along
    ``axis`` (a 1-d parameter), or one per block of ``block_size`` along ``axis``."""
    if param.ndim == 0 or param.numel() == 1 and param.ndim <= 1:
        return param.reshape(())
    axis = _axis(n.attr("axis", 1), x.ndim)
    if param.ndim == 1:
        return param.reshape([param.shape[0] if i == axis else 1 for i in range(x.ndim)])
    block = n.attr("block_size", 0) or -(-x.shape[axis] // param.shape[axis])
    return param.repeat_interleave(block, axis).shrink([(0, s) for s in x.shape])


@onnx_op("DequantizeLinear", since=10)
def dequantize_linear(n: Node, x: Tensor, scale: Tensor, zero: Tensor | None = None) -> Tensor:
    """(x - zero) * scale, in the scale's type (or ``output_dtype``)."""
    values = _as_float(x, n.input_type(0))
    if zero is not None:
        values = values - _per_axis(n, _as_float(zero, n.input_type(2)), x)
    out = values * _per_axis(n, scale.cast(dtypes.float32), x)
    out_type = n.attr("output_dtype", 0) or n.output_type(0)
    return out.cast(to_dtype(out_type) if out_type else scale.dtype)


@onnx_op("QuantizeLinear", since=10)
def quantize_linear(n: Node, x: Tensor, scale: Tensor, zero: Tensor | None = None) -> Tensor:
    """saturate(round(x / scale) + zero), in the zero point's type (uint8 without one)."""
    out_type = n.attr("output_dtype", 0) or n.input_type(2) or n.output_type(0)
    out_type = out_type or TensorProto.UINT8
    values = x.cast(dtypes.float32) / _per_axis(n, scale.cast(dtypes.float32), x)
    if out_type in RANGES:
        if zero is not None:
            values = values.round() + _per_axis(n, _as_float(zero, n.input_type(2)), x)
        lo, hi = RANGES[out_type]
        values = values.round().clip(lo, hi)
        if out_type in NARROW:
            return (values.cast(dtypes.int32) & ((1 << NARROW[out_type][1]) - 1)).cast(dtypes.uint8)
        return values.cast(to_dtype(out_type))
    if zero is not None:
        values = values + _per_axis(n, _as_float(zero, n.input_type(2)), x)
    return encode_tensor(values, out_type, bool(n.attr("saturate", 1)))


@onnx_op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(n: Node, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """uint8 quantization over x's range (widened to include 0)."""
    lo, hi = x.min().minimum(0).cast(dtypes.float64), x.max().maximum(0).cast(dtypes.float64)
    scale = ((hi - lo) / 255).cast(dtypes.float32)
    zero = (-lo / scale.cast(dtypes.float64)).cast(dtypes.float32).round().clip(0, 255)
    # the float32 quotient, correctly rounded (through float64): Tensor division multiplies by
    # the reciprocal, which moves quotients like -127.49999 onto a .5 that rounds the wrong way
    quotient = (x.cast(dtypes.float64) / scale.cast(dtypes.float64)).cast(dtypes.float32)
    y = (quotient.round() + zero).clip(0, 255)
    return y.cast(dtypes.uint8), scale.cast(dtypes.float32), zero.cast(dtypes.uint8)


def _requantize(
    n: Node, acc: Tensor, scale: Tensor, y_scale: Tensor, y_zero: Tensor | None, out_index: int
) -> Tensor:
    out_type = n.input_type(out_index) or (
        onnx_dtypes.from_numpy_dtype(y_zero.dtype.np) if y_zero is not None else TensorProto.UINT8
    )
    y = (acc * (scale / y_scale.cast(dtypes.float32))).round()
    if y_zero is not None:
        y = y + y_zero.cast(dtypes.float32)
    lo, hi = RANGES[out_type]
    return y.clip(lo, hi).cast(to_dtype(out_type))


def _column(param: Tensor) -> Tensor:
    """A per-row parameter of the left matrix, shaped to broadcast over its rows."""
    return param.reshape(-1, 1) if param.ndim == 1 and param.numel() > 1 else param


@onnx_op("QLinearMatMul", since=10)
def qlinear_matmul(
    n: Node,
    a: Tensor,
    a_scale: Tensor,
    a_zero: Tensor,
    b: Tensor,
    b_scale: Tensor,
    b_zero: Tensor,
    y_scale: Tensor,
    y_zero: Tensor,
) -> Tensor:
    af = a.cast(dtypes.float32) - _column(a_zero.cast(dtypes.float32))
    bf = b.cast(dtypes.float32) - b_zero.cast(dtypes.float32)
    scale = _column(a_scale.cast(dtypes.float32)) * b_scale.cast(dtypes.float32)
    return _requantize(n, af @ bf, scale, y_scale, y_zero, 7)


@onnx_op("QLinearConv", since=10)
def qlinear_conv(
    n: Node,
    x: Tensor,
    x_scale: Tensor,
    x_zero: Tensor,
    w: Tensor,
    w_scale: Tensor,
    w_zero: Tensor,
    y_scale: Tensor,
    y_zero: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """Conv on the zero-point-shifted integers (exact in float32 for 8-bit inputs), then
    requantized; a per-output-channel w_zero or w_scale lies along the weight's first axis."""
    channel = [-1] + [1] * (w.ndim - 1)
    xf = x.cast(dtypes.float32) - x_zero.cast(dtypes.float32)
    wz = w_zero.cast(dtypes.float32)
    wf = w.cast(dtypes.float32) - (wz.reshape(channel) if wz.numel() > 1 else wz)
    acc = conv(n, xf, wf, None if bias is None else bias.cast(dtypes.float32))
    ws = w_scale.cast(dtypes.float32)
    ws = ws.reshape([1, -1] + [1] * (x.ndim - 2)) if ws.numel() > 1 else ws
    return _requantize(n, acc, x_scale.cast(dtypes.float32) * ws, y_scale, y_zero, 7)


@onnx_op("BitCast", since=26)
def bit_cast(n: Node, x: Tensor) -> Tensor:
    """The same bits read as type ``to`` (of the same width); bool is one byte, 0 or 1."""
    to = to_dtype(n.attr("to"))
    if x.dtype == dtypes.bool or to == dtypes.bool:
        return x.cast(dtypes.uint8).cast(to) if to != dtypes.bool else x.cast(to)
    return x.bitcast(to)
