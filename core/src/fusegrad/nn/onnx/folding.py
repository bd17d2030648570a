"""Host folding of what a model computes from constants: Constant nodes, input shapes, and the
small integer arithmetic exporters put between them (Shape -> Gather -> Concat -> Reshape).

Folding keeps such values on the host, so Reshape, Expand, Slice and friends see plain ints (no
device read, nothing for TinyJit to capture). Only integer or bool tensors of at most
``MAX_FOLD`` elements are folded, and only by the ops in ``FOLD``: float math always runs as
Tensor code. ``fold`` returns None to decline; the op then runs as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper

from fusegrad.nn.onnx.registry import Node

#: the largest integer tensor folded on the host
MAX_FOLD = 1024


def constant_value(node: Node) -> np.ndarray:
    """The value of a Constant node, whichever ``value*`` attribute holds it."""
    for key, value in node.attrs.items():
        if key in ("value", "sparse_value"):
            return np.asarray(value)
        if key in ("value_float", "value_floats"):
            return np.array(value, np.float32)
        if key in ("value_int", "value_ints"):
            return np.array(value, np.int64)
        if key in ("value_string", "value_strings"):
            return np.array(value, dtype=object)
    raise ValueError(f"Constant node {node.name!r} has no value attribute")


def _shape(node: Node, args: list[Any]) -> np.ndarray | None:
    shape = getattr(args[0], "shape", None)
    if shape is None or not all(isinstance(s, int) for s in shape):
        return None
    rank = len(shape)
    start, end = node.attr("start", 0), node.attr("end", rank)
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return np.array(shape[start:end], np.int64)


def _size(node: Node, args: list[Any]) -> np.ndarray | None:
    shape = getattr(args[0], "shape", None)
    if shape is None or not all(isinstance(s, int) for s in shape):
        return None
    return np.array(int(np.prod(shape)), np.int64)


def _axes(node: Node, vals: list[Any], i: int) -> list[int] | None:
    """Axes from attribute ``axes`` (old opsets) or input ``i`` (new ones)."""
    if len(vals) > i and vals[i] is not None:
        return [int(a) for a in np.asarray(vals[i]).reshape(-1)]
    axes = node.attr("axes")
    return None if axes is None else list(axes)


def _unsqueeze(node: Node, v: list[Any]) -> np.ndarray:
    axes = _axes(node, v, 1) or []
    rank = v[0].ndim + len(axes)
    out = v[0]
    for a in sorted(a + rank if a < 0 else a for a in axes):
        out = np.expand_dims(out, a)
    return out


def _squeeze(node: Node, v: list[Any]) -> np.ndarray:
    axes = _axes(node, v, 1)
    return np.squeeze(v[0]) if axes is None else np.squeeze(v[0], tuple(axes))


def _slice(node: Node, v: list[Any]) -> np.ndarray:
    data = v[0]
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        starts, ends = v[1].tolist(), v[2].tolist()
        axes = v[3].tolist() if len(v) > 3 and v[3] is not None else None
        steps = v[4].tolist() if len(v) > 4 and v[4] is not None else None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * data.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = slice(*slice(s, e, st).indices(data.shape[a]))
    return data[tuple(index)]


def _reshape(node: Node, v: list[Any]) -> np.ndarray:
    shape = [int(s) for s in v[1]]
    if not node.attr("allowzero", 0):
        shape = [v[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return v[0].reshape(shape)


def _cast(node: Node, v: list[Any]) -> np.ndarray | None:
    to = node.attr("to")
    if to not in (TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL):
        return None
    return v[0].astype(helper.tensor_dtype_to_np_dtype(to))


def _div(node: Node, v: list[Any]) -> np.ndarray | None:
    a, b = v
    if (a < 0).any() or (b <= 0).any():
        return None  # ONNX truncates, numpy floors: fold only where they agree
    return (a // b).astype(np.result_type(a, b))


def _range(node: Node, v: list[Any]) -> np.ndarray | None:
    out = np.arange(v[0], v[1], v[2], dtype=v[0].dtype)
    return out if out.size <= MAX_FOLD else None


#: op type -> host function of (node, input values) for the folded integer ops
FOLD: dict[str, Callable[[Node, list[Any]], np.ndarray | None]] = {
    "Identity": lambda n, v: v[0],
    "Gather": lambda n, v: np.take(
        v[0], np.where(v[1] < 0, v[1] + v[0].shape[n.attr("axis", 0)], v[1]), axis=n.attr("axis", 0)
    ),
    "Concat": lambda n, v: np.concatenate([x for x in v if x is not None], axis=n.attr("axis")),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Slice": _slice,
    "Reshape": _reshape,
    "Cast": _cast,
    "Add": lambda n, v: v[0] + v[1],
    "Sub": lambda n, v: v[0] - v[1],
    "Mul": lambda n, v: v[0] * v[1],
    "Div": _div,
    "Equal": lambda n, v: np.equal(v[0], v[1]),
    "Less": lambda n, v: np.less(v[0], v[1]),
    "Greater": lambda n, v: np.greater(v[0], v[1]),
    "Not": lambda n, v: np.logical_not(v[0]),
    "Where": lambda n, v: np.where(v[0], v[1], v[2]),
    "Max": lambda n, v: np.maximum.reduce(v) if len(v) > 1 else v[0],
    "Min": lambda n, v: np.minimum.reduce(v) if len(v) > 1 else v[0],
    "Range": _range,
}


def _foldable(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "biu" and value.size <= MAX_FOLD


def fold(
    node: Node, args: list[Any], known: Callable[[int], np.ndarray | None]
) -> list[Any] | None:
    """The node's outputs computed on the host, or None when it must run as Tensor code."""
    if node.domain:
        return None
    if node.op_type == "Constant":
        return [constant_value(node)]
    if node.op_type in ("Shape", "Size"):
        out = (_shape if node.op_type == "Shape" else _size)(node, args)
        return None if out is None else [out]
    rule = FOLD.get(node.op_type)
    if rule is None or not args:
        return None
    values = [known(i) if a is not None else None for i, a in enumerate(args)]
    if any(a is not None and not _foldable(v) for a, v in zip(args, values)):
        return None
    try:
        out = rule(node, values)
    except (ValueError, IndexError, TypeError):
        return None  # an unusual form: the Tensor op handles it (and reports it)
    if out is None or len(node.outputs) != 1:
        return None
    out = np.asarray(out)
    return [out] if out.size <= MAX_FOLD else None
