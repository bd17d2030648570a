"""ONNX's image ops: Resize and Upsample, and sampling ops built from gathers.

Resize is separable: each resized axis is one 1-d interpolation. Its taps and weights depend
only on shapes and attributes, so they are computed on the host once (as the ONNX reference
defines them) and applied as a small dense matrix along the axis; nearest sampling with a whole
scale factor becomes a broadcast (repeat), any other nearest sampling a gather.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.errors import InvalidValue
from fusegrad.nn.onnx.ops_nn import bad_choice, host_value, text
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor
from fusegrad.tensor.nn_ops import cubic_kernel

# ---- Resize: the 1-d sampling grid ----------------------------------------------------------


def source_coords(
    mode: str, size_in: int, size_out: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The input coordinate of each output index under ``coordinate_transformation_mode``,
    and for ``tf_crop_and_resize`` which outputs fall outside the input (extrapolated)."""
    y = np.arange(size_out, dtype=np.float64)
    width = scale * size_in  # the exact (fractional) output length
    outside = None
    if mode == "align_corners":
        x = np.zeros(size_out) if width == 1 else y * (size_in - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi if roi is not None else (0.0, 1.0)
        if width == 1:
            x = np.full(size_out, (hi - lo) * (size_in - 1) / 2)
        else:
            x = y * (hi - lo) * (size_in - 1) / (width - 1)
        x = x + lo * (size_in - 1)
        outside = (x < 0) | (x > size_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(size_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise InvalidValue(
            f"Resize: unknown coordinate_transformation_mode {mode!r}; ONNX allows half_pixel, "
            "half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, "
            "tf_crop_and_resize"
        )
    return x, outside


def tap_weights(node: Node, mode: str, ratio: np.ndarray, scale: float) -> np.ndarray:
    """(outputs, taps) weights for the fractional positions ``ratio`` in (0, 1]."""
    antialias = bool(node.attr("antialias", 0)) and mode != "nearest"
    if mode == "nearest":
        how = text(node.attr("nearest_mode", "round_prefer_floor"))
        take_right = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": np.zeros_like(ratio, dtype=bool),
            "ceil": np.ones_like(ratio, dtype=bool),
        }[how]
        take_right = take_right | (ratio == 1)
        return np.stack([~take_right, take_right], axis=1).astype(np.float64)
    support = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    start = int(math.floor(-support / s) + 1)
    offsets = np.arange(start, 2 - start) if antialias else np.arange(1 - support, support + 1)
    args = (offsets[None, :] - ratio[:, None]) * s
    if mode == "linear":
        w = np.clip(1 - np.abs(args), 0, 1)
    else:
        w = cubic_kernel(args, float(node.attr("cubic_coeff_a", -0.75)))
    return w / w.sum(axis=1, keepdims=True) if antialias else w


def resize_matrix(
    node: Node, size_in: int, size_out: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The (size_out, size_in) interpolation matrix of one axis, and the extrapolated rows."""
    mode = text(node.attr("mode", "nearest"))
    coord = text(node.attr("coordinate_transformation_mode", "half_pixel"))
    x, outside = source_coords(coord, size_in, size_out, scale, roi)
    left = np.floor(x)
    ratio = np.where(x == left, 1.0, x - left)
    weights = tap_weights(node, mode, ratio, scale)
    n = weights.shape[1]
    # the n taps nearest x, ties to the left (as the reference's edge-padded neighbourhood)
    pad = -(-n // 2)
    xp = x + pad
    p = np.floor(xp)
    frac = xp - p
    if n % 2 == 0:
        first = p + np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        first = p + np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    taps = first.astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if node.attr("exclude_outside", 0):
        weights = np.where((taps < 0) | (taps >= size_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    matrix = np.zeros((size_out, size_in))
    rows = np.repeat(np.arange(size_out), n)
    np.add.at(matrix, (rows, np.clip(taps, 0, size_in - 1).reshape(-1)), weights.reshape(-1))
    return matrix, outside


# ---- Resize: applying it -------------------------------------------------------------------------


def _repeat_factor(matrix: np.ndarray) -> int | None:
    """r when ``matrix`` repeats each input r times (out[i] = in[i // r]), else None."""
    size_out, size_in = matrix.shape
    if size_out % size_in or not np.array_equal(np.unique(matrix), [0.0, 1.0]):
        return None
    r = size_out // size_in
    expected = np.eye(size_in).repeat(r, axis=0)
    return r if np.array_equal(matrix, expected) else None


def _along(x: Tensor, axis: int, matrix: np.ndarray) -> Tensor:
    """Apply the (out, in) ``matrix`` along ``axis`` of x."""
    size_out, size_in = matrix.shape
    if size_out == size_in and np.array_equal(matrix, np.eye(size_in)):
        return x
    r = _repeat_factor(matrix)
    if r is not None:
        return x.repeat_interleave(r, axis)
    if np.all((matrix == 0) | (matrix == 1)) and np.all(matrix.sum(axis=1) == 1):
        index = matrix.argmax(axis=1)
        return x[(slice(None),) * axis + (index,)]
    work = x if x.dtype.is_float else x.float()
    m = Tensor(matrix.T.astype(np.float32), device=x.device).cast(work.dtype)
    out = work.transpose(axis, -1).matmul(m).transpose(axis, -1)
    return out if x.dtype.is_float else out.round().clip(x.dtype.min, x.dtype.max).cast(x.dtype)


def host_array(node: Node, index: int, value: Any) -> np.ndarray | None:
    """Input ``index`` on the host (known, else read back); None when absent or empty."""
    array = host_value(node, index, value, f"input {index}")
    return None if array is None or array.size == 0 else array


def _geometry(
    node: Node, shape: tuple[int, ...], scales: np.ndarray | None, sizes: np.ndarray | None
) -> tuple[list[float], list[int], list[int]]:
    """(scale per axis, output size per axis, resized axes) from scales or sizes."""
    rank = len(shape)
    axes = [int(a) % rank for a in node.attr("axes", [])] or list(range(rank))
    scale, size = [1.0] * rank, list(shape)
    if sizes is not None:
        for a, s in zip(axes, sizes.tolist(), strict=True):
            scale[a], size[a] = s / shape[a], int(s)
        policy = text(node.attr("keep_aspect_ratio_policy", "stretch"))
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(scale[a] for a in axes)
            for a in axes:
                scale[a], size[a] = common, int(common * shape[a] + 0.5)
    elif scales is not None:
        for a, s in zip(axes, scales.tolist(), strict=True):
            scale[a], size[a] = float(s), int(math.floor(float(s) * shape[a]))
    else:
        raise InvalidValue(f"Resize node {node.name!r} has neither scales nor sizes; give one")
    return scale, size, axes


def resize(
    node: Node,
    x: Tensor,
    roi: np.ndarray | None,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
) -> Tensor:
    """Resize ``x`` one axis at a time; tf_crop_and_resize's outside points get
    ``extrapolation_value``."""
    scale, size, axes = _geometry(node, x.shape, scales, sizes)
    rank, outside_mask = x.ndim, None
    for a in axes:
        span = None
        if roi is not None:
            flat = roi.reshape(-1).tolist()
            k = len(flat) // 2
            i = axes.index(a) if k == len(axes) and k != rank else a
            span = (flat[i], flat[k + i])
        matrix, outside = resize_matrix(node, x.shape[a], size[a], scale[a], span)
        x = _along(x, a, matrix)
        if outside is not None and outside.any():
            shaped = outside.reshape((1,) * a + (-1,) + (1,) * (rank - a - 1))
            outside_mask = shaped if outside_mask is None else (outside_mask | shaped)
    if outside_mask is not None:
        fill = float(node.attr("extrapolation_value", 0.0))
        x = Tensor(outside_mask, device=x.device).where(fill, x).cast(x.dtype)
    return x


@onnx_op("Resize", since=10)
def resize_v10(node: Node, x: Tensor, scales: Tensor) -> Tensor:
    """Opset 10: scales only, asymmetric coordinates, nearest rounds down."""
    fixed = Node(
        node.name,
        node.op_type,
        node.domain,
        node.opset,
        {
            "mode": node.attr("mode", "nearest"),
            "nearest_mode": "floor",
            "coordinate_transformation_mode": "asymmetric",
        },
        node.outputs,
        known=node.known,
    )
    return resize(fixed, x, None, host_array(node, 1, scales), None)


@onnx_op("Resize", since=11)
def resize_v11(
    node: Node,
    x: Tensor,
    roi: Tensor | None = None,
    scales: Tensor | None = None,
    sizes: Tensor | None = None,
) -> Tensor:
    """Opset 11 on: roi, scales and sizes inputs (scales or sizes given, the other empty)."""
    return resize(
        node, x, host_array(node, 1, roi), host_array(node, 2, scales), host_array(node, 3, sizes)
    )


@onnx_op("Upsample", since=7)
def upsample(node: Node, x: Tensor, scales: Tensor | None = None) -> Tensor:
    """Resize by whole or fractional scales with asymmetric coordinates (deprecated op)."""
    factors = np.asarray(node.attr("scales")) if scales is None else host_array(node, 1, scales)
    fixed = Node(
        node.name,
        node.op_type,
        node.domain,
        node.opset,
        {
            "mode": "linear" if "linear" in text(node.attr("mode", "")) else "nearest",
            "nearest_mode": "floor",
            "coordinate_transformation_mode": "asymmetric",
        },
        node.outputs,
    )
    return resize(fixed, x, None, factors, None)


@onnx_op("CenterCropPad", since=18)
def center_crop_pad(node: Node, x: Tensor, shape: Tensor) -> Tensor:
    """Crop (start rounded down) or zero-pad (the odd cell after) each axis in ``axes`` to the
    target size, keeping the centre."""
    target = [int(v) for v in host_array(node, 1, shape).reshape(-1)]  # type: ignore[union-attr]
    axes = [int(a) % x.ndim for a in node.attr("axes", [])] or list(range(x.ndim))
    for a, size in zip(axes, target, strict=True):
        have = x.shape[a]
        if size < have:
            start = (have - size) // 2
            x = x[(slice(None),) * a + (slice(start, start + size),)]
        elif size > have:
            before = (size - have) // 2
            x = x.pad([None] * a + [(before, size - have - before)] + [None] * (x.ndim - a - 1))
    return x


# ---- GridSample ----------------------------------------------------------------------------------


def _reflect(v: Tensor, low: float, high: float) -> Tensor:
    """v folded back into [low, high] as often as needed (a mirror at each end)."""
    span = high - low

    def fold(dx: Tensor, near: float, far: float) -> Tensor:
        turns = (dx / span).trunc()
        rest = dx - turns * span
        even = (turns - (turns / 2).floor() * 2) == 0
        return even.where(
            near + rest if near == low else near - rest, far - rest if far == high else far + rest
        )

    below, above = fold(low - v, low, high), fold(v - high, high, low)
    return (v < low).where(below, (v > high).where(above, v))


def _cubic_weights(f: Tensor) -> list[Tensor]:
    a = -0.75
    near = lambda t: ((a + 2) * t - (a + 3)) * t * t + 1  # noqa: E731
    far = lambda t: ((a * t - 5 * a) * t + 8 * a) * t - 4 * a  # noqa: E731
    return [far(f + 1), near(f), near(1 - f), far(2 - f)]


def grid_taps(
    coord: Tensor, size: int, mode: str, padding: str, low: float, high: float
) -> list[tuple[Tensor, Tensor | None, Tensor | None]]:
    """For one spatial axis: (index, weight, inside) of each tap; ``inside`` is None unless
    padding is zeros (outside taps then weigh nothing)."""
    weights: list[Tensor | None] = [None]
    if mode == "nearest":
        starts = coord
    else:
        start = coord.floor()
        f = coord - start
        weights = list([1 - f, f] if mode == "linear" else _cubic_weights(f))
        starts = start - (1 if mode == "cubic" else 0)
    taps = []
    for k, w in enumerate(weights):
        index = starts + k
        inside = None
        if padding == "zeros":
            inside = (index >= 0) & (index < size)
        elif padding == "border":
            index = index.clip(0, size - 1)
        else:
            index = _reflect(index, low, high).trunc()
        taps.append((index, w, inside))
    return taps


def _normalised_axis(g: Tensor, size: int, mode: str, padding: str, align: bool) -> Tensor:
    """Grid values in [-1, 1] to input coordinates; border and reflection pull outside
    coordinates in first (nearest rounds half to even before that)."""
    x = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
    if mode == "nearest":
        x = x.round()
    low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if padding == "border":
        x = ((x < low) | (x > high)).where(x.clip(0, size - 1), x)
    elif padding == "reflection":
        x = _reflect(x, low, high)
    return x


@onnx_op("GridSample", since=16)
def grid_sample(node: Node, x: Tensor, grid: Tensor) -> Tensor:
    """Read x (N, C, *spatial) at the normalised positions in grid (N, *out, D), the last axis
    ordered x, y[, z]: nearest, (bi/tri)linear or cubic taps, gathered in one one-hot reduce."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(text(node.attr("mode", "")), "")
    mode = mode or text(node.attr("mode", "bilinear" if node.opset < 20 else "linear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding, align = text(node.attr("padding_mode", "zeros")), bool(node.attr("align_corners", 0))
    n, c, spatial = x.shape[0], x.shape[1], list(x.shape[2:])
    out = tuple(grid.shape[1:-1])
    g = grid.cast(dtypes.float32).reshape(n, -1, len(spatial))
    per_axis = []
    for axis, size in enumerate(spatial):
        coord = _normalised_axis(g[..., len(spatial) - 1 - axis], size, mode, padding, align)
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        per_axis.append(grid_taps(coord, size, mode, padding, low, high))
    flat, weight, inside = [], [], []
    for combo in itertools.product(*per_axis):
        index, w, ok = None, None, None
        for (i, wi, oki), stride, size in zip(combo, _strides(spatial), spatial, strict=True):
            term = (i.clip(0, size - 1) if oki is not None else i) * stride
            index = term if index is None else index + term
            w = wi if w is None else (w if wi is None else w * wi)
            ok = oki if ok is None else (ok if oki is None else ok & oki)
        assert index is not None  # (there is at least one spatial axis)
        flat.append(index)
        weight.append(w if w is not None else index.ones_like())
        inside.append(ok if ok is not None else index.ones_like().cast(dtypes.bool))
    k, q = len(flat), g.shape[1]
    index = Tensor.stack(flat, dim=-1).cast(dtypes.int32).reshape(n, 1, q * k)
    values = x.reshape(n, c, -1).gather(2, index.expand(n, c, q * k)).reshape(n, c, q, k)
    w = Tensor.stack([ok.where(w, 0.0) for w, ok in zip(weight, inside, strict=True)], dim=-1)
    y = (values.cast(dtypes.float32) * w.reshape(n, 1, q, k)).sum(-1)
    return y.reshape(n, c, *out).cast(x.dtype)


def _strides(spatial: list[int]) -> list[int]:
    return [math.prod(spatial[i + 1 :]) for i in range(len(spatial))]


# ---- AffineGrid and Col2Im --------------------------------------------------------------


@onnx_op("AffineGrid", since=20)
def affine_grid(node: Node, theta: Tensor, size: Tensor) -> Tensor:
    """The sampling grid of affine matrices theta for an output of ``size`` (N, C, *spatial)."""
    shape = [int(v) for v in host_array(node, 1, size).reshape(-1)]  # type: ignore[union-attr]
    return theta.affine_grid(shape, align_corners=bool(node.attr("align_corners", 0)))


def _spread(x: Tensor, axis: int, stride: int) -> Tensor:
    """Insert stride - 1 zeros between the elements along ``axis``."""
    if stride == 1:
        return x
    n = x.shape[axis]
    x = x.unsqueeze(axis + 1).pad(
        [None] * (axis + 1) + [(0, stride - 1)] + [None] * (x.ndim - axis - 1)
    )
    x = x.reshape(*x.shape[:axis], n * stride, *x.shape[axis + 2 :])
    return x[(slice(None),) * axis + (slice(0, (n - 1) * stride + 1),)]


@onnx_op("Col2Im", since=18)
def col2im(node: Node, cols: Tensor, image: Tensor, block: Tensor) -> Tensor:
    """Sum the sliding blocks in ``cols`` (N, C * prod(block), L) back into the image (N, C,
    *image): each kernel offset's column values, spread by the strides, land at that offset."""
    size = [int(v) for v in host_array(node, 1, image).reshape(-1)]  # type: ignore[union-attr]
    kernel = [int(v) for v in host_array(node, 2, block).reshape(-1)]  # type: ignore[union-attr]
    d = len(size)
    dil = [int(v) for v in node.attr("dilations", [])] or [1] * d
    strides = [int(v) for v in node.attr("strides", [])] or [1] * d
    pads = [int(v) for v in node.attr("pads", [])] or [0] * (2 * d)
    padded = [s + pads[i] + pads[i + d] for i, s in enumerate(size)]
    blocks = [
        (p - (dl * (k - 1) + 1)) // st + 1
        for p, k, dl, st in zip(padded, kernel, dil, strides, strict=True)
    ]
    n, c = cols.shape[0], cols.shape[1] // math.prod(kernel)
    grid = cols.reshape(n, c, *kernel, *blocks)
    total = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        part = grid[(slice(None), slice(None), *offset)]
        for axis in range(d):
            part = _spread(part, 2 + axis, strides[axis])
        before = [o * dl for o, dl in zip(offset, dil, strict=True)]
        part = part.pad(
            [None, None]
            + [(b, p - b - part.shape[2 + i]) for i, (b, p) in enumerate(zip(before, padded))]
        )
        total = part if total is None else total + part
    assert total is not None
    crop = tuple(slice(pads[i], pads[i] + size[i]) for i in range(d))
    return total[(slice(None), slice(None), *crop)]


# ---- build-time checks ---------------------------------------------------------------------------

COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)


@onnx_check("Resize")
def check_resize(node: Node) -> str | None:
    return bad_choice(
        node,
        {
            "mode": ("nearest", ("nearest", "linear", "cubic")),
            "coordinate_transformation_mode": ("half_pixel", COORDINATE_MODES),
            "nearest_mode": (
                "round_prefer_floor",
                ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
            ),
            "keep_aspect_ratio_policy": ("stretch", ("stretch", "not_larger", "not_smaller")),
        },
    )


@onnx_check("Upsample")
def check_upsample(node: Node) -> str | None:
    return bad_choice(node, {"mode": ("nearest", ("nearest", "linear", "bilinear"))})


@onnx_check("GridSample")
def check_grid_sample(node: Node) -> str | None:
    return bad_choice(
        node,
        {
            "mode": ("linear", ("nearest", "linear", "cubic", "bilinear", "bicubic")),
            "padding_mode": ("zeros", ("zeros", "border", "reflection")),
        },
    )
