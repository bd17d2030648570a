"""ONNX's neural-network operators: convolution, pooling, normalisation, activations, dropout.

Every op is built from Tensor methods, so a model stays one lazy graph that fuses across node
boundaries. Padding is applied explicitly with ``Tensor.pad`` (ONNX pads may be asymmetric),
then the Tensor convolution or window op runs unpadded.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.engine import capture
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor

Pads = list[tuple[int, int]]


def text(value: Any) -> str:
    """A string attribute as str (onnx hands some out as bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def read_back(node: Node, value: Tensor, what: str) -> np.ndarray:
    """The values of ``value`` on the host, for an op whose result depends on them (a branch,
    an output length, a sample grid). Inside a TinyJit capture the read becomes a guard of the
    capture: a replay reads the same buffer again after its kernels, and where the values differ
    from the captured call's, the jit runs the model anew for that call (jit.py)."""
    array = value.numpy()
    if (recording := capture.active()) is not None:
        buffer = value._buffer()
        recording.read_back(buffer, buffer.numpy())
    return array


def host_value(node: Node, index: int, value: Any, what: str) -> np.ndarray | None:
    """Input ``index`` on the host: its known value (a constant of the model), else read back;
    None for an absent input."""
    if value is None:
        return None
    known = node.known_value(index)
    if known is not None:
        return np.asarray(known)
    return value if isinstance(value, np.ndarray) else read_back(node, value, what)


def _ints(node: Node, key: str, n: int, default: int) -> list[int]:
    value = node.attr(key)
    return [int(v) for v in value] if value else [default] * n


def _pads(
    node: Node,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> Pads:
    """(before, after) per spatial axis from ``pads`` or ``auto_pad``. SAME_* keeps
    ceil(in / stride) outputs; the odd cell goes after (UPPER) or before (LOWER)."""
    n, auto = len(kernel), text(node.attr("auto_pad", "NOTSET"))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pairs = []
        for i, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
            total = max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
            small, big = total // 2, total - total // 2
            pairs.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return pairs
    if auto == "VALID":
        return [(0, 0)] * n
    flat = _ints(node, "pads", 2 * n, 0)
    return [(flat[j], flat[j + n]) for j in range(n)]


def _window_attrs(node: Node, x: Tensor, kernel: Sequence[int]) -> tuple[list, list, Pads]:
    n = len(kernel)
    strides, dilations = _ints(node, "strides", n, 1), _ints(node, "dilations", n, 1)
    return strides, dilations, _pads(node, x.shape[2:], kernel, strides, dilations)


def _spatial_pad(x: Tensor, pads: Pads, value: float = 0.0) -> Tensor:
    if not any(b or a for b, a in pads):
        return x
    return x.pad([None, None] + list(pads), value=value)


# ---- convolution ---------------------------------------------------------------------------------


#: a depthwise convolution with at most this many taps is a sum of shifted slices (see below)
DEPTHWISE_TAPS = 49


@onnx_op("Conv")
def conv(node: Node, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """N-d cross-correlation, N from the weight's rank; explicit or automatic padding."""
    strides, dilations, pads = _window_attrs(node, x, w.shape[2:])
    x = _spatial_pad(x, pads)
    groups = int(node.attr("group", 1))
    depthwise = groups == x.shape[1] == w.shape[0] and w.shape[1] == 1
    if depthwise and math.prod(w.shape[2:]) <= DEPTHWISE_TAPS:
        out = depthwise_conv(x, w, strides, dilations)
        return out if b is None else out + _channel(b, out.ndim)
    return x.conv2d(w, b, strides, 0, dilations, groups)


def depthwise_conv(
    x: Tensor, w: Tensor, strides: Sequence[int], dilations: Sequence[int]
) -> Tensor:
    """A depthwise convolution (one filter per channel) of the padded x as the sum over the
    kernel's taps of a strided slice of x times that tap's weight per channel: one fused
    elementwise kernel over a contiguous copy of x. It beats the general windowed reduce on
    MobileNet-style 3x3 and 5x5 layers (PP-OCRv4 recognition 225 -> 160 ms, detection at
    320x320 198 -> 172 ms, one thread, measured in one run on a busy machine)."""
    x = x.contiguous()  # read by every tap: computed once, not once per tap
    kernel, spatial = w.shape[2:], x.shape[2:]
    outs = [
        (n - d * (k - 1) - 1) // s + 1
        for n, k, s, d in zip(spatial, kernel, strides, dilations, strict=True)
    ]
    total = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        window = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offset, dilations, outs, strides, strict=True)
        )
        tap = w[(slice(None), 0, *offset)].reshape((1, -1) + (1,) * len(kernel))
        term = x[(slice(None), slice(None), *window)] * tap
        total = term if total is None else total + term
    assert total is not None
    return total


@onnx_op("ConvInteger", since=10)
def conv_integer(
    node: Node, x: Tensor, w: Tensor, x_zero: Tensor | None = None, w_zero: Tensor | None = None
) -> Tensor:
    """Conv of (x - x_zero) and (w - w_zero) in int32; padding holds x_zero (a zero after the
    shift). A per-output-channel w_zero lies along the weight's first axis."""
    xi = x.cast(dtypes.int32) - (x_zero.cast(dtypes.int32) if x_zero is not None else 0)
    wi = w.cast(dtypes.int32)
    if w_zero is not None:
        wz = w_zero.cast(dtypes.int32)
        wi = wi - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.numel() > 1 else wz.reshape(()))
    return conv(node, xi, wi)


@onnx_op("ConvTranspose")
def conv_transpose(node: Node, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """The full transposed convolution, then cropped by ``pads`` (or to ``output_shape``) and
    grown by ``output_padding``: the cells it adds hold only the bias."""
    n, groups = w.ndim - 2, int(node.attr("group", 1))
    strides, dilations = _ints(node, "strides", n, 1), _ints(node, "dilations", n, 1)
    extra = _ints(node, "output_padding", n, 0)
    if list(w.shape[2:]) == strides and groups == 1 and set(dilations) == {1}:
        full = unpatchify(x, w)
    else:
        full = x.conv_transpose2d(w, None, strides, 0, 0, groups, dilations)
    auto, wanted = text(node.attr("auto_pad", "NOTSET")), node.attr("output_shape")
    if wanted or auto in ("SAME_UPPER", "SAME_LOWER"):
        sizes = x.shape[2:]
        targets = list(wanted)[-n:] if wanted else [i * s for i, s in zip(sizes, strides)]
        pads = []
        for size, target, e in zip(full.shape[2:], targets, extra, strict=True):
            total = size + e - int(target)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
        crops = [(-b_, -a_) for b_, a_ in pads]
        crops = [(c0, c1 + e) for (c0, c1), e in zip(crops, extra, strict=True)]
    else:
        flat = _ints(node, "pads", 2 * n, 0) if auto != "VALID" else [0] * 2 * n
        crops = [(-flat[j], -flat[j + n] + extra[j]) for j in range(n)]
    out = full.pad([None, None, *crops])
    return out if b is None else out + b.reshape((1, -1) + (1,) * n)


def unpatchify(x: Tensor, w: Tensor) -> Tensor:
    """The transposed convolution whose kernel equals its stride (2x2 stride 2 upsampling):
    the output patches do not overlap, so it is one matmul of the channels with the weight
    (C_in, C_out * prod(kernel)) and a reshuffle of each patch into place, instead of a
    convolution over an input spread with zeros."""
    kernel, spatial = tuple(w.shape[2:]), tuple(x.shape[2:])
    n, d = x.shape[0], len(kernel)
    # (C_out * prod(kernel), C_in) @ (C_in, prod(spatial)): the input as it is stored, and the
    # result with the spatial positions innermost, so the reshuffle reads runs of them
    flat = x.reshape(n, x.shape[1], -1)
    cols = w.reshape(w.shape[0], -1).transpose(0, 1).matmul(flat)
    # its own kernel: fused with the reshuffle below (and the epilogue after), the matmul was
    # computed in the output's order, with a division and a remainder per element (25x slower)
    cols = cols.contiguous().reshape(n, w.shape[1], *kernel, *spatial)  # (N, C_out, *k, *spatial)
    order = [0, 1] + [a for i in range(d) for a in (2 + d + i, 2 + i)]
    out = cols.permute(*order)  # (N, C_out, s0, k0, s1, k1, ...)
    return out.reshape(n, w.shape[1], *[s * k for s, k in zip(spatial, kernel, strict=True)])


# ---- pooling ---------------------------------------------------------------------------------


def _pool_geometry(node: Node, x: Tensor) -> tuple[list, list, list, Pads, Pads]:
    """(kernel, strides, dilations, given pads, pads with ceil_mode's extra cells after)."""
    kernel = [int(k) for k in node.attr("kernel_shape")]
    strides, dilations, pads = _window_attrs(node, x, kernel)
    grown = []
    for i, k, s, d, (b, a) in zip(x.shape[2:], kernel, strides, dilations, pads, strict=True):
        span, total = d * (k - 1) + 1, i + b + a
        if node.attr("ceil_mode", 0):
            o = -(-(total - span) // s) + 1
            if (o - 1) * s >= i + b:  # the last window must start inside the input
                o -= 1
        else:
            o = (total - span) // s + 1
        grown.append((b, a + max(0, (o - 1) * s + span - total)))
    return kernel, strides, dilations, pads, grown


def _windows(x: Tensor, kernel: list, strides: list, dilations: list) -> Tensor:
    """(N, C, *spatial) to (N, C, *out, *kernel)."""
    return x._pool(tuple(kernel), tuple(strides), tuple(dilations))


def _lowest(x: Tensor) -> float:
    return -math.inf if x.dtype.is_float else x.dtype.min


@onnx_op("MaxPool")
def max_pool(node: Node, x: Tensor) -> Any:
    """The largest value per window; the second output (``Indices``) is each maximum's position
    in the flattened input (row-major, or column-major spatial axes with storage_order 1)."""
    kernel, strides, dilations, _, grown = _pool_geometry(node, x)
    n = len(kernel)
    xp = _spatial_pad(x, grown, _lowest(x))
    win = _windows(xp, kernel, strides, dilations)
    axes = tuple(range(2 + n, 2 + 2 * n))
    values = win.max(axes)
    if len(node.outputs) < 2 or not node.outputs[1]:
        return values
    spatial = x.shape[2:]
    plane = math.prod(spatial)
    pos = np.arange(plane, dtype=np.int64).reshape(spatial)
    if node.attr("storage_order", 0):
        pos = np.arange(plane, dtype=np.int64).reshape(spatial[::-1]).T
    where = Tensor(pos, device=x.device).reshape((1, 1) + spatial)
    where = _spatial_pad(where, grown, plane)
    hit = win == values.reshape(values.shape + (1,) * n)
    index = hit.where(_windows(where, kernel, strides, dilations), plane).min(axes)
    base = Tensor.arange(x.shape[0] * x.shape[1], device=x.device, dtype=dtypes.int64) * plane
    return [values, index + base.reshape((x.shape[0], x.shape[1]) + (1,) * n)]


@onnx_op("AveragePool")
def average_pool(node: Node, x: Tensor) -> Tensor:
    """The mean per window; ``count_include_pad`` counts the given padding, never the cells
    ceil_mode adds."""
    kernel, strides, dilations, pads, grown = _pool_geometry(node, x)
    n = len(kernel)
    total = _windows(_spatial_pad(x, grown), kernel, strides, dilations).sum(
        tuple(range(2 + n, 2 + 2 * n))
    )
    ones = Tensor.ones((1, 1) + tuple(x.shape[2:]), device=x.device)
    if node.attr("count_include_pad", 0):
        ones = _spatial_pad(ones, pads, 1.0)
        ones = _spatial_pad(ones, [(0, g[1] - p[1]) for p, g in zip(pads, grown, strict=True)])
    else:
        ones = _spatial_pad(ones, grown)
    count = _windows(ones, kernel, strides, dilations).sum(tuple(range(2 + n, 2 + 2 * n)))
    return (total / count.cast(x.dtype)).cast(x.dtype)


@onnx_op("LpPool")
def lp_pool(node: Node, x: Tensor) -> Tensor:
    """(sum |x|^p)^(1/p) per window, padding zeros."""
    kernel, strides, dilations, _, grown = _pool_geometry(node, x)
    n, p = len(kernel), float(node.attr("p", 2))
    win = _windows(_spatial_pad(x.abs(), grown), kernel, strides, dilations)
    return (win**p).sum(tuple(range(2 + n, 2 + 2 * n))) ** (1 / p)


def _spatial_axes(x: Tensor) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@onnx_op("GlobalAveragePool")
def global_average_pool(node: Node, x: Tensor) -> Tensor:
    return x.mean(_spatial_axes(x), keepdim=True)


@onnx_op("GlobalMaxPool")
def global_max_pool(node: Node, x: Tensor) -> Tensor:
    return x.max(_spatial_axes(x), keepdim=True)


@onnx_op("GlobalLpPool")
def global_lp_pool(node: Node, x: Tensor) -> Tensor:
    p = float(node.attr("p", 2))
    return (x.abs() ** p).sum(_spatial_axes(x), keepdim=True) ** (1 / p)


# ---- normalisation -------------------------------------------------------------------------------


def _channel(t: Tensor, ndim: int) -> Tensor:
    """A per-channel vector shaped to broadcast along axis 1 of an ``ndim``-d tensor."""
    return t.reshape((1, -1) + (1,) * (ndim - 2))


def _param(t: Tensor, x: Tensor) -> Tensor:
    """A per-channel parameter, or a per-element one (opset 7-8 ``spatial=0``: shape (C, H, W))."""
    return t.reshape((1, *t.shape)) if t.ndim > 1 else _channel(t, x.ndim)


@onnx_op("BatchNormalization")
def batch_normalization(
    node: Node, x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor
) -> Any:
    """(x - mean) / sqrt(var + eps) * scale + bias per channel. In training mode (opset 14 on)
    the batch's own statistics normalise, and the running ones come back updated by momentum."""
    eps, momentum = float(node.attr("epsilon", 1e-5)), float(node.attr("momentum", 0.9))
    training = bool(node.attr("training_mode", 0)) and node.opset >= 14
    if training:
        axes = (0,) + _spatial_axes(x)
        mean_b, var_b = x.mean(axes), x.var(axes, correction=0)
        y = (x - _channel(mean_b, x.ndim)) / (_channel(var_b, x.ndim) + eps).sqrt()
        y = y * _channel(scale, x.ndim) + _channel(bias, x.ndim)
        running = [
            mean * momentum + mean_b * (1 - momentum),
            var * momentum + var_b * (1 - momentum),
        ]
        return [y.cast(x.dtype)] + running[: max(0, len(node.outputs) - 1)]
    invstd = (var + eps).rsqrt()
    y = (x - _param(mean, x)) * _param(invstd * scale, x) + _param(bias, x)
    return [y] + [mean, var][: max(0, len(node.outputs) - 1)] if len(node.outputs) > 1 else y


@onnx_op("InstanceNormalization")
def instance_normalization(node: Node, x: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    axes, eps = _spatial_axes(x), float(node.attr("epsilon", 1e-5))
    return x.layernorm(axes, eps) * _channel(scale, x.ndim) + _channel(bias, x.ndim)


def _stash(node: Node, x: Tensor) -> Tensor:
    """x in the precision ``stash_type`` asks the statistics to be computed in (1: float32)."""
    return x.cast(dtypes.float32) if int(node.attr("stash_type", 1)) == 1 else x


@onnx_op("LayerNormalization", since=17)
def layer_normalization(node: Node, x: Tensor, scale: Tensor, bias: Tensor | None = None) -> Any:
    """Normalise over axes ``axis``..end; also the mean and 1/std (kept dims) when asked."""
    axis = int(node.attr("axis", -1)) % x.ndim
    axes, eps = tuple(range(axis, x.ndim)), float(node.attr("epsilon", 1e-5))
    xs = _stash(node, x)
    mean = xs.mean(axes, keepdim=True)
    invstd = (((xs - mean) ** 2).mean(axes, keepdim=True) + eps).rsqrt()
    y = ((xs - mean) * invstd).cast(x.dtype) * scale
    y = y if bias is None else y + bias
    return (y, mean, invstd)[: max(1, len(node.outputs))]


@onnx_op("RMSNormalization", since=23)
def rms_normalization(node: Node, x: Tensor, scale: Tensor) -> Tensor:
    axis = int(node.attr("axis", -1)) % x.ndim
    axes, eps = tuple(range(axis, x.ndim)), float(node.attr("epsilon", 1e-5))
    xs = _stash(node, x)
    y = xs * ((xs * xs).mean(axes, keepdim=True) + eps).rsqrt()
    return y.cast(x.dtype) * scale


@onnx_op("GroupNormalization", since=18)
def group_normalization(node: Node, x: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    """Normalise each group of channels; scale and bias are per group before opset 21, per
    channel from 21 on."""
    groups, eps = int(node.attr("num_groups")), float(node.attr("epsilon", 1e-5))
    n, c = x.shape[0], x.shape[1]
    y = _stash(node, x).reshape(n, groups, -1).layernorm(-1, eps).reshape(x.shape).cast(x.dtype)
    if node.opset < 21:
        scale = scale.reshape(groups, 1).expand(groups, c // groups).reshape(c)
        bias = bias.reshape(groups, 1).expand(groups, c // groups).reshape(c)
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@onnx_op("LRN")
def lrn(node: Node, x: Tensor) -> Tensor:
    """x / (bias + alpha / size * (sum of squares over nearby channels)) ** beta."""
    size = int(node.attr("size"))
    alpha, beta = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    sq = (x * x).transpose(1, -1)
    sq = sq.pad([None] * (x.ndim - 1) + [((size - 1) // 2, size // 2)])
    total = sq._pool((size,), (1,), (1,)).sum(-1).transpose(1, -1)
    return x / (bias + alpha / size * total) ** beta


@onnx_op("MeanVarianceNormalization")
def mean_variance_normalization(node: Node, x: Tensor) -> Tensor:
    axes = tuple(int(a) for a in node.attr("axes", [0, 2, 3]))
    mean = x.mean(axes, keepdim=True)
    var = (x * x).mean(axes, keepdim=True) - mean * mean
    return (x - mean) / (var.sqrt() + 1e-9)


# ---- activations ---------------------------------------------------------------------------------


@onnx_op("PRelu")
def prelu(node: Node, x: Tensor, slope: Tensor) -> Tensor:
    return (x < 0).where(x * slope, x)


@onnx_op("ThresholdedRelu", since=10)
def thresholded_relu(node: Node, x: Tensor) -> Tensor:
    return (x > float(node.attr("alpha", 1.0))).where(x, 0)


@onnx_op("Shrink", since=9)
def shrink(node: Node, x: Tensor) -> Tensor:
    lambd, bias = float(node.attr("lambd", 0.5)), float(node.attr("bias", 0.0))
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)


@onnx_op("Celu", since=12)
def celu(node: Node, x: Tensor) -> Tensor:
    return x.celu(float(node.attr("alpha", 1.0)))


@onnx_op("HardSwish", since=14)
def hard_swish(node: Node, x: Tensor) -> Tensor:
    return x.hardswish()


@onnx_op("Swish", since=24)
def swish(node: Node, x: Tensor) -> Tensor:
    return x * (x * float(node.attr("alpha", 1.0))).sigmoid()


# ---- dropout -------------------------------------------------------------------------------------


def _dropout_out(node: Node, y: Tensor, keep: Tensor) -> Any:
    """y, and the mask when asked: bool from opset 10 on, of the input's type before."""
    if len(node.outputs) < 2 or not node.outputs[1]:
        return y
    return [y, keep if node.opset >= 10 else keep.cast(y.dtype)]


@onnx_op("Dropout")
def dropout(
    node: Node, x: Tensor, ratio: Tensor | None = None, training: Tensor | None = None
) -> Any:
    """The identity outside training; in training mode (opset 12 on) each element is kept with
    probability 1 - ratio and scaled by 1 / (1 - ratio). The mask output is bool. With a
    ``seed`` the mask is numpy's ``RandomState(seed)`` draw, as in ONNX's reference."""
    mode = host_value(node, 2, training, "training_mode")
    is_training = mode is not None and bool(mode.reshape(-1)[0])
    given = host_value(node, 1, ratio, "ratio")
    p = float(given.reshape(-1)[0]) if given is not None else float(node.attr("ratio", 0.5))
    if not is_training or p == 0:
        return _dropout_out(node, x, Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device))
    if node.attr("seed") is not None:  # seeded: the mask ONNX's reference draws, reproducible
        draws = np.random.RandomState(int(node.attr("seed"))).uniform(0, 1.0, x.shape)
        keep = Tensor(draws >= p, device=x.device)
    else:
        keep = Tensor.rand(x.shape, device=x.device) >= p
    return _dropout_out(node, keep.where(x / (1 - p), 0).cast(x.dtype), keep)


@onnx_op("SwiGLU", since=28)
def swiglu(node: Node, gate: Tensor, value: Tensor) -> Tensor:
    """Swish(gate) * value: gate * sigmoid(alpha * gate) * value."""
    return swish(node, gate) * value


@onnx_op("LpNormalization")
def lp_normalization(node: Node, x: Tensor) -> Tensor:
    """x divided by its L1 or L2 norm along ``axis``; an all-zero slice stays zero."""
    axis, p = int(node.attr("axis", -1)), int(node.attr("p", 2))
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
    return (norm == 0).where(0.0, x / norm).cast(x.dtype)


@onnx_op("MaxUnpool", since=9)
def max_unpool(
    node: Node, x: Tensor, indices: Tensor, output_shape: Tensor | None = None
) -> Tensor:
    """Put each value at its flat index (as MaxPool's Indices give it) in a zero tensor of the
    unpooled shape (a one-hot compare and sum); a larger ``output_shape`` pads zeros after."""
    kernel = [int(k) for k in node.attr("kernel_shape")]
    n = len(kernel)
    strides, flat = _ints(node, "strides", n, 1), _ints(node, "pads", 2 * n, 0)
    shape = list(x.shape[:2]) + [
        (size - 1) * s + k - flat[j] - flat[j + n]
        for j, (size, s, k) in enumerate(zip(x.shape[2:], strides, kernel, strict=True))
    ]
    total = math.prod(shape)
    cells = Tensor.arange(total, device=x.device, dtype=dtypes.int64).reshape(1, total)
    hot = indices.cast(dtypes.int64).reshape(-1, 1) == cells
    out = hot.where(x.reshape(-1, 1), 0).sum(0).cast(x.dtype).reshape(shape)
    if output_shape is None:
        return out
    wanted = [int(v) for v in np.asarray(host_value(node, 2, output_shape, "output_shape")).flat]
    return out.pad([(0, w - s) for w, s in zip(wanted, shape, strict=True)])


# ---- build-time checks of string attributes ------------------------------------------------------


def bad_choice(node: Node, choices: dict[str, tuple[str, tuple[str, ...]]]) -> str | None:
    """The message for the first string attribute whose value is not among its allowed ones
    (``choices``: attribute -> (default, allowed)), or None when all are fine. Used by the ops'
    ``onnx_check`` functions, so a bad value is reported when the runner is built."""
    for key, (default, allowed) in choices.items():
        value = text(node.attr(key, default))
        if value not in allowed:
            return (
                f"attribute {key}={value!r} is not supported; use one of "
                f"{', '.join(map(repr, allowed))}"
            )
    return None


@onnx_check("Conv")
@onnx_check("ConvTranspose")
@onnx_check("MaxPool")
@onnx_check("AveragePool")
@onnx_check("LpPool")
def check_auto_pad(node: Node) -> str | None:
    return bad_choice(
        node, {"auto_pad": ("NOTSET", ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"))}
    )
