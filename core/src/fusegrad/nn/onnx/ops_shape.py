"""ONNX's movement and shape ops: reshape, transpose, slice, concat, pad, and kin (gathers
and scatters are in ops_index.py).

Shape-like inputs (Reshape's shape, Slice's starts, Pad's pads...) are read on the host with
``Node.ints``: the runner usually knows them already (initializers and folded shape
arithmetic, see folding.py), so no kernel runs for them. Ops whose output shape depends on the
data are in ops_index.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.dtypes import host_tensor, to_dtype
from fusegrad.nn.onnx.folding import constant_value
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import sym_eval


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _like(x: Tensor, array: np.ndarray) -> Tensor:
    """A host array as a Tensor on ``x``'s device."""
    return host_tensor(array, x.device)


@onnx_op("Identity")
def identity(n: Node, x: Any) -> Any:
    return x


@onnx_op("Constant")
def constant(n: Node) -> Any:
    value = constant_value(n)
    return value if value.dtype == object else Tensor(value)


@onnx_op("Shape")
def shape(n: Node, x: Tensor) -> Tensor:
    rank = x.ndim
    bounds = (n.attr("start", 0), n.attr("end", rank))
    start, end = (min(max(_axis(v, rank), 0), rank) for v in bounds)
    # a symbolic (Variable) size gives its bound value: the shape is data from here on
    sizes = [sym_eval(s) for s in x.shape[start:end]]
    return Tensor(np.array(sizes, np.int64), device=x.device)


@onnx_op("Size")
def size(n: Node, x: Tensor) -> Tensor:
    return Tensor(np.array(int(np.prod(x.shape)), np.int64), device=x.device)


@onnx_op("Reshape")
def reshape(n: Node, x: Tensor, target: Tensor | None = None) -> Tensor:
    """A 0 copies the input's size at that position (unless ``allowzero``); -1 is inferred."""
    sizes = n.ints(1, target, "shape") or []
    if not n.attr("allowzero", 0):
        sizes = [x.shape[i] if s == 0 else s for i, s in enumerate(sizes)]
    if -1 in sizes:
        known = int(np.prod([s for s in sizes if s != -1]))
        sizes[sizes.index(-1)] = int(np.prod(x.shape)) // known if known else 0
    return x.reshape(sizes)


@onnx_op("Transpose")
def transpose(n: Node, x: Tensor) -> Tensor:
    perm = n.attr("perm") or list(reversed(range(x.ndim)))
    return x.permute(perm)


@onnx_op("Flatten")
def flatten(n: Node, x: Tensor) -> Tensor:
    axis = _axis(n.attr("axis", 1), x.ndim)
    outer = int(np.prod(x.shape[:axis]))
    return x.reshape(outer, int(np.prod(x.shape[axis:])))


@onnx_op("Squeeze")
def squeeze(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    chosen = n.ints(1, axes, "axes")
    if chosen is None:
        return x.reshape([s for s in x.shape if s != 1])
    drop = {_axis(a, x.ndim) for a in chosen}
    return x.reshape([s for i, s in enumerate(x.shape) if i not in drop])


@onnx_op("Unsqueeze")
def unsqueeze(n: Node, x: Tensor, axes: Tensor | None = None) -> Tensor:
    chosen = n.ints(1, axes, "axes") or []
    rank = x.ndim + len(chosen)
    sizes = list(x.shape)
    for a in sorted(_axis(a, rank) for a in chosen):
        sizes.insert(a, 1)
    return x.reshape(sizes)


@onnx_op("Concat")
def concat(n: Node, *xs: Tensor) -> Tensor:
    parts = [x for x in xs if x is not None]
    axis = _axis(n.attr("axis", 0), parts[0].ndim)
    nonempty = [x for x in parts if x.shape[axis] != 0] or parts[:1]
    return nonempty[0].cat(*nonempty[1:], dim=axis) if len(nonempty) > 1 else nonempty[0]


@onnx_op("Split")
def split(n: Node, x: Tensor, sizes: Tensor | None = None) -> list[Tensor]:
    """Sizes from the ``split`` input (opset 13) or attribute; else equal parts, the last one
    smaller when ``num_outputs`` does not divide the axis (opset 18)."""
    axis = _axis(n.attr("axis", 0), x.ndim)
    parts = n.ints(1, sizes, "split")
    count = len(n.outputs)
    if not parts:
        length = x.shape[axis]
        chunk = -(-length // count)
        parts = [min(chunk, length - i * chunk) for i in range(count)]
    return list(x.split(parts, dim=axis))


def slice_ranges(n: Node, x: Tensor, args: list[Any]) -> list[tuple[int, int, int]]:
    """(start, stop, step) per axis of x, clamped as ONNX Slice does (like Python slices)."""
    if n.opset < 10:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes"), None
    else:
        starts, ends = n.ints(1, args[0]), n.ints(2, args[1])
        axes = n.ints(3, args[2]) if len(args) > 2 else None
        steps = n.ints(4, args[3]) if len(args) > 3 else None
    axes = list(range(len(starts))) if axes is None else [_axis(a, x.ndim) for a in axes]
    steps = steps or [1] * len(starts)
    ranges = [(0, s, 1) for s in x.shape]
    for a, s, e, st in zip(axes, starts, ends, steps):
        ranges[a] = slice(s, e, st).indices(x.shape[a])
    return ranges


@onnx_op("Slice")
def slice_(n: Node, x: Tensor, *args: Any) -> Tensor:
    ranges = slice_ranges(n, x, list(args))
    if any(len(range(*r)) == 0 for r in ranges):
        return Tensor.zeros(*[len(range(*r)) for r in ranges], dtype=x.dtype, device=x.device)
    # a negative step's stop of -1 means "past index 0", which a Python slice spells None
    return x[tuple(slice(s, None if e < 0 else e, st) for s, e, st in ranges)]


@onnx_op("Expand")
def expand(n: Node, x: Tensor, target: Tensor) -> Tensor:
    """Broadcast both ways: a 1 in ``target`` keeps x's size."""
    sizes = n.ints(1, target) or []
    rank = max(len(sizes), x.ndim)
    have = [1] * (rank - x.ndim) + list(x.shape)
    want = [1] * (rank - len(sizes)) + sizes
    out = [h if w == 1 else w for h, w in zip(have, want)]
    return x.reshape(have).expand(out)


@onnx_op("Tile")
def tile(n: Node, x: Tensor, repeats: Tensor) -> Tensor:
    return x.repeat(n.ints(1, repeats) or [])


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


@onnx_check("Pad")
def check_pad(n: Node) -> str | None:
    mode = n.attr("mode", "constant")
    if mode not in _PAD_MODES:
        return f"attribute mode={mode!r} is not one of {', '.join(_PAD_MODES)}; export with one"
    return None


@onnx_op("Pad")
def pad(
    n: Node,
    x: Tensor,
    pads: Tensor | None = None,
    value: Tensor | None = None,
    axes: Tensor | None = None,
) -> Tensor:
    """Pads are attributes before opset 11, then inputs (with ``axes`` from 18)."""
    flat = (n.ints(1, pads, "pads") if n.opset >= 11 else list(n.attr("pads"))) or []
    chosen = (n.ints(3, axes) if axes is not None else None) or list(range(x.ndim))
    chosen = [_axis(a, x.ndim) for a in chosen]
    pairs: list[tuple[int, int]] = [(0, 0)] * x.ndim
    for j, a in enumerate(chosen):
        pairs[a] = (flat[j], flat[j + len(chosen)])
    fill = n.attr("value", 0.0) if n.opset < 11 else 0
    if value is not None:
        fill = n.scalar(2, value).item() if value.numel() else 0
    mode = _PAD_MODES[n.attr("mode", "constant")]
    if mode == "constant":
        return x.pad(pairs, value=fill)
    return x.pad(pairs, mode=mode)


@onnx_op("ConstantOfShape")
def constant_of_shape(n: Node, sizes: Tensor) -> Tensor:
    value = n.attr("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    dims = n.ints(0, sizes) or []
    return (
        _like(sizes, np.full(dims, value[0], value.dtype))
        if 0 in dims
        else Tensor.full(
            tuple(dims), value[0].item(), dtype=dtypes.from_numpy(value.dtype), device=sizes.device
        )
    )


@onnx_op("Range")
def range_(n: Node, start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    s, lim, d = (np.asarray(n.host(i, v)).reshape(()) for i, v in enumerate((start, limit, delta)))
    count = max(int(np.ceil((lim - s) / d)), 0)
    if start.dtype.is_int:
        return (Tensor.arange(count, device=start.device) * int(d) + int(s)).cast(start.dtype)
    steps = Tensor.arange(count, device=start.device).cast(start.dtype)
    return steps * d.item() + s.item()


@onnx_op("Trilu", since=14)
def trilu(n: Node, x: Tensor, k: Tensor | None = None) -> Tensor:
    diagonal = int(n.scalar(1, k)) if k is not None else 0
    return x.triu(diagonal) if n.attr("upper", 1) else x.tril(diagonal)


@onnx_op("DepthToSpace")
def depth_to_space(n: Node, x: Tensor) -> Tensor:
    b, c, h, w = x.shape
    s = n.attr("blocksize")
    if n.attr("mode", "DCR") == "DCR":
        y = x.reshape(b, s, s, c // (s * s), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(b, c // (s * s), s, s, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(b, c // (s * s), h * s, w * s)


@onnx_op("SpaceToDepth")
def space_to_depth(n: Node, x: Tensor) -> Tensor:
    b, c, h, w = x.shape
    s = n.attr("blocksize")
    y = x.reshape(b, c, h // s, s, w // s, s)
    y = (
        y.permute(0, 1, 3, 5, 2, 4)
        if n.attr("mode", "DCR") == "CRD"
        else y.permute(0, 3, 5, 1, 2, 4)
    )
    return y.reshape(b, c * s * s, h // s, w // s)


@onnx_op("EyeLike", since=9)
def eye_like(n: Node, x: Tensor) -> Tensor:
    rows, cols = x.shape
    dtype = to_dtype(n.attr("dtype")) if n.attr("dtype") is not None else x.dtype
    return _like(x, np.eye(rows, cols, n.attr("k", 0))).cast(dtype)


@onnx_op("Col2Im", since=18)
def col2im(n: Node, x: Tensor, image: Tensor, block: Tensor) -> Tensor:
    """Sum the columns (N, C*K, L) back into an (N, C, *image) image; the flat target of each
    (kernel offset, block) pair is computed on the host, the sum is one scatter-add."""
    size, kernel = n.ints(1, image) or [], n.ints(2, block) or []
    dims = len(size)
    dil = n.attr("dilations") or [1] * dims
    stride = n.attr("strides") or [1] * dims
    pads = n.attr("pads") or [0] * (2 * dims)
    padded = [s + pads[d] + pads[d + dims] for d, s in enumerate(size)]
    blocks = [(p - dl * (k - 1) - 1) // st + 1 for p, k, dl, st in zip(padded, kernel, dil, stride)]
    offsets = np.indices(kernel).reshape(dims, -1)  # (dims, K)
    starts = np.indices(blocks).reshape(dims, -1)  # (dims, L)
    where = [offsets[d][:, None] * dil[d] + starts[d][None, :] * stride[d] for d in range(dims)]
    flat = np.ravel_multi_index(where, padded).reshape(-1)
    batch, channels = x.shape[0], x.shape[1] // int(np.prod(kernel))
    values = x.reshape(batch, channels, -1)
    index = _like(x, flat.astype(np.int64)).reshape(1, 1, -1).expand(values.shape)
    out = Tensor.zeros(batch, channels, int(np.prod(padded)), dtype=x.dtype, device=x.device)
    out = out.scatter_reduce(2, index, values, "sum").reshape(batch, channels, *padded)
    return out.shrink([None, None, *[(pads[d], pads[d] + size[d]) for d in range(dims)]])
