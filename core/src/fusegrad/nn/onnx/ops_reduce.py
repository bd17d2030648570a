"""ONNX's reductions, scans, arg- and top-k selection, softmax, and the matrix products.

The ``Reduce*`` ops took their axes as an attribute until opset 13 (ReduceSum) or 18 (the
rest), and as an optional input since; with no axes they reduce everything, unless
``noop_with_empty_axes`` says to return the input unchanged. A reduction over an axis of size
zero gives the reduction's identity (0 for sums, -inf for max, ...), as numpy does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.ops_shape import _axis
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.tensor import Tensor

#: op -> (Tensor function of (x, axes, keepdim), value over an empty set, axes-input opset)
REDUCTIONS: dict[str, tuple[Callable[..., Tensor], float, int]] = {
    "ReduceSum": (lambda x, a, k: x.sum(a, keepdim=k), 0.0, 13),
    "ReduceMean": (lambda x, a, k: x.mean(a, keepdim=k), math.nan, 18),
    "ReduceMax": (lambda x, a, k: x.max(a, keepdim=k), -math.inf, 18),
    "ReduceMin": (lambda x, a, k: x.min(a, keepdim=k), math.inf, 18),
    "ReduceProd": (lambda x, a, k: x.prod(a, keepdim=k), 1.0, 18),
    "ReduceL1": (lambda x, a, k: x.abs().sum(a, keepdim=k), 0.0, 18),
    "ReduceL2": (lambda x, a, k: (x * x).sum(a, keepdim=k).sqrt(), 0.0, 18),
    "ReduceSumSquare": (lambda x, a, k: (x * x).sum(a, keepdim=k), 0.0, 18),
    "ReduceLogSum": (lambda x, a, k: x.sum(a, keepdim=k).log(), -math.inf, 18),
    "ReduceLogSumExp": (lambda x, a, k: x.logsumexp(a, keepdim=k), -math.inf, 18),
}


def _reduce_axes(n: Node, x: Tensor, axes: Tensor | None, since: int) -> list[int] | None:
    """The axes to reduce, or None for "return x unchanged"."""
    chosen = n.ints(1, axes) if n.opset >= since else n.attr("axes")
    if not chosen:
        if n.opset >= since and n.attr("noop_with_empty_axes", 0):
            return None
        return list(range(x.ndim))
    return sorted(_axis(a, x.ndim) for a in chosen)


def _make_reduce(op_type: str) -> None:
    fn, empty, since = REDUCTIONS[op_type]

    def reduce_op(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
        chosen = _reduce_axes(n, x, axes, since)
        if chosen is None:
            return x
        keep = bool(n.attr("keepdims", 1))
        if any(x.shape[a] == 0 for a in chosen):
            shape = [1 if i in chosen else s for i, s in enumerate(x.shape)]
            shape = shape if keep else [s for i, s in enumerate(shape) if i not in chosen]
            fill = _empty_value(empty, x)
            return Tensor.full(tuple(shape), fill, dtype=x.dtype, device=x.device)
        if x.dtype == dtypes.bool:
            return fn(x.cast(dtypes.int32), tuple(chosen), keep).cast(dtypes.bool)
        return fn(x, tuple(chosen), keep).cast(x.dtype)

    onnx_op(op_type)(reduce_op)


def _empty_value(value: float, x: Tensor) -> Any:
    if x.dtype.is_float:
        return value
    if x.dtype == dtypes.bool:
        return value == math.inf
    info = np.iinfo(x.dtype.np)
    return {math.inf: info.max, -math.inf: info.min}.get(value, 0 if math.isnan(value) else value)


for _op in REDUCTIONS:
    _make_reduce(_op)


def _arg(n: Node, x: Tensor, largest: bool) -> Tensor:
    """ArgMax/ArgMin along ``axis``; ``select_last_index`` picks the last of equal values."""
    axis = _axis(n.attr("axis", 0), x.ndim)
    keep = bool(n.attr("keepdims", 1))
    last = bool(n.attr("select_last_index", 0))
    src = x.flip(axis) if last else x
    if src.dtype == dtypes.bool:
        src = src.cast(dtypes.int32)
    index = src.argmax(axis, keepdim=keep) if largest else src.argmin(axis, keepdim=keep)
    index = index.cast(dtypes.int64)
    return x.shape[axis] - 1 - index if last else index


onnx_op("ArgMax")(lambda n, x: _arg(n, x, True))
onnx_op("ArgMin")(lambda n, x: _arg(n, x, False))


def _scan(n: Node, x: Tensor, axis: Tensor, product: bool) -> Tensor:
    """CumSum/CumProd; ``exclusive`` shifts by one (starting from the identity), ``reverse``
    scans from the end."""
    a = _axis(int(n.scalar(1, axis)), x.ndim)
    y = x.flip(a) if n.attr("reverse", 0) else x
    if n.attr("exclusive", 0):
        pad = [(0, 0)] * x.ndim
        pad[a] = (1, -1)
        y = y.pad(pad, value=1 if product else 0)
    out = (y.cumprod(a) if product else y.cumsum(a)).cast(x.dtype)
    return out.flip(a) if n.attr("reverse", 0) else out


onnx_op("CumSum", since=11)(lambda n, x, axis: _scan(n, x, axis, False))
onnx_op("CumProd", since=26)(lambda n, x, axis: _scan(n, x, axis, True))


@onnx_op("TopK")
def top_k(n: Node, x: Tensor, k: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The k largest (or smallest) along ``axis``; ties keep the lower index first. Lazy
    (Tensor.topk ranks by comparison), so it fuses and runs under TinyJit."""
    count = n.attr("k") if n.opset < 10 else int(n.scalar(1, k))
    values, index = x.topk(count, n.attr("axis", -1), largest=bool(n.attr("largest", 1)))
    return values, index.cast(dtypes.int64)


@onnx_op("Einsum", since=12)
def einsum(n: Node, *xs: Tensor) -> Tensor:
    out = Tensor.einsum(n.attr("equation").replace(" ", ""), *xs)
    return out.cast(xs[0].dtype)


def _flat_2d(n: Node, x: Tensor, fn: Callable[[Tensor, int], Tensor]) -> Tensor:
    """Before opset 13 Softmax, LogSoftmax and Hardmax flatten x to 2-d at ``axis`` (default
    1) and work on each row; since, they work along ``axis`` (default -1)."""
    if n.opset >= 13:
        return fn(x, n.attr("axis", -1))
    axis = _axis(n.attr("axis", 1), x.ndim)
    outer = int(np.prod(x.shape[:axis]))
    return fn(x.reshape(outer, -1), 1).reshape(x.shape)


def _hardmax(x: Tensor, axis: int) -> Tensor:
    axis = _axis(axis, x.ndim)
    index = x.argmax(axis, keepdim=True)
    classes = Tensor.arange(x.shape[axis], device=x.device)
    classes = classes.reshape([x.shape[axis] if i == axis else 1 for i in range(x.ndim)])
    return (index == classes).cast(x.dtype)


onnx_op("Softmax")(lambda n, x: _flat_2d(n, x, lambda t, a: t.softmax(a)))
onnx_op("LogSoftmax")(lambda n, x: _flat_2d(n, x, lambda t, a: t.log_softmax(a)))
onnx_op("Hardmax")(lambda n, x: _flat_2d(n, x, _hardmax))


@onnx_op("MatMul")
def matmul(n: Node, a: Tensor, b: Tensor) -> Tensor:
    return (a @ b).cast(a.dtype)


@onnx_op("MatMulInteger", since=10)
def matmul_integer(
    n: Node, a: Tensor, b: Tensor, a_zero: Tensor | None = None, b_zero: Tensor | None = None
) -> Tensor:
    """(a - a_zero) @ (b - b_zero) in int32; a per-row a_zero / per-column b_zero broadcast."""
    ai, bi = a.cast(dtypes.int32), b.cast(dtypes.int32)
    if a_zero is not None:
        az = a_zero.cast(dtypes.int32)
        ai = ai - (az.reshape(-1, 1) if az.ndim == 1 and az.numel() > 1 else az)
    if b_zero is not None:
        bi = bi - b_zero.cast(dtypes.int32)
    return (ai @ bi).cast(dtypes.int32)


@onnx_op("Gemm")
def gemm(n: Node, a: Tensor, b: Tensor, c: Tensor | None = None) -> Tensor:
    """alpha * A' @ B' + beta * C, A' and B' transposed as ``transA``/``transB`` say."""
    a = a.T if n.attr("transA", 0) else a
    b = b.T if n.attr("transB", 0) else b
    out = a @ b
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    if alpha != 1.0:
        out = out * alpha
    if c is not None and beta != 0.0:
        out = out + (c * beta if beta != 1.0 else c)
    return out.cast(a.dtype)


@onnx_op("Det", since=11)
def det(n: Node, x: Tensor) -> Tensor:
    """On the host: a determinant needs a pivoting LU, which is no fusion candidate."""
    value = np.linalg.det(x.numpy().astype(np.float64)).astype(x.dtype.np)
    return Tensor(np.asarray(value), device=x.device)
