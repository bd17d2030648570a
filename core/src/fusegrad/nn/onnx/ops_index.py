"""ONNX's indexing ops: gathers, scatters, and the ops whose output is picked by an index or
a mask (OneHot, NonZero, Compress, ReverseSequence, Unique, TensorScatter).

Negative indices count from the end (``_wrap``). Scatters with a ``reduction`` combine
colliding writes with Tensor.scatter_reduce. NonZero, Compress and Unique have an output size
that depends on the data: they read their input back (a sync).
"""

from __future__ import annotations

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.errors import InvalidIndex
from fusegrad.nn.onnx.ops_shape import _axis, _like
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor


def _wrap(index: Tensor, size: int) -> Tensor:
    """Negative indices count from the end."""
    return (index < 0).where(index + size, index).cast(dtypes.int64)


@onnx_op("Gather")
def gather(n: Node, x: Tensor, index: Tensor) -> Tensor:
    """A scalar index the model holds (an initializer, a folded constant) is a view of ``x``:
    no gather kernel, and no bounds check to read back after every call (silero-vad picks its
    recurrent state's halves so: the check's read was a fifth of a call)."""
    axis = _axis(n.attr("axis", 0), x.ndim)
    known = n.known_value(1)
    if known is not None and known.ndim == 0 and isinstance(size := x.shape[axis], int):
        if not -size <= (i := int(known)) < size:
            raise InvalidIndex(
                f"Gather node {n.name!r}: index {i} is out of bounds for axis {axis} of size "
                f"{size}: valid indices are {-size}..{size - 1}"
            )
        return x[(slice(None),) * axis + (i,)]
    return x[(slice(None),) * axis + (_wrap(index, x.shape[axis]),)]


@onnx_op("GatherElements")
def gather_elements(n: Node, x: Tensor, index: Tensor) -> Tensor:
    axis = _axis(n.attr("axis", 0), x.ndim)
    return x.gather(axis, _wrap(index, x.shape[axis]))


@onnx_op("GatherND")
def gather_nd(n: Node, x: Tensor, index: Tensor) -> Tensor:
    """index has shape batch + query + (k,): each query picks x[batch][i0, .., ik-1]."""
    b, k = n.attr("batch_dims", 0), index.shape[-1]
    lead = index.shape[:-1]
    picks = []
    for j in range(b):
        shape = [1] * len(lead)
        shape[j] = x.shape[j]
        picks.append(Tensor.arange(x.shape[j], device=x.device).reshape(shape).expand(lead))
    for i in range(k):
        picks.append(_wrap(index[..., i], x.shape[b + i]))
    return x[tuple(picks)]


_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _scatter(x: Tensor, axis: int, index: Tensor, updates: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return x.scatter(axis, index, updates)
    return x.scatter_reduce(axis, index, updates, _REDUCE[reduction]).cast(x.dtype)


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(n: Node, x: Tensor, index: Tensor, updates: Tensor) -> Tensor:
    axis = _axis(n.attr("axis", 0), x.ndim)
    return _scatter(x, axis, _wrap(index, x.shape[axis]), updates, n.attr("reduction", "none"))


@onnx_op("ScatterND")
def scatter_nd(n: Node, x: Tensor, index: Tensor, updates: Tensor) -> Tensor:
    """Flatten the first k axes of x into one, turn each index tuple into a row number, and
    scatter whole rows along that axis."""
    k = index.shape[-1]
    rows = int(np.prod(x.shape[:k]))
    rest = x.shape[k:]
    strides = np.cumprod((list(x.shape[1:k]) + [1])[::-1])[::-1].astype(np.int64)
    flat_index = index.reshape(-1, k)
    line = sum(
        (_wrap(flat_index[:, i], x.shape[i]) * int(strides[i]) for i in range(k)),
        Tensor.zeros(flat_index.shape[0], dtype=dtypes.int64, device=x.device),
    )
    count = flat_index.shape[0]
    width = int(np.prod(rest))
    line = line.reshape(count, 1).expand(count, width)
    out = _scatter(
        x.reshape(rows, width), 0, line, updates.reshape(count, width), n.attr("reduction", "none")
    )
    return out.reshape(x.shape)


@onnx_check("ScatterElements")
@onnx_check("ScatterND")
def check_scatter(n: Node) -> str | None:
    reduction = n.attr("reduction", "none")
    if reduction != "none" and reduction not in _REDUCE:
        return f"attribute reduction={reduction!r} is not one of none, {', '.join(_REDUCE)}"
    return None


@onnx_op("OneHot", since=9)
def one_hot(n: Node, index: Tensor, depth: Tensor, values: Tensor) -> Tensor:
    count = int(n.scalar(1, depth))
    index = index.cast(dtypes.int64)
    index = (index < 0).where(index + count, index)
    axis = _axis(n.attr("axis", -1), index.ndim + 1)
    classes = Tensor.arange(count, device=index.device)
    classes = classes.reshape([count if i == axis else 1 for i in range(index.ndim + 1)])
    hit = index.unsqueeze(axis) == classes
    return hit.where(values[1], values[0])


@onnx_op("NonZero", since=9)
def non_zero(n: Node, x: Tensor) -> Tensor:
    return _like(x, np.array(np.nonzero(x.numpy()), dtype=np.int64).reshape(x.ndim, -1))


@onnx_op("Compress", since=9)
def compress(n: Node, x: Tensor, condition: Tensor) -> Tensor:
    keep = np.nonzero(np.asarray(n.host(1, condition)).reshape(-1))[0]
    axis = n.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = _axis(axis, x.ndim)
    keep = keep[keep < x.shape[axis]]
    return x[(slice(None),) * axis + (_like(x, keep.astype(np.int64)),)]


@onnx_op("ReverseSequence", since=10)
def reverse_sequence(n: Node, x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse the first lengths[b] steps of each batch entry: a gather along time from
    position lengths[b] - 1 - t where t < lengths[b], else t (lazy)."""
    batch, time = n.attr("batch_axis", 1), n.attr("time_axis", 0)
    lens = lengths.cast(dtypes.int64).reshape([-1 if i == batch else 1 for i in range(x.ndim)])
    steps = Tensor.arange(x.shape[time], device=x.device).cast(dtypes.int64)
    steps = steps.reshape([-1 if i == time else 1 for i in range(x.ndim)])
    index = (steps < lens).where(lens - 1 - steps, steps)
    return x.gather(time, index.expand(x.shape).cast(dtypes.int64))


@onnx_op("Unique", since=11)
def unique(n: Node, x: Tensor) -> tuple[Tensor, ...]:
    """On the host (the count of values depends on the data); ``sorted=0`` keeps the order of
    first occurrence."""
    data = x.numpy()
    axis = n.attr("axis")
    values, first, inverse, counts = np.unique(data, True, True, True, axis=axis)
    if not n.attr("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.argsort(order)
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    outs = [values, first, inverse.reshape(-1), counts]
    return tuple(
        _like(x, o).cast(x.dtype) if i == 0 else _like(x, o.astype(np.int64))
        for i, o in enumerate(outs)
    )


@onnx_op("TensorScatter", since=24)
def tensor_scatter(n: Node, past: Tensor, update: Tensor, write: Tensor | None = None) -> Tensor:
    """A KV-cache write: for batch b, ``update`` lands at positions write[b] ... along
    ``axis`` (modulo the cache length in "circular" mode). Built as a gather from ``update``
    with each cache position's source index, so it stays lazy."""
    axis = _axis(n.attr("axis", -2), past.ndim)
    length, count = past.shape[axis], update.shape[axis]
    shape = [1] * past.ndim
    shape[axis] = length
    position = Tensor.arange(length, device=past.device).reshape(shape)
    start = (
        write.cast(dtypes.int64)
        if write is not None
        else Tensor.zeros(past.shape[0], dtype=dtypes.int64, device=past.device)
    )
    start = start.reshape([past.shape[0]] + [1] * (past.ndim - 1))
    source = position - start
    if n.attr("mode", "linear") == "circular":
        source = (source + length) % length
    valid = (source >= 0) & (source < count)
    index = valid.where(source, 0).expand([*past.shape[:axis], length, *past.shape[axis + 1 :]])
    taken = update.gather(axis, index.cast(dtypes.int64)) if count else past
    return valid.where(taken, past)
