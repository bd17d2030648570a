"""ONNX's sequence and optional ops.

A sequence is a Python list of Tensors and an optional is its value or None, so these ops are
list manipulation: nothing runs on a device except the tensors' own math (SplitToSequence,
ConcatFromSequence, a SequenceMap body).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.ops_shape import _axis
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.tensor import Tensor


def _position(n: Node, i: int, value: Tensor | None, length: int, default: int) -> int:
    """A position input (negative counts from the end), or ``default`` when absent."""
    if value is None:
        return default
    pos = int(n.scalar(i, value))
    return pos + length if pos < 0 else pos


@onnx_op("SequenceEmpty", since=11)
def sequence_empty(n: Node) -> list[Tensor]:
    return []


@onnx_op("SequenceConstruct", since=11)
def sequence_construct(n: Node, *xs: Tensor) -> list[Tensor]:
    return list(xs)


@onnx_op("SequenceAt", since=11)
def sequence_at(n: Node, seq: list[Tensor], pos: Tensor) -> Tensor:
    return seq[_position(n, 1, pos, len(seq), 0)]


@onnx_op("SequenceInsert", since=11)
def sequence_insert(n: Node, seq: list[Tensor], x: Tensor, pos: Tensor | None = None) -> list:
    at = _position(n, 2, pos, len(seq), len(seq))
    return [*seq[:at], x, *seq[at:]]


@onnx_op("SequenceErase", since=11)
def sequence_erase(n: Node, seq: list[Tensor], pos: Tensor | None = None) -> list[Tensor]:
    at = _position(n, 1, pos, len(seq), len(seq) - 1)
    return [*seq[:at], *seq[at + 1 :]]


@onnx_op("SequenceLength", since=11)
def sequence_length(n: Node, seq: list[Tensor]) -> Tensor:
    return Tensor(np.array(len(seq), np.int64))


@onnx_op("SplitToSequence", since=11)
def split_to_sequence(n: Node, x: Tensor, split: Tensor | None = None) -> list[Tensor]:
    """No ``split``: pieces of size 1 (squeezed unless ``keepdims``); a scalar: pieces of that
    size (the last one shorter); a list: those sizes."""
    axis = _axis(n.attr("axis", 0), x.ndim)
    if split is None:
        parts = list(x.split(1, dim=axis))
        return parts if n.attr("keepdims", 1) else [p.squeeze(axis) for p in parts]
    sizes = np.asarray(n.host(1, split))
    if sizes.ndim == 0:
        step, length = int(sizes), x.shape[axis]
        sizes = np.array([min(step, length - i) for i in range(0, length, step)])
    return list(x.split([int(s) for s in sizes], dim=axis))


@onnx_op("ConcatFromSequence", since=11)
def concat_from_sequence(n: Node, seq: list[Tensor]) -> Tensor:
    axis = n.attr("axis")
    if n.attr("new_axis", 0):
        axis = _axis(axis, seq[0].ndim + 1)
        seq = [t.unsqueeze(axis) for t in seq]
    return seq[0].cat(*seq[1:], dim=axis) if len(seq) > 1 else seq[0]


@onnx_op("SequenceMap", since=17)
def sequence_map(n: Node, seq: list[Tensor], *more: Any) -> Any:
    """Run the ``body`` graph on each element (and the same element of each sequence among
    ``more``; a tensor among ``more`` goes to every run); collect each output as a sequence."""
    assert n.run_subgraph is not None
    results = [
        n.run_subgraph("body", [seq[i], *[m[i] if isinstance(m, list) else m for m in more]])
        for i in range(len(seq))
    ]
    outputs = [[r[j] for r in results] for j in range(len(n.outputs))]
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


@onnx_op("Optional", since=15)
def optional(n: Node, x: Any = None) -> Any:
    return x


@onnx_op("OptionalHasElement", since=15)
def optional_has_element(n: Node, x: Any = None) -> Tensor:
    return Tensor(np.array(x is not None)).cast(dtypes.bool)


@onnx_op("OptionalGetElement", since=15)
def optional_get_element(n: Node, x: Any) -> Any:
    return x
